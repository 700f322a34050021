// The client library over the embedded service.
#include "client/client.h"

#include "absl/time/clock.h"
#include "base/host_identity.h"
#include "compiler/ir/hlo_parser.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"
#include "runtime/compute_threads.h"

namespace kiln::client {
namespace {

std::unique_ptr<ir::Module> Parse(const char* text) {
  auto m = ir::ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

ir::Literal Vec(std::vector<float> v) {
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
}

TEST(ClientTest, DevicesAndDefault) {
  auto client = embedded::Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_EQ((*client)->devices().size(), 1u);
  EXPECT_EQ((*client)->devices()[0].name, "cpu:0");
  EXPECT_EQ((*client)->devices()[0].kind, "cpu");
  EXPECT_EQ((*client)->default_device().name, "cpu:0");
}

// The handshake says how many host threads a device computes with and
// which kernel the server runs on: a client beside it learns that a team
// as large as the cores leaves it none of its own.
TEST(ClientTest, SaysWhenTheDevicesComputeTeamFillsTheSharedCores) {
  const int before = runtime::ComputeThreads();
  const int cores = static_cast<int>(AllowedCpus().size());
  runtime::SetComputeThreads(cores);
  {
    auto client = embedded::Connect();
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->devices()[0].compute_threads, cores);
    EXPECT_EQ((*client)->ComputeFillsSharedCores("cpu:0"), !HostId().empty());
    EXPECT_FALSE((*client)->ComputeFillsSharedCores("cpu:7"));  // no such device
  }
  if (cores >= 2) {
    runtime::SetComputeThreads(cores - 1);
    auto client = embedded::Connect();
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->devices()[0].compute_threads, cores - 1);
    EXPECT_FALSE((*client)->ComputeFillsSharedCores("cpu:0"));
  }
  runtime::SetComputeThreads(before);
}

TEST(ClientTest, TransferCompileExecuteAndReleaseFreesMemory) {
  auto client = *embedded::Connect();
  {
    auto x = client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
    ASSERT_TRUE(x.ok()) << x.status();
    auto exe = client->Compile(*Parse("ENTRY e {\n x = f32[3] parameter(0)\n ROOT y = f32[3] add(x, x)\n}"),
                               "cpu:0");
    ASSERT_TRUE(exe.ok()) << exe.status();
    EXPECT_FALSE((*exe)->cache_hit());
    ExecuteOptions options;
    options.inline_result_max_bytes = 1024;
    auto r = client->Execute(**exe, {*x}, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->inline_values[0].has_value());
    EXPECT_EQ(r->inline_values[0]->data<float>()[2], 6.0f);
    auto back = client->TransferFromDevice(*r->outputs[0]);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->data<float>()[1], 4.0f);
    EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 24);
  }
  // Every handle went out of scope: after the batched release, nothing is left.
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 0);
}

int64_t Counter(Client& client, const std::string& name) {
  absl::StatusOr<v1::MetricsResponse> m = client.Metrics();
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return -1;
  for (const v1::CounterProto& c : m->counters()) {
    if (c.name() == name) return c.value();
  }
  return 0;
}

// Waits up to 10 s for the device to hold nothing.
bool AllReleased(Client& client) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (client.MemoryInfo("cpu:0")->bytes_in_use() > 0) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

std::vector<std::shared_ptr<DeviceBuffer>> Buffers(Client& client, int count, int64_t elements) {
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<std::shared_ptr<DeviceBuffer>> b = client.TransferToDevice(
        ir::Literal(ir::Shape(ir::ElementType::kF32, {elements})), "cpu:0");
    EXPECT_TRUE(b.ok()) << b.status();
    if (b.ok()) buffers.push_back(*std::move(b));
  }
  return buffers;
}

// Small releases are gathered for up to 20 ms (a training step drops its
// loss every few milliseconds) and sent together, without a flush; large
// ones are sent within a few milliseconds.
TEST(ClientTest, SmallReleasesAreGatheredAndAllAreSentWithoutAFlush) {
  auto client = *embedded::Connect();
  const int64_t calls = Counter(*client, "release_calls");
  const int64_t released = Counter(*client, "handles_released");
  std::vector<std::shared_ptr<DeviceBuffer>> small = Buffers(*client, 16, 3);
  ASSERT_EQ(small.size(), 16u);
  // One every millisecond or more.
  const absl::Time start = absl::Now();
  while (!small.empty()) {
    small.pop_back();
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Duration dropping = absl::Now() - start;
  ASSERT_TRUE(AllReleased(*client));
  // A call per 20 ms of dropping, and the last one; sent every 2 ms they
  // were one call per two drops.
  EXPECT_LE(Counter(*client, "release_calls") - calls,
            2 + absl::ToInt64Milliseconds(dropping) / 20)
      << "dropped in " << dropping;
  std::vector<std::shared_ptr<DeviceBuffer>> large = Buffers(*client, 4, int64_t{1} << 19);
  ASSERT_EQ(large.size(), 4u);
  large.clear();
  ASSERT_TRUE(AllReleased(*client));
  EXPECT_EQ(Counter(*client, "handles_released") - released, 20);
}

TEST(ClientTest, DonatedBufferCannotBeReused) {
  auto client = *embedded::Connect();
  auto x = *client->TransferToDevice(Vec({1}), "cpu:0");
  auto exe = *client->Compile(*Parse("ENTRY e {\n x = f32[1] parameter(0)\n ROOT y = f32[1] negate(x)\n}"),
                              "cpu:0");
  ExecuteOptions donate;
  donate.donate = {0};
  ASSERT_TRUE(client->Execute(*exe, {x}, donate).ok());
  EXPECT_TRUE(x->donated());
  auto again = client->Execute(*exe, {x});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Donated arguments are gone once the server has the request, also when the
// program then fails (here: out of device memory): the client neither reuses
// nor releases them.
TEST(ClientTest, DonationOfAFailedExecutionIsFinal) {
  embedded::Options small;
  small.backend_config = "cpu.memory_bytes=4K";
  auto client = *embedded::Connect(small);
  auto x = *client->TransferToDevice(
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {256}, std::vector<float>(256, 1.0f)),
      "cpu:0");
  auto exe = *client->Compile(*Parse(R"(ENTRY e {
 x = f32[256] parameter(0)
 ROOT b = f32[16,256] broadcast(x), dimensions={1}
})"), "cpu:0");
  ExecuteOptions donate;
  donate.donate = {0};
  EXPECT_EQ(client->Execute(*exe, {x}, donate).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(x->donated());
  x.reset();  // nothing to release: the server took it
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 0);
}

TEST(ClientTest, HandlesMayOutliveTheClient) {
  std::shared_ptr<DeviceBuffer> kept;
  {
    auto client = *embedded::Connect();
    kept = *client->TransferToDevice(Vec({1, 2}), "cpu:0");
  }
  EXPECT_EQ(kept->shape().ToString(), "f32[2]");
  kept.reset();  // releasing after the session closed is harmless
}

TEST(ClientTest, ServerErrorsArriveAsStatuses) {
  auto client = *embedded::Connect();
  auto bad_device = client->TransferToDevice(Vec({1}), "gpu:3");
  EXPECT_EQ(bad_device.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bad_device.status().message().find("unknown device 'gpu:3'"), std::string::npos);
}

}  // namespace
}  // namespace kiln::client
