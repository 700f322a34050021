// Replicated execution and all-reduce, on simulated TPU cores and on CPU
// devices.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
      // (8,128) tile. Two replicas are the two cores of chip 0: one on-chip
      // exchange and one latency. Eight span the 2x2 torus: the four
      // chips' phase over 2 links in each of 2 dimensions is slower than
      // the on-chip one, and the latency counts 1 on-chip step and 1 + 1
      // torus steps.
      const CostModel model{ChipConfig{}};
      EXPECT_DOUBLE_EQ(profiles[r].interconnect_seconds, model.AllReduceSeconds(4096, n));
      const double expected = n == 2 ? 2.0 * 1 / 2 * 4096 / 450e9 + 2.0 * 1 * 2e-6
                                     : 2.0 * 3 / 4 * 4096 / (4 * 82e9) + 2.0 * 3 * 2e-6;
      EXPECT_DOUBLE_EQ(profiles[r].interconnect_seconds, expected);
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

// Runs `text` (one f32 parameter) on `n` CPU devices, replica r with
// `input(r)`, and returns each replica's result values.
std::vector<std::vector<double>> OnCpus(absl::string_view text, int n,
                                        const std::function<ir::Literal(int)>& input) {
  cpu::CpuBackendOptions options;
  options.devices = n;
  cpu::CpuBackend cpus(options);
  std::vector<ir::Literal> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(input(r));
  auto out = RunReplicated(text, cpus.compiler(), cpus.devices(), inputs, nullptr);
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<std::vector<double>> values;
  if (!out.ok()) return values;
  for (const runtime::BufferPtr& b : *out) values.push_back(Values(ValueOf(b)));
  return values;
}

// v = [r, 10 r] on replica r.
ir::Literal Pair(int r) { return F32({2}, {static_cast<float>(r), 10.0f * r}); }

TEST(CollectivesTest, AllGatherConcatenatesInGroupOrder) {
  constexpr char kAll[] = R"(
HloModule g
ENTRY main {
  v = f32[2] parameter(0)
  ROOT g = f32[8] all-gather(v), dimensions={0}, replica_groups={}
})";
  for (const auto& got : OnCpus(kAll, 4, Pair)) {
    EXPECT_THAT(got, ::testing::ElementsAre(0, 0, 1, 10, 2, 20, 3, 30));
  }
  // Groups written out, and in the iota form ({0,2},{1,3}), in their order.
  for (const char* groups : {"{{2,0},{1,3}}", "[2,2]<=[2,2]T(1,0)"}) {
    const std::string text = absl::StrCat(R"(
HloModule g
ENTRY main {
  v = f32[2] parameter(0)
  ROOT g = f32[4] all-gather(v), dimensions={0}, replica_groups=)", groups, "\n}");
    const auto got = OnCpus(text, 4, Pair);
    ASSERT_EQ(got.size(), 4u);
    const bool reversed = groups[0] == '{';
    EXPECT_THAT(got[0], reversed ? ::testing::ElementsAre(2, 20, 0, 0)
                                 : ::testing::ElementsAre(0, 0, 2, 20));
    EXPECT_THAT(got[3], ::testing::ElementsAre(1, 10, 3, 30));
  }
}

TEST(CollectivesTest, ReduceScatterKeepsEachReplicasBlockOfTheSum) {
  constexpr char kText[] = R"(
HloModule rs
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  v = f32[2,4] parameter(0)
  ROOT rs = f32[2,2] reduce-scatter(v), dimensions={1}, replica_groups={{0,1}}, to_apply=add
})";
  // v[i][j] = 100 r + 4 i + j; the sum over two replicas is 100 + 8 i + 2 j.
  const auto got = OnCpus(kText, 2, [](int r) {
    std::vector<float> v;
    for (int i = 0; i < 8; ++i) v.push_back(100.0f * r + i);
    return F32({2, 4}, v);
  });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_THAT(got[0], ::testing::ElementsAre(100, 102, 108, 110));
  EXPECT_THAT(got[1], ::testing::ElementsAre(104, 106, 112, 114));
}

TEST(CollectivesTest, AllToAllExchangesBlocks) {
  constexpr char kArray[] = R"(
HloModule a2a
ENTRY main {
  v = f32[4] parameter(0)
  ROOT a = f32[4] all-to-all(v), dimensions={0}, replica_groups={}
})";
  const auto got = OnCpus(kArray, 4, [](int r) {
    return F32({4}, {10.0f * r, 10.0f * r + 1, 10.0f * r + 2, 10.0f * r + 3});
  });
  ASSERT_EQ(got.size(), 4u);
  // Replica p receives block p of every replica, in replica order.
  EXPECT_THAT(got[0], ::testing::ElementsAre(0, 10, 20, 30));
  EXPECT_THAT(got[2], ::testing::ElementsAre(2, 12, 22, 32));
  // The tuple form: operand j goes to replica j.
  constexpr char kTuple[] = R"(
