// The embedded service's direct path: executions whose buffers the client
// holds as they are, with handles made only where a message needs one.
#include "embedded/embedded.h"

#include <utility>

#include "compiler/ir/hlo_parser.h"
#include "gtest/gtest.h"

namespace kiln::embedded {
namespace {

using client::Client;
using client::DeviceBuffer;
using client::ExecuteOptions;
using client::ExecuteResult;

ir::Literal Vec(std::vector<float> v) {
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
}

std::shared_ptr<client::Executable> CompileOrDie(Client& client, const char* text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  auto exe = client.Compile(**module, "cpu:0");
  EXPECT_TRUE(exe.ok()) << exe.status();
  return *exe;
}

// `r` failed with `code`, saying `text`; `donated` was given up all the
// same, and the device holds `bytes` after it.
void ExpectFailedAndGivenUp(const absl::StatusOr<ExecuteResult>& r, absl::StatusCode code,
                            const std::string& text, const DeviceBuffer& donated, Client& client,
                            int64_t bytes) {
  EXPECT_EQ(r.status().code(), code) << r.status();
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status();
  EXPECT_TRUE(donated.donated());
  EXPECT_EQ(client.MemoryInfo("cpu:0")->bytes_in_use(), bytes);
}

constexpr char kDouble[] = "ENTRY e {\n x = f32[3] parameter(0)\n ROOT y = f32[3] add(x, x)\n}";

std::vector<float> Read(Client& client, const DeviceBuffer& buffer) {
  absl::StatusOr<ir::Literal> value = client.TransferFromDevice(buffer);
  EXPECT_TRUE(value.ok()) << value.status();
  if (!value.ok()) return {};
  const float* data = value->data<float>();
  return std::vector<float>(data, data + value->shape().ElementCount());
}

TEST(DirectPathTest, OutputsAreHeldWithoutHandlesAndReadDirectly) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  absl::StatusOr<ExecuteResult> r = client->Execute(*exe, {x});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outputs.size(), 1u);
  const std::shared_ptr<DeviceBuffer>& y = r->outputs[0];
  EXPECT_NE(y->local(), nullptr);
  EXPECT_FALSE(y->has_handle());
  EXPECT_EQ(Read(*client, *y), (std::vector<float>{2, 4, 6}));
  // A held output is the next execution's argument as it is.
  absl::StatusOr<ExecuteResult> again = client->Execute(*exe, {y});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Read(*client, *again->outputs[0]), (std::vector<float>{4, 8, 12}));
  EXPECT_FALSE(y->has_handle());
}

TEST(DirectPathTest, AHandleIsMadeWhereAMessageNeedsOne) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  std::shared_ptr<DeviceBuffer> y = client->Execute(*exe, {x})->outputs[0];
  ASSERT_FALSE(y->has_handle());
  // ExecuteAsync sends a request: the argument needs a handle.
  auto pending = client->ExecuteAsync(exe, {y});
  ASSERT_TRUE(pending.ok()) << pending.status();
  absl::StatusOr<ExecuteResult> sent = (*pending)->Wait();
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_TRUE(y->has_handle());
  EXPECT_FALSE(y->handle().empty());
  EXPECT_EQ(Read(*client, *sent->outputs[0]), (std::vector<float>{4, 8, 12}));
  // The handle is the session's until the buffer goes.
  y.reset();
  ASSERT_TRUE(client->FlushReleases().ok());
}

TEST(DirectPathTest, HeldBuffersAreTheSessionsMemoryUntilDropped) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  {
    auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
    std::shared_ptr<DeviceBuffer> y = client->Execute(*exe, {x})->outputs[0];
    EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 24);
    y.reset();
    // Nothing to release on the server: the held buffer went with it.
    EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 12);
  }
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 0);
}

TEST(DirectPathTest, ADonatedHeldBufferIsGivenUp) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  std::shared_ptr<DeviceBuffer> y = client->Execute(*exe, {x})->outputs[0];
  ExecuteOptions donate;
  donate.donate = {0};
  absl::StatusOr<ExecuteResult> r = client->Execute(*exe, {y}, donate);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(y->donated());
  EXPECT_EQ(y->local(), nullptr);
  EXPECT_EQ(Read(*client, *r->outputs[0]), (std::vector<float>{4, 8, 12}));
  absl::StatusOr<ExecuteResult> reused = client->Execute(*exe, {y});
  EXPECT_EQ(reused.status().code(), absl::StatusCode::kFailedPrecondition) << reused.status();
  EXPECT_NE(reused.status().message().find("donated"), std::string::npos) << reused.status();
}

