// Replicated execution and all-reduce, on simulated TPU cores and on CPU
// devices.
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/host/test_util.h"
#include "runtime/replicated.h"
#include "runtime/tpusim/tpusim_device.h"

namespace kiln::tpusim {
namespace {

using host::F32;
using host::Values;
using ::testing::HasSubstr;

constexpr char kSumAndId[] = R"(
HloModule replicated
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  v = f32[3] parameter(0)
  sum = f32[3] all-reduce(v), replica_groups={}, to_apply=add
  id = u32[] replica-id()
  ROOT out = (f32[3], u32[]) tuple(sum, id)
})";

constexpr char kPairs[] = R"(
HloModule pairs
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  v = f32[2] parameter(0)
  ROOT sum = f32[2] all-reduce(v), replica_groups={{0,1},{2,3}}, to_apply=add
})";

std::vector<std::unique_ptr<runtime::Device>> TpuCores(int n) {
  std::vector<std::unique_ptr<runtime::Device>> devices;
  for (int i = 0; i < n; ++i) {
    TpuSimDeviceOptions options;
    options.ordinal = i;
    devices.push_back(std::make_unique<TpuSimDevice>(options));
  }
  return devices;
}

// A result's value (host buffers only).
ir::Literal ValueOf(const runtime::BufferPtr& buffer) {
  return host::HostBuffer::Cast(buffer)->ToLiteral();
}
ir::Literal ElementOf(const runtime::BufferPtr& buffer, int index) {
  return ValueOf(buffer->tuple_element(index));
}

// Compiles `text` once with `compiler` and runs it on all `devices`,
// replica i with `inputs[i]`.
absl::StatusOr<std::vector<runtime::BufferPtr>> RunReplicated(
    absl::string_view text, runtime::Compiler& compiler,
    const std::vector<std::unique_ptr<runtime::Device>>& devices,
    const std::vector<ir::Literal>& inputs, std::vector<runtime::ExecutionProfile>* profiles) {
  auto module = ir::ParseModule(text);
  if (!module.ok()) return module.status();
  if (absl::Status st = ir::Verify(**module); !st.ok()) return st;
  auto exe = compiler.Compile(**module, {});
  if (!exe.ok()) return exe.status();
  std::vector<runtime::ReplicaRun> runs(devices.size());
  if (profiles != nullptr) profiles->resize(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    runs[i].device = devices[i].get();
    auto arg = devices[i]->TransferToDevice(inputs[i]);
    if (!arg.ok()) return arg.status();
    runs[i].args = {*arg};
    if (profiles != nullptr) runs[i].options.profile = &(*profiles)[i];
  }
  return runtime::ExecuteReplicated(**exe, runs, absl::Seconds(10));
}

TEST(ReplicationTest, AllReduceOfIdenticalInputsIsNTimesTheValueOnTpuCores) {
  for (int n : {2, 8}) {
    auto devices = TpuCores(n);
    TpuSimCompiler compiler({});
    std::vector<ir::Literal> inputs(n, F32({3}, {1.5f, -2.0f, 4.0f}));
    std::vector<runtime::ExecutionProfile> profiles;
    auto out = RunReplicated(kSumAndId, compiler, devices, inputs, &profiles);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int r = 0; r < n; ++r) {
      EXPECT_THAT(Values(ElementOf((*out)[r], 0)),
                  ::testing::ElementsAre(1.5 * n, -2.0 * n, 4.0 * n));
      EXPECT_EQ(Values(ElementOf((*out)[r], 1))[0], r);
      // The interconnect is priced for n replicas: one all-reduce of one
      // (8,128) tile.
      const CostModel model{ChipConfig{}};
      EXPECT_DOUBLE_EQ(profiles[r].interconnect_seconds, model.AllReduceSeconds(4096, n));
      EXPECT_DOUBLE_EQ(profiles[r].interconnect_seconds,
                       2.0 * (n - 1) / n * 4096 / 70e9 + 2.0 * (n - 1) * 2e-6);
    }
  }
}

