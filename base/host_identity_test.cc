#include "base/host_identity.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(HostIdentityTest, HostIdIsAHashOfTheBootIdAndStable) {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  if (!in) GTEST_SKIP() << "this kernel has no boot id";
  std::string boot;
  std::getline(in, boot);
  ASSERT_EQ(HostId().size(), 16u) << HostId();
  EXPECT_EQ(HostId().find_first_not_of("0123456789abcdef"), std::string::npos) << HostId();
  EXPECT_EQ(boot.find(HostId()), std::string::npos);  // the boot id is not shown
  EXPECT_EQ(&HostId(), &HostId());
}

TEST(HostIdentityTest, AllowedCpusFollowTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(getpid(), sizeof(set), &set), 0);
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_EQ(static_cast<int>(cpus.size()), CPU_COUNT(&set));
  for (int cpu : cpus) EXPECT_TRUE(CPU_ISSET(cpu, &set)) << cpu;
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
}

}  // namespace
}  // namespace kiln