// An f32[1024] of ones on the device, and the twos `exe` doubles it into
// (held): 8 KiB, the device's peak while both live.
std::pair<std::shared_ptr<DeviceBuffer>, std::shared_ptr<DeviceBuffer>> OnesAndHeldTwos(
    Client& client, const client::Executable& exe) {
  auto ones = client.TransferToDevice(
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {1024}, std::vector<float>(1024, 1)),
      "cpu:0");
  EXPECT_TRUE(ones.ok()) << ones.status();
  absl::StatusOr<ExecuteResult> twos = client.Execute(exe, {*ones});
  EXPECT_TRUE(twos.ok()) << twos.status();
  return {*ones, twos->outputs[0]};
}

// Donated and held by nobody else, a held buffer takes the result in place:
// the device's peak does not grow.
TEST(DirectPathTest, ADonatedHeldBufferTakesTheResultInPlace) {
  auto client = *Connect();
  auto exe = CompileOrDie(
      *client, "ENTRY e {\n x = f32[1024] parameter(0)\n ROOT y = f32[1024] add(x, x)\n}");
  auto [ones, y] = OnesAndHeldTwos(*client, *exe);
  EXPECT_EQ(client->MemoryInfo("cpu:0")->peak_bytes_in_use(), 8192);
  ExecuteOptions donate;
  donate.donate = {0};
  absl::StatusOr<ExecuteResult> r = client->Execute(*exe, {y}, donate);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(client->MemoryInfo("cpu:0")->peak_bytes_in_use(), 8192);
  EXPECT_EQ(Read(*client, *r->outputs[0])[1023], 4.0f);
  // Not donated, it is kept: the result needs memory of its own.
  absl::StatusOr<ExecuteResult> kept = client->Execute(*exe, {r->outputs[0]});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(client->MemoryInfo("cpu:0")->peak_bytes_in_use(), 12288);
}

// A donated argument known by its handle is taken from the session, also
// when the execution then fails: the handle is gone either way.
TEST(DirectPathTest, ADonatedHandleIsGoneAfterAFailedExecution) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  auto wrong = *client->TransferToDevice(Vec({1, 2}), "cpu:0");
  ExecuteOptions donate;
  donate.donate = {0};
  // The memory of the donated argument goes with the failure.
  ExpectFailedAndGivenUp(client->Execute(*exe, {wrong}, donate),
                         absl::StatusCode::kInvalidArgument, "argument 0 has shape f32[2]", *wrong,
                         *client, 12);
}

TEST(DirectPathTest, BadCallsGetClearErrors) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  absl::StatusOr<ExecuteResult> none = client->Execute(*exe, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("program takes 1 arguments, got 0"), std::string::npos)
      << none.status();
  absl::StatusOr<ExecuteResult> null_arg = client->Execute(*exe, {nullptr});
  EXPECT_EQ(null_arg.status().code(), absl::StatusCode::kInvalidArgument) << null_arg.status();
  ExecuteOptions out_of_range;
  out_of_range.donate = {3};
  absl::StatusOr<ExecuteResult> bad_donation = client->Execute(*exe, {x}, out_of_range);
  EXPECT_EQ(bad_donation.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_donation.status().message().find("donated argument 3 out of range"),
            std::string::npos)
      << bad_donation.status();
  // Nothing was lost: the argument still works.
  EXPECT_EQ(Read(*client, *client->Execute(*exe, {x})->outputs[0]), (std::vector<float>{2, 4, 6}));
}

TEST(DirectPathTest, AnotherClientsHeldBufferIsRefused) {
  auto first = *Connect();
  auto second = *Connect();
  auto exe_first = CompileOrDie(*first, kDouble);
  auto exe_second = CompileOrDie(*second, kDouble);
  auto x = *first->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  std::shared_ptr<DeviceBuffer> y = first->Execute(*exe_first, {x})->outputs[0];
  absl::StatusOr<ExecuteResult> r = second->Execute(*exe_second, {y});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("another client"), std::string::npos) << r.status();
  // Still its own client's.
  EXPECT_EQ(Read(*first, *y), (std::vector<float>{2, 4, 6}));
}

// Refused before it reached the service, the execution still gives its
// donated arguments up: nothing stays charged to the session.
TEST(DirectPathTest, ARefusedArgumentStillGivesTheDonatedOnesUp) {
  auto first = *Connect();
  auto second = *Connect();
  auto exe_first = CompileOrDie(*first, kDouble);
  auto pair = CompileOrDie(
      *second, "ENTRY e {\n x = f32[3] parameter(0)\n y = f32[3] parameter(1)\n ROOT z = f32[3] add(x, y)\n}");
  auto x = *first->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  std::shared_ptr<DeviceBuffer> foreign = first->Execute(*exe_first, {x})->outputs[0];
  auto mine = *second->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  ASSERT_EQ(second->MemoryInfo("cpu:0")->bytes_in_use(), 12);
  ExecuteOptions donate;
  donate.donate = {0};
  ExpectFailedAndGivenUp(second->Execute(*pair, {mine, foreign}, donate),
                         absl::StatusCode::kInvalidArgument,
                         "argument 1: the buffer belongs to another client", *mine, *second, 0);
}