TEST(ReplicationTest, AllReduceOnSeveralCpuDevices) {
  cpu::CpuBackendOptions options;
  options.devices = 3;
  cpu::CpuBackend cpus(options);
  std::vector<ir::Literal> inputs = {F32({3}, {1, 2, 3}), F32({3}, {10, 20, 30}),
                                     F32({3}, {100, 200, 300})};
  auto out = RunReplicated(kSumAndId, cpus.compiler(), cpus.devices(), inputs, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(Values(ElementOf((*out)[r], 0)),
                ::testing::ElementsAre(111, 222, 333));
  }
}

// A group of one still takes part in each round, so the other groups do not
// wait for it until the collective timeout.
TEST(ReplicationTest, AGroupOfOneDoesNotStallTheOthers) {
  constexpr char kOneAndTwo[] = R"(
HloModule one_and_two
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  v = f32[2] parameter(0)
  ROOT sum = f32[2] all-reduce(v), replica_groups={{0},{1,2}}, to_apply=add
})";
  cpu::CpuBackendOptions options;
  options.devices = 3;
  cpu::CpuBackend cpus(options);
  // Before, replicas 1 and 2 waited for replica 0 until the collective
  // timeout and failed with DEADLINE_EXCEEDED.
  auto out = RunReplicated(kOneAndTwo, cpus.compiler(), cpus.devices(),
                           {F32({2}, {1, 1}), F32({2}, {2, 2}), F32({2}, {4, 4})}, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values(ValueOf((*out)[0])), ::testing::ElementsAre(1, 1));
  EXPECT_THAT(Values(ValueOf((*out)[1])), ::testing::ElementsAre(6, 6));
  EXPECT_THAT(Values(ValueOf((*out)[2])), ::testing::ElementsAre(6, 6));
}

TEST(ReplicationTest, ReplicaGroupsReduceSeparately) {
  auto devices = TpuCores(4);
  TpuSimCompiler compiler({});
  std::vector<ir::Literal> inputs = {F32({2}, {1, 1}), F32({2}, {2, 2}), F32({2}, {4, 4}),
                                     F32({2}, {8, 8})};
  auto out = RunReplicated(kPairs, compiler, devices, inputs, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values(ValueOf((*out)[0])), ::testing::ElementsAre(3, 3));
  EXPECT_THAT(Values(ValueOf((*out)[1])), ::testing::ElementsAre(3, 3));
  EXPECT_THAT(Values(ValueOf((*out)[2])), ::testing::ElementsAre(12, 12));
  EXPECT_THAT(Values(ValueOf((*out)[3])), ::testing::ElementsAre(12, 12));
}

TEST(ReplicationTest, GroupsNamingMissingReplicasFailCleanly) {
  auto devices = TpuCores(2);
  TpuSimCompiler compiler({});
  auto out = RunReplicated(kPairs, compiler, devices, {F32({2}, {1, 1}), F32({2}, {2, 2})}, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("names replica 2 but 2 replicas run"));
}

TEST(ReplicationTest, OneFailingReplicaStopsTheOthers) {
  // Replica 1's HBM cannot hold the broadcast; replica 0 would wait for it
  // at the all-reduce forever without the abort.
  constexpr char kGrow[] = R"(
HloModule grow
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  v = f32[] parameter(0)
  big = f32[512,512] broadcast(v), dimensions={}
  ROOT sum = f32[512,512] all-reduce(big), replica_groups={}, to_apply=add
})";
  std::vector<std::unique_ptr<runtime::Device>> devices;
  devices.push_back(std::make_unique<TpuSimDevice>(TpuSimDeviceOptions{}));
  TpuSimDeviceOptions small;
  small.ordinal = 1;
  small.chip.hbm_bytes = 256 << 10;
  devices.push_back(std::make_unique<TpuSimDevice>(small));
  TpuSimCompiler compiler({});
  auto out = RunReplicated(kGrow, compiler, devices, {F32({}, {1}), F32({}, {1})}, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(out.status().message(), HasSubstr("replica 1 on tpu:1"));
}

}  // namespace
}  // namespace kiln::tpusim