HloModule a2a
ENTRY main {
  v = f32[2] parameter(0)
  w = f32[2] negate(v)
  ROOT a = (f32[2], f32[2]) all-to-all(v, w), replica_groups={{0,1}}
})";
  cpu::CpuBackendOptions options;
  options.devices = 2;
  cpu::CpuBackend cpus(options);
  auto out = RunReplicated(kTuple, cpus.compiler(), cpus.devices(), {Pair(1), Pair(2)}, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  // Replica 0 gets operand 0 of each: [1,10] and [2,20]; replica 1 operand 1,
  // the negations.
  EXPECT_THAT(Values(ElementOf((*out)[0], 0)), ::testing::ElementsAre(1, 10));
  EXPECT_THAT(Values(ElementOf((*out)[0], 1)), ::testing::ElementsAre(2, 20));
  EXPECT_THAT(Values(ElementOf((*out)[1], 0)), ::testing::ElementsAre(-1, -10));
  EXPECT_THAT(Values(ElementOf((*out)[1], 1)), ::testing::ElementsAre(-2, -20));
}

TEST(CollectivesTest, CollectivePermuteShiftsAndZeroesReplicasWithNoSource) {
  constexpr char kText[] = R"(
HloModule cp
ENTRY main {
  v = f32[2] parameter(0)
  ROOT p = f32[2] collective-permute(v), source_target_pairs={{0,1},{1,2},{2,3}}
})";
  const auto got = OnCpus(kText, 4, Pair);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_THAT(got[0], ::testing::ElementsAre(0, 0));
  EXPECT_THAT(got[1], ::testing::ElementsAre(0, 0));
  EXPECT_THAT(got[2], ::testing::ElementsAre(1, 10));
  EXPECT_THAT(got[3], ::testing::ElementsAre(2, 20));
}

TEST(CollectivesTest, AnAllReduceStartIsReadAsTheAllReduce) {
  constexpr char kText[] = R"(
HloModule ars
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  v = f32[2] parameter(0)
  s = f32[2] all-reduce-start(v), replica_groups=[1,3]<=[3], to_apply=add
  ROOT d = f32[2] all-reduce-done(s)
})";
  for (const auto& got : OnCpus(kText, 3, Pair)) {
    EXPECT_THAT(got, ::testing::ElementsAre(3, 30));
  }
}

TEST(CollectivesTest, CollectiveBroadcastSendsEachGroupsFirstMembersValue) {
  constexpr char kText[] = R"(
HloModule cb
ENTRY main {
  v = f32[2] parameter(0)
  ROOT b = f32[2] collective-broadcast(v), replica_groups={{2,0},{1,3}}
})";
  const auto got = OnCpus(kText, 4, Pair);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_THAT(got[0], ::testing::ElementsAre(2, 20));
  EXPECT_THAT(got[2], ::testing::ElementsAre(2, 20));
  EXPECT_THAT(got[1], ::testing::ElementsAre(1, 10));
  EXPECT_THAT(got[3], ::testing::ElementsAre(1, 10));
}

// A collective shaped for one group size fails clearly on groups of
// another, on every replica, without waiting for the timeout.
TEST(CollectivesTest, AGroupOfTheWrongSizeFailsClearly) {
  constexpr char kText[] = R"(
HloModule g
ENTRY main {
  v = f32[2] parameter(0)
  ROOT g = f32[8] all-gather(v), dimensions={0}, replica_groups={}
})";
  cpu::CpuBackendOptions options;
  options.devices = 2;
  cpu::CpuBackend cpus(options);
  auto out = RunReplicated(kText, cpus.compiler(), cpus.devices(), {Pair(0), Pair(1)}, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(),
              HasSubstr("shaped for groups of 4 but this replica's group has 2"));
}

// Collectives are priced on the simulated interconnect.
TEST(CollectivesTest, TpuCoresPriceTheInterconnect) {
  constexpr char kText[] = R"(
HloModule g
ENTRY main {
  v = f32[8,128] parameter(0)
  g = f32[32,128] all-gather(v), dimensions={0}, replica_groups={{0,1,2,3}}
  ROOT p = f32[32,128] collective-permute(g), source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
})";
  auto devices = TpuCores(4);
  TpuSimCompiler compiler({});
  std::vector<ir::Literal> inputs(4, ir::Literal(ir::Shape(ir::ElementType::kF32, {8, 128})));
  std::vector<runtime::ExecutionProfile> profiles;
  auto out = RunReplicated(kText, compiler, devices, inputs, &profiles);
  ASSERT_TRUE(out.ok()) << out.status();
  const ChipConfig chip;
  const CostModel model{chip};
  // The gather as half an all-reduce of its 64 KiB result; the permute as
  // its slowest path: 3 -> 0 goes from chip 1 at (1,0) to chip 0 at (0,0),
  // one link.
  const double gather = model.AllReduceSeconds(32 * 128 * 4 / 2, 4);
  const double permute = 32.0 * 128 * 4 / chip.ici_link_bandwidth + chip.interconnect_latency;
  EXPECT_DOUBLE_EQ(profiles[0].interconnect_seconds, gather + permute);
}

}  // namespace
}  // namespace kiln::tpusim
