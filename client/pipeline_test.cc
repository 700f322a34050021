// Executions sent without waiting: Client::ExecuteAsync and pipelined
// barriers of the lazy context, over the embedded service.

#include <chrono>
#include <thread>

#include "client/lazy.h"
#include "client/loop_test_util.h"
#include "client/tensor.h"
#include "compiler/ir/hlo_parser.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using testing::Values;

std::unique_ptr<Client> Connect(const std::string& backend_config = "") {
  return testing::ConnectEmbedded(backend_config);
}


// A few steps of w <- w * 2 + x with a fresh x per step, read one step
// late as a pipelined trainer does; returns every loss read and w.
std::pair<std::vector<double>, std::vector<double>> Train(Client* client, bool pipelined) {
  auto ctx = LazyContext::Create(client);
  ctx->set_pipelined(pipelined);
  Tensor w = ctx->FromVector<float>(ElementType::kF32, {3}, {1, 2, 3}, "cpu:0");
  std::vector<double> losses;
  Tensor previous;
  for (int step = 0; step < 5; ++step) {
    Tensor x = ctx->FromVector<float>(ElementType::kF32, {3}, {float(step), 1, -1}, "cpu:0");
    w = w * 2.0 + x;
    Tensor loss = Sum(w * w, {});
    EXPECT_TRUE(ctx->Barrier("cpu:0").ok());
    if (pipelined) {
      EXPECT_TRUE(w.node()->in_flight());
    }
    if (previous.defined()) {
      auto l = previous.Item();
      EXPECT_TRUE(l.ok()) << l.status();
      losses.push_back(l.value_or(-1));
    }
    previous = loss;
  }
  losses.push_back(previous.Item().value_or(-1));
  EXPECT_EQ(ctx->metrics().pipelined_executions, pipelined ? 5 : 0);
  EXPECT_EQ(ctx->metrics().executions, 5);
  // Each step gives the weights it replaces to the program, pipelined (the
  // server names them while the step before still computes them) or not.
  EXPECT_EQ(ctx->metrics().donated_arguments, 5);
  return {losses, Values(w)};
}

TEST(PipelineTest, PipelinedStepsComputeWhatSynchronousOnesDo) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto sync = Train(client.get(), false);
  auto pipelined = Train(client.get(), true);
  EXPECT_EQ(pipelined.first, sync.first);
  EXPECT_EQ(pipelined.second, sync.second);
  // w = 2w + x over steps 0..4 from {1,2,3}: {32+(0*16+1*8+2*4+3*2+4), 64+31, 96-31}.
  EXPECT_EQ(sync.second, (std::vector<double>{58, 95, 65}));
  ASSERT_EQ(sync.first.size(), 5u);
}

TEST(PipelineTest, AFailedPipelinedExecutionReportsAtTheNextCallAndStaysOnItsTensors) {
  auto client = Connect("cpu.memory_bytes=4096");
  ASSERT_NE(client, nullptr);
  auto ctx = LazyContext::Create(client.get());
  ctx->set_pipelined(true);
  Tensor x = ctx->FromVector<float>(ElementType::kF32, {4}, {1, 2, 3, 4}, "cpu:0");
  // 4096 bytes of device memory cannot hold the 64 KiB product (summed over
  // its middle dimension, which no loop folds as it computes, so the
  // product is written out).
  Tensor big = Sum(Sum(BroadcastTo(x, {64, 64, 4}) * 2.0, {1}), {});
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());  // sent, not waited for
  EXPECT_TRUE(big.node()->in_flight());
  // Traced on the value in flight; it cannot be computed. The server
  // (protocol 6) named the value's buffer, so this program is sent at once
  // as well; the error comes with the first call that waits.
  Tensor later = big + 1.0;
  absl::Status next = ctx->Barrier("cpu:0");
  EXPECT_TRUE(next.ok()) << next;
  auto read = big.Item();
  EXPECT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted) << read.status();
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  auto read_later = later.Item();
  EXPECT_EQ(read_later.status().code(), absl::StatusCode::kResourceExhausted)
      << read_later.status();
  // Each error is returned once by the calls that wait; the context goes on.
  EXPECT_TRUE(ctx->Sync().ok());
  Tensor small = Sum(x * 3.0, {});
  ASSERT_TRUE(ctx->Barrier("cpu:0").ok());
  EXPECT_EQ(small.Item().value_or(-1), 30);
}

