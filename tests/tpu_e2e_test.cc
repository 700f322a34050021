// The simulated TPU through a real kiln-server: padded memory accounting,
// out-of-HBM refusals while the server keeps serving, replicated execution
// with all-reduce over gRPC, the profile in the reply and the metrics, and
// data-parallel LeNet steps on eight simulated cores.
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/data_parallel.h"
#include "client/lazy.h"
#include "compiler/ir/hlo_parser.h"
#include "examples/fashion_mnist/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

using client::Client;
using ::testing::HasSubstr;

constexpr int64_t kHbm = 1 << 20;

ir::Literal F32(std::vector<float> v) {
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
}

class TpuE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<testing::ServerProcess>(std::vector<std::string>{
        "--devices=cpu:1,tpu:8", absl::StrCat("--backend_config=tpu.hbm_bytes=", kHbm)});
    ASSERT_FALSE(server_->address().empty()) << "kiln-server did not start";
    auto c = Client::Connect(server_->address());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  int64_t Counter(const std::string& name) {
    auto m = client_->Metrics();
    for (const auto& counter : m->counters()) {
      if (counter.name() == name) return counter.value();
    }
    return 0;
  }
  std::unique_ptr<testing::ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

// A dry run through a real server: the estimate of an all-reduce grows
// with the replicas it is priced for, a count the server does not have is
// refused, and a cpu device has no cost model.
TEST_F(TpuE2ETest, DryRunsPriceWithoutRunning) {
  auto module = ir::ParseModule(R"(
HloModule m
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[1024,128] parameter(0)
  ROOT r = f32[1024,128] all-reduce(x), replica_groups={}, to_apply=sum
})");
  ASSERT_TRUE(module.ok()) << module.status();
  auto one = client_->Estimate(**module, "tpu:0", 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->interconnect_seconds(), 0);
  auto eight = client_->Estimate(**module, "tpu:0", 8);
  ASSERT_TRUE(eight.ok()) << eight.status();
  EXPECT_GT(eight->interconnect_seconds(), 0);
  auto too_many = client_->Estimate(**module, "tpu:0", 2147483647);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.status().message(), HasSubstr("estimate_replicas must be 0 to 8"));
  auto cpu = client_->Estimate(**module, "cpu:0", 1);
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kUnimplemented);
  // The server still serves.
  EXPECT_TRUE(client_->Estimate(**module, "tpu:0", 2).ok());
}

TEST_F(TpuE2ETest, DevicesAreListedWithTheirHbm) {
  std::vector<std::string> tpus;
  for (const auto& d : client_->devices()) {
    if (d.kind != "tpu") continue;
    tpus.push_back(d.name);
    EXPECT_EQ(d.memory_capacity_bytes, kHbm);
  }
  EXPECT_THAT(tpus, ::testing::ElementsAre("tpu:0", "tpu:1", "tpu:2", "tpu:3", "tpu:4", "tpu:5",
                                           "tpu:6", "tpu:7"));
  EXPECT_EQ(client_->default_device().name, "tpu:0") << "the first accelerator";
}

TEST_F(TpuE2ETest, PaddedAccountingAndOutOfHbmRefusalKeepTheServerServing) {
  // f32[3,5] takes one (8,128) tile: 4096 bytes, not 60.
  auto small = client_->TransferToDevice(ir::Literal(ir::Shape(ir::ElementType::kF32, {3, 5})),
                                         "tpu:1");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(client_->MemoryInfo("tpu:1")->bytes_in_use(), 4096);
  auto big = client_->TransferToDevice(ir::Literal(ir::Shape(ir::ElementType::kF32, {512, 256})),
                                       "tpu:1");
  ASSERT_TRUE(big.ok()) << big.status();
  // 4096 + 2 * 524288 bytes pass the 1 MiB.
  auto refused = client_->TransferToDevice(
      ir::Literal(ir::Shape(ir::ElementType::kF32, {512, 256})), "tpu:1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("largest: f32[512,256] (524288 bytes)"));
  // A program whose result does not fit fails the same way.
  auto module = ir::ParseModule(R"(HloModule grow
ENTRY main {
  x = f32[] parameter(0)
  ROOT b = f32[1024,512] broadcast(x), dimensions={}
})");
  ASSERT_TRUE(module.ok());
  auto exe = client_->Compile(**module, "tpu:1");
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto scalar = client_->TransferToDevice(ir::Literal(ir::Shape(ir::ElementType::kF32, {})), "tpu:1");
  ASSERT_TRUE(scalar.ok());
  auto run = client_->Execute(**exe, {*scalar});
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kResourceExhausted);
  // Still serving: the same core takes what fits.
  auto fits = client_->TransferToDevice(F32({1, 2, 3}), "tpu:1");
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(client_->TransferFromDevice(**fits)->GetAsDouble(2), 3);
}

