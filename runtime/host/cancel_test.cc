// Long kernels poll the execution's cancel check between blocks of work, so
// a cancelled execution stops inside a kernel, not after it.
#include "runtime/host/cancel.h"

#include <atomic>
#include <string>

#include "gtest/gtest.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "runtime/host/executable.h"
#include "runtime/host/host_device.h"

namespace kiln::host {
namespace {

// Runs `text` on zero-filled arguments with a cancel check that turns true
// at its `cancel_at`-th call; returns the status and counts the calls.
absl::Status RunUntilCancelled(const std::string& text, int cancel_at, int* calls) {
  HostDevice device("cpu", 0, int64_t{8} << 30, 4);
  auto module = ir::ParseModule(text);
  if (!module.ok()) return module.status();
  if (absl::Status st = ir::Verify(**module); !st.ok()) return st;
  auto exe = CompileProgram("cpu", **module, {});
  if (!exe.ok()) return exe.status();
  std::vector<runtime::BufferPtr> args;
  for (const ir::Shape& shape : (*module)->entry()->ParameterShapes()) {
    auto b = HostBuffer::Allocate(shape, nullptr);
    if (!b.ok()) return b.status();
    std::fill((*b)->data(), (*b)->data() + (*b)->size_bytes(), 0);
    args.push_back(*b);
  }
  std::atomic<int> count{0};
  runtime::ExecuteOptions options;
  options.cancelled = [&count, cancel_at] { return ++count >= cancel_at; };
  absl::Status status = (*exe)->Execute(device, args, options).status();
  *calls = count.load();
  return status;
}

// Each program below is one step, after which Program::Run checks once: the
// check turning true at its third call and 4 calls in all mean the kernel
// polled twice, stopped at the third, and the step boundary saw it.
TEST(CancelTest, ALargeDotStopsBetweenBands) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(ENTRY e {
  a = f32[4096,1024] parameter(0)
  b = f32[1024,1024] parameter(1)
  ROOT d = f32[4096,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

// 3.6 billion multiply-adds: oneDNN runs it in pieces of 7 batch elements
// and polls between them.
TEST(CancelTest, ALargeConvolutionStopsBetweenPieces) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(ENTRY e {
  x = f32[24,64,64,64] parameter(0)
  k = f32[3,3,64,64] parameter(1)
  ROOT c = f32[24,64,64,64] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

TEST(CancelTest, ALongElementwiseChainStopsBetweenBlocks) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(ENTRY e {
  x = f32[16777216] parameter(0)
  m = f32[16777216] multiply(x, x)
  ROOT a = f32[16777216] add(m, x)
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

TEST(CancelTest, ALargeWindowOpStopsBetweenOutputs) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(max { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
ENTRY e {
  x = f32[64,256,256,8] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[64,128,128,8] reduce-window(x, z), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=max
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

TEST(CancelTest, ALargeSortStopsBetweenMergedRuns) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(lt { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT }
ENTRY e {
  x = f32[4194304] parameter(0)
  ROOT s = f32[4194304] sort(x), dimensions={0}, to_apply=lt
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

TEST(CancelTest, ManyShortSortsStopBetweenRows) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(lt { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT }
ENTRY e {
  x = f32[1048576,4] parameter(0)
  ROOT s = f32[1048576,4] sort(x), dimensions={1}, to_apply=lt
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

TEST(CancelTest, ALargeGatherStopsBetweenSlices) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(ENTRY e {
  x = f32[1024,16] parameter(0)
  i = s32[1048576,1] parameter(1)
  ROOT g = f32[1048576,16] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

TEST(CancelTest, ALargeScatterStopsBetweenUpdates) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[1024,16] parameter(0)
  i = s32[1048576,1] parameter(1)
  u = f32[1048576,16] parameter(2)
  ROOT s = f32[1024,16] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
})", 3, &calls);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(calls, 4);
}

TEST(CancelTest, AnUncancelledExecutionRunsToTheEnd) {
  int calls = 0;
  absl::Status st = RunUntilCancelled(R"(ENTRY e {
  x = f32[1024] parameter(0)
  ROOT a = f32[1024] add(x, x)
})", 1000000, &calls);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_GE(calls, 1);
}

}  // namespace
}  // namespace kiln::host