// y = x + x compiled on cpu:0, and x = {1, 2} there (null on failure).
struct Doubling {
  std::shared_ptr<Executable> exe;
  std::shared_ptr<DeviceBuffer> in;
};
Doubling MakeDoubling(Client* client) {
  Doubling d;
  auto module = ir::ParseModule("HloModule m\nENTRY e {\n x = f32[2] parameter(0)\n"
                                " ROOT y = f32[2] add(x, x)\n}");
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return d;
  auto exe = client->Compile(**module, "cpu:0");
  EXPECT_TRUE(exe.ok()) << exe.status();
  auto in = client->TransferToDevice(
      ir::Literal::FromVector<float>(ElementType::kF32, {2}, {1, 2}), "cpu:0");
  EXPECT_TRUE(in.ok()) << in.status();
  if (exe.ok()) d.exe = *exe;
  if (in.ok()) d.in = *in;
  return d;
}

// A client of an embedded service with y = x + x compiled and x uploaded.
class ExecuteAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client = Connect();
    if (client != nullptr) d = MakeDoubling(client.get());
  }
  std::unique_ptr<Client> client;
  Doubling d;
};

TEST_F(ExecuteAsyncTest, EachResultIsHandedOutOnce) {
  ASSERT_NE(d.exe, nullptr) << "no program to run";
  ASSERT_NE(d.in, nullptr) << "no input to run it on";
  std::vector<std::shared_ptr<PendingExecution>> sent;
  for (int i = 0; i < 3; ++i) {
    auto p = client->ExecuteAsync(d.exe, {d.in});
    ASSERT_TRUE(p.ok()) << p.status();
    sent.push_back(*p);
  }
  for (auto& p : sent) {
    auto r = p->Wait();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->outputs.size(), 1u);
    auto v = client->TransferFromDevice(*r->outputs[0]);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->GetAsDouble(1), 4);
    EXPECT_TRUE(p->done());
    EXPECT_GT(p->round_trip_seconds(), 0);
    EXPECT_EQ(p->Wait().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  // A null argument is refused before anything is sent.
  EXPECT_EQ(client->ExecuteAsync(d.exe, {nullptr}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A result nobody waits for is dropped on the dispatch thread: its buffers'
// releases must not deadlock it (they queue under the lock it uses).
TEST_F(ExecuteAsyncTest, ResultsNobodyWaitsForAreReleased) {
  ASSERT_NE(d.exe, nullptr) << "no program to run";
  ASSERT_NE(d.in, nullptr) << "no input to run it on";
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(client->ExecuteAsync(d.exe, {d.in}).ok());
  auto last = client->ExecuteAsync(d.exe, {d.in});
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE((*last)->Wait().ok());
  last->reset();
  // Several dispatch threads carry the calls, so the earlier replies may
  // still be on their way when the last one is back: flush and look again
  // until only the input is left on the device (every output released),
  // for a bounded time.
  int64_t live = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(client->FlushReleases().ok());
    auto info = client->MemoryInfo("cpu:0");
    ASSERT_TRUE(info.ok()) << info.status();
    live = info->live_buffers();
    if (live == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(live, 1);
}

// A call the server refuses before it takes its arguments (the wrong
// shape) leaves the donated one on the server; the client has given it up
// all the same, so it releases it rather than leave it there until the
// session ends. Synchronous (unsequenced) and pipelined (sequenced) alike.
TEST_F(ExecuteAsyncTest, ARefusedExecutionGivesUpItsDonatedArguments) {
  ASSERT_NE(d.exe, nullptr) << "no program to run";
  ASSERT_NE(d.in, nullptr) << "no input to run it on";
  const ir::Literal three = ir::Literal::FromVector<float>(ElementType::kF32, {3}, {1, 2, 3});
  ExecuteOptions options;
  options.donate = {0};
  auto wrong = client->TransferToDevice(three, "cpu:0");
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  auto refused = client->Execute(*d.exe, {*wrong}, options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_TRUE((*wrong)->donated());
  auto again = client->TransferToDevice(three, "cpu:0");
  ASSERT_TRUE(again.ok()) << again.status();
  auto pending = client->ExecuteAsync(d.exe, {*again}, options);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ((*pending)->Wait().status().code(), absl::StatusCode::kInvalidArgument);
  pending->reset();
  ASSERT_TRUE(client->FlushReleases().ok());
  // Only the input is left: both refused calls' donated buffers are gone.
  auto info = client->MemoryInfo("cpu:0");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->live_buffers(), 1);
}

// Protocol 6: an execution's outputs are named when it is sent, so the next
// one takes them as arguments without waiting for its reply (the server
// starts them in order and waits for the values).
TEST_F(ExecuteAsyncTest, TheNextExecutionTakesOutputsNamedBeforeTheReply) {
  ASSERT_NE(d.exe, nullptr) << "no program to run";
  ASSERT_NE(d.in, nullptr) << "no input to run it on";
  ASSERT_GE(client->protocol_version(), 6u);
  std::shared_ptr<DeviceBuffer> x = d.in;
  std::vector<std::shared_ptr<PendingExecution>> sent;
  for (int i = 0; i < 6; ++i) {
    ExecuteOptions options;
    if (i > 0) options.donate = {0};  // the previous output, still being computed
    auto p = client->ExecuteAsync(d.exe, {x}, options);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<std::shared_ptr<DeviceBuffer>> named = (*p)->TakeOutputs();
    ASSERT_EQ(named.size(), 1u);
    EXPECT_TRUE((*p)->TakeOutputs().empty());  // handed out once
    x = named[0];
    sent.push_back(*p);
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    auto r = sent[i]->Wait();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->outputs.size(), 1u);
    // The last output is still held: the same object comes back (released
    // once); the others were donated to the next execution.
    if (i + 1 == sent.size()) {
      EXPECT_EQ(r->outputs[0], x);
    }
  }
  auto v = client->TransferFromDevice(*x);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->GetAsDouble(0), 64);
  EXPECT_EQ(v->GetAsDouble(1), 128);
  sent.clear();
  x = nullptr;
  ASSERT_TRUE(client->FlushReleases().ok());
  // Only the input is left: each named output was taken or released once.
  auto info = client->MemoryInfo("cpu:0");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->live_buffers(), 1);
}

TEST(PipelineTest, DestroyingTheClientEndsExecutionsInFlight) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto module = ir::ParseModule(R"(HloModule m
ENTRY e {
  x = f32[64,64] parameter(0)
  ROOT y = f32[64,64] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
  ASSERT_TRUE(module.ok()) << module.status();
  auto exe = client->Compile(**module, "cpu:0");
  ASSERT_TRUE(exe.ok()) << exe.status();
  auto in = client->TransferToDevice(ir::Literal(ir::Shape(ElementType::kF32, {64, 64})), "cpu:0");
  ASSERT_TRUE(in.ok()) << in.status();
  std::vector<std::shared_ptr<PendingExecution>> sent;
  for (int i = 0; i < 20; ++i) sent.push_back(*client->ExecuteAsync(*exe, {*in}));
  *exe = nullptr;
  *in = nullptr;
  client.reset();
  // Each ended one way or the other, and none waits forever.
  int finished = 0, cancelled = 0;
  for (auto& p : sent) {
    auto r = p->Wait();
    if (r.ok()) ++finished;
    if (r.status().code() == absl::StatusCode::kCancelled) ++cancelled;
  }
  EXPECT_EQ(finished + cancelled, 20);
}

}  // namespace
}  // namespace kiln::client