TEST_F(TpuE2ETest, ReplicatedAllReduceOverGrpcReportsProfiles) {
  auto module = ir::ParseModule(R"(HloModule sum
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(x), replica_groups={}, to_apply=add
})");
  ASSERT_TRUE(module.ok());
  auto exe = client_->Compile(**module, "tpu:0");
  ASSERT_TRUE(exe.ok()) << exe.status();
  std::vector<client::ReplicaArguments> replicas;
  for (int r = 0; r < 8; ++r) {
    const std::string device = absl::StrCat("tpu:", r);
    auto x = client_->TransferToDevice(F32({1, 2, 3, 4}), device);
    ASSERT_TRUE(x.ok());
    replicas.push_back({device, {*x}});
  }
  client::ExecuteOptions options;
  options.inline_result_max_bytes = 64;
  auto result = client_->ExecuteReplicated(**exe, replicas, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->replicas.size(), 8u);
  for (int r = 0; r < 8; ++r) {
    const auto& out = result->replicas[r];
    ASSERT_TRUE(out.inline_values[0].has_value());
    EXPECT_EQ(out.inline_values[0]->GetAsDouble(3), 32) << "replica " << r;
    EXPECT_EQ(out.outputs[0]->device(), absl::StrCat("tpu:", r));
    ASSERT_TRUE(out.profile.has_value());
    EXPECT_GT(out.profile->interconnect_seconds(), 0);
  }
  ASSERT_TRUE(result->profile.has_value());
  EXPECT_GT(result->profile->simulated_seconds(), 0);
  EXPECT_EQ(Counter("replicated_executes"), 1);
  EXPECT_GT(Counter("tpu_simulated_nanos_interconnect"), 0);
  // Arguments on the wrong device and a device of another kind are refused.
  std::vector<client::ReplicaArguments> wrong = replicas;
  std::swap(wrong[0].args, wrong[1].args);
  auto refused = client_->ExecuteReplicated(**exe, wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("replica 0, argument 0 lives on tpu:1"));
  auto cpu_arg = client_->TransferToDevice(F32({1, 2, 3, 4}), "cpu:0");
  auto other_kind = client_->ExecuteReplicated(**exe, {{"cpu:0", {*cpu_arg}}});
  ASSERT_FALSE(other_kind.ok());
  EXPECT_THAT(other_kind.status().message(), HasSubstr("compiled for tpu devices"));
}

TEST_F(TpuE2ETest, ReducedPrecisionTensorsAreStoredAsBf16Tiles) {
  auto ctx = client::LazyContext::Create(client_.get());
  const int64_t before = client_->MemoryInfo("tpu:2")->bytes_in_use();
  // A small value rides along with the first execution that reads it, and
  // the server keeps it (the tensor can still read it).
  client::Tensor x = ctx->FromLiteral(ir::Literal(ir::Shape(ir::ElementType::kF32, {20, 200})),
                                      "tpu:2");
  EXPECT_EQ(client_->MemoryInfo("tpu:2")->bytes_in_use() - before, 0);
  client::Tensor half = x.ToReducedPrecision();
  ASSERT_TRUE(ctx->Barrier("tpu:2").ok());
  ASSERT_TRUE(client_->FlushReleases().ok());
  // f32[20,200]: 24 rows (tiles of 8) x 256 lanes x 4 bytes; bf16[20,200]
  // next to it: 32 rows (tiles of 16) x 256 lanes x 2 bytes.
  EXPECT_EQ(half.storage_type(), ir::ElementType::kBF16);
  EXPECT_EQ(half.dtype(), ir::ElementType::kF32);
  EXPECT_EQ(client_->MemoryInfo("tpu:2")->bytes_in_use() - before, 24 * 256 * 4 + 32 * 256 * 2);
}

