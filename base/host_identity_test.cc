#include "base/host_identity.h"

#include <sched.h>
#include <unistd.h>

#include <fstream>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(HostIdentityTest, BootIdIsTheKernelsAndStable) {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  if (!in) GTEST_SKIP() << "this kernel has no boot id";
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(HostBootId(), line);  // the newline is dropped
  EXPECT_EQ(HostBootId().size(), 36u) << HostBootId();  // a UUID
  EXPECT_EQ(&HostBootId(), &HostBootId());
}

TEST(HostIdentityTest, CoreCountFollowsTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(getpid(), sizeof(set), &set), 0);
  EXPECT_EQ(AllowedCoreCount(), CPU_COUNT(&set));
  EXPECT_GE(AllowedCoreCount(), 1);
}

}  // namespace
}  // namespace kiln