TEST(DirectPathTest, AHeldBufferGivenTwiceAndDonatedOnceIsReadAtBoth) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto pair = CompileOrDie(
      *client, "ENTRY e {\n x = f32[3] parameter(0)\n y = f32[3] parameter(1)\n ROOT z = f32[3] multiply(x, y)\n}");
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  for (int donated : {0, 1}) {
    std::shared_ptr<DeviceBuffer> y = client->Execute(*exe, {x})->outputs[0];
    ExecuteOptions donate;
    donate.donate = {donated};
    absl::StatusOr<ExecuteResult> r = client->Execute(*pair, {y, y}, donate);
    ASSERT_TRUE(r.ok()) << "donated " << donated << ": " << r.status();
    EXPECT_EQ(Read(*client, *r->outputs[0]), (std::vector<float>{4, 16, 36}));
    EXPECT_TRUE(y->donated());
    EXPECT_EQ(y->local(), nullptr);
  }
}

// Donated through a message (a pipelined execution), a held buffer is let
// go of too: the program takes the result in place, and the buffer cannot
// be read afterwards.
TEST(DirectPathTest, AHeldBufferDonatedThroughAMessageIsGivenUp) {
  auto client = *Connect();
  auto exe = CompileOrDie(
      *client, "ENTRY e {\n x = f32[1024] parameter(0)\n ROOT y = f32[1024] add(x, x)\n}");
  auto [ones, y] = OnesAndHeldTwos(*client, *exe);
  ExecuteOptions donate;
  donate.donate = {0};
  auto pending = client->ExecuteAsync(exe, {y}, donate);
  ASSERT_TRUE(pending.ok()) << pending.status();
  absl::StatusOr<ExecuteResult> r = (*pending)->Wait();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Read(*client, *r->outputs[0])[0], 4.0f);
  EXPECT_EQ(client->MemoryInfo("cpu:0")->peak_bytes_in_use(), 8192);
  EXPECT_TRUE(y->donated());
  EXPECT_EQ(y->local(), nullptr);
  EXPECT_FALSE(client->TransferFromDevice(*y).ok());
}

TEST(DirectPathTest, AValueSentWithTheCallBecomesAHeldBuffer) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  const ir::Literal value = Vec({5, 6, 7});
  ExecuteOptions options;
  options.inline_values = {&value};
  options.inline_result_max_bytes = 64;
  absl::StatusOr<ExecuteResult> r = client->Execute(*exe, {nullptr}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->inline_values[0].has_value());
  EXPECT_EQ(r->inline_values[0]->data<float>()[2], 14.0f);
  ASSERT_EQ(r->inline_argument_buffers.size(), 1u);
  ASSERT_NE(r->inline_argument_buffers[0], nullptr);
  EXPECT_EQ(Read(*client, *r->inline_argument_buffers[0]), (std::vector<float>{5, 6, 7}));
  const ir::Literal wrong = Vec({1});
  options.inline_values = {&wrong};
  absl::StatusOr<ExecuteResult> refused = client->Execute(*exe, {nullptr}, options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

TEST(DirectPathTest, ExecutionsAreCountedInTheMetrics) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Execute(*exe, {x}).ok());
  absl::StatusOr<v1::MetricsResponse> metrics = client->Metrics();
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int64_t executes = -1;
  for (const auto& c : metrics->counters()) {
    if (c.name() == "executes") executes = c.value();
  }
  EXPECT_EQ(executes, 3);
}

// A held buffer read directly counts as a transfer, as a message's would.
TEST(DirectPathTest, DirectReadsAreCountedAsTransfers) {
  auto client = *Connect();
  auto exe = CompileOrDie(*client, kDouble);
  auto x = *client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
  absl::StatusOr<ExecuteResult> r = client->Execute(*exe, {x});
  ASSERT_TRUE(r.ok()) << r.status();
  auto counter = [&](const std::string& name) -> int64_t {
    absl::StatusOr<v1::MetricsResponse> metrics = client->Metrics();
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    for (const auto& c : metrics->counters()) {
      if (c.name() == name) return c.value();
    }
    return 0;
  };
  const int64_t transfers = counter("transfers_from_device");
  const int64_t bytes = counter("bytes_out");
  EXPECT_EQ(Read(*client, *r->outputs[0]), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(counter("transfers_from_device"), transfers + 1);
  EXPECT_EQ(counter("bytes_out"), bytes + 12);
}

}  // namespace
}  // namespace kiln::embedded