TEST_F(TpuE2ETest, EachCoreHasItsOwnInfeed) {
  auto module = ir::ParseModule(R"(HloModule feed
ENTRY main {
  t = token[] after-all()
  in = (f32[2], token[]) infeed(t)
  ROOT x = f32[2] get-tuple-element(in), index=0
})");
  ASSERT_TRUE(module.ok());
  auto exe = client_->Compile(**module, "tpu:3");
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto in = client_->OpenInfeed("tpu:3");
  ASSERT_TRUE(in.ok());
  ASSERT_TRUE((*in)->Write(F32({5, 6})).ok());
  ASSERT_TRUE((*in)->Finish().ok());
  client::ExecuteOptions options;
  options.inline_result_max_bytes = 64;
  options.infeed_timeout = absl::Milliseconds(200);
  auto fed = client_->Execute(**exe, {}, options);
  ASSERT_TRUE(fed.ok()) << fed.status();
  EXPECT_EQ(fed->inline_values[0]->GetAsDouble(1), 6);
  // The value went to tpu:3's queue: the same program on tpu:4 starves.
  auto other = client_->Compile(**module, "tpu:4");
  ASSERT_TRUE(other.ok());
  auto starved = client_->Execute(**other, {}, options);
  ASSERT_FALSE(starved.ok());
  EXPECT_EQ(starved.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(TpuE2ETest, F64ModulesAreRefusedAtCompile) {
  auto module = ir::ParseModule(R"(HloModule wide
ENTRY main {
  x = f64[2] parameter(0)
  ROOT y = f64[2] add(x, x)
})");
  ASSERT_TRUE(module.ok());
  auto exe = client_->Compile(**module, "tpu:0");
  ASSERT_FALSE(exe.ok());
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(exe.status().message(), HasSubstr("instruction x"));
  EXPECT_THAT(exe.status().message(), HasSubstr("TPUs have no f64"));
  EXPECT_TRUE(client_->Compile(**module, "cpu:0").ok());
}

TEST(TpuTrainingE2ETest, DataParallelLeNetStepsOnEightCoresStayInStep) {
  testing::ServerProcess server({"--devices=cpu:1,tpu:8"});
  ASSERT_FALSE(server.address().empty()) << "kiln-server did not start";
  auto client = Client::Connect(server.address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto ctx = client::LazyContext::Create(client->get());
  auto devices = examples::ReplicaDevices(**client, "tpu", 8);
  ASSERT_TRUE(devices.ok()) << devices.status();
  auto model = examples::MakeModel("lenet", ctx.get(), (*devices)[0], 1);
  ASSERT_TRUE(model.ok());
  examples::TrainerOptions options;
  options.learning_rate = 0.04;
  options.replica_devices = *devices;
  examples::Trainer trainer(ctx.get(), model->get(), (*devices)[0], options);
  std::vector<float> images(64 * 784);
  std::vector<int32_t> labels(64);
  for (size_t i = 0; i < images.size(); ++i) images[i] = float((i * 37) % 255) / 255.0f;
  for (int i = 0; i < 64; ++i) labels[i] = i % 10;
  double first = 0, last = 0;
  for (int step = 0; step < 4; ++step) {
    auto r = trainer.TrainStep(images.data(), labels.data(), 64);
    ASSERT_TRUE(r.ok()) << r.status();
    (step == 0 ? first : last) = r->loss;
  }
  EXPECT_LT(last, first) << "repeating one batch lowers its loss";
  client::DataParallel dp(ctx.get(), *devices);
  for (const client::Tensor& p : (*model)->params()) {
    EXPECT_EQ(p.replica_count(), 8);
    EXPECT_TRUE(dp.CheckInStep(p).ok());
  }
  EXPECT_EQ(ctx->metrics().uncached_compiles, 1);
  ASSERT_TRUE(ctx->metrics().last_profile.has_value());
  // Eight examples per core: the matrix products are small and bound by HBM.
  EXPECT_GT(ctx->metrics().last_profile->matrix_flops(), 0);
  EXPECT_GT(ctx->metrics().last_profile->hbm_seconds(), 0);
  EXPECT_GT(ctx->metrics().last_profile->interconnect_seconds(), 0);
}

}  // namespace
}  // namespace kiln
