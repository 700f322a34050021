#include "runtime/host/fused_reduce.h"

#include <omp.h>

#include <algorithm>
#include <memory>

#include "absl/container/inlined_vector.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "runtime/host/cancel.h"
#include "runtime/host/reduce_loops.h"
#include "runtime/host/threads.h"

namespace kiln::host {
namespace {

// A chunk is whole rows of about this many elements: the loop writes them
// and the reduction reads them back from the first levels of cache.
constexpr int64_t kChunkElements = 16384;

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

absl::StatusOr<absl::InlinedVector<BufferPtr, 2>> LoopOutputs(
    ExecState& st, const FusedGroup& group, const std::vector<int>& last_reader,
    const std::vector<BufferPtr>& ops, const std::vector<ir::Shape>& shapes) {
  absl::InlinedVector<BufferPtr, 2> outs(shapes.size());
  absl::InlinedVector<bool, 8> taken(last_reader.size(), false);
  for (size_t j = 0; j < outs.size(); ++j) {
    for (size_t k = 0; k < last_reader.size(); ++k) {
      if (!taken[k] && !group.input_is_scalar[k] && ops[k].use_count() == 1 &&
          last_reader[k] <= group.outputs[j] && ops[k]->shape() == shapes[j]) {
        outs[j] = ops[k];
        taken[k] = true;
        break;
      }
    }
    if (outs[j] == nullptr) {
      ASSIGN_OR_RETURN(outs[j], st.Allocate(shapes[j]));
    }
  }
  return outs;
}

Kernel MakeFusedReduceKernel(FusedReduce spec) {
  auto shared = std::make_shared<const FusedReduce>(std::move(spec));
  return [shared](ExecState& st, const std::vector<BufferPtr>& ops) -> absl::StatusOr<BufferPtr> {
    const FusedReduce& f = *shared;
    const int num_results = static_cast<int>(f.results.size());
    ASSIGN_OR_RETURN(auto taken, LoopOutputs(st, *f.group, f.last_reader, ops, f.results));
    std::vector<BufferPtr> results(taken.begin(), taken.end());
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(f.reduce_shape));
    absl::InlinedVector<const uint8_t*, 8> inputs;
    for (size_t k = 0; k + 1 < ops.size(); ++k) inputs.push_back(ops[k]->data());
    const bool value_is_result = f.value_output < num_results;
    const int value_size = ir::ElementTypeSize(f.reduce_shape.type());
    const int64_t count = f.rows * f.length;
    // Where the loop writes element `first` on: the results, then the
    // value into `scratch` when it is not one of them.
    auto outs_from = [&](int64_t first, uint8_t* scratch) {
      absl::InlinedVector<uint8_t*, 4> outs;
      for (int k = 0; k < num_results; ++k) {
        outs.push_back(results[k]->data() + first * ir::ElementTypeSize(f.results[k].type()));
      }
      if (!value_is_result) outs.push_back(scratch);
      return outs;
    };
    auto value_from = [&](int64_t first, const uint8_t* scratch) {
      return value_is_result ? results[f.value_output]->data() + first * value_size : scratch;
    };
    int threads = 1;
    if (count >= kParallelElements) {
      UseComputeThreads();
      threads = omp_get_max_threads();
    }
    // Leading reductions on several threads run the loop whole first: its
    // value, when not a result, takes device memory like any result.
    BufferPtr whole;
    if (f.leading && threads > 1 && !value_is_result) {
      ASSIGN_OR_RETURN(whole, st.Allocate(ir::Shape(f.reduce_shape.type(), {count})));
    }
    const int64_t chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, f.length));
    ir::DispatchType(f.reduce_shape.type(), [&](auto tag) {
      using T = decltype(tag);
      const T init = ops.back()->as<T>()[0];
      T* o = out->as<T>();
      if (!f.leading) {
        // Each result is one run: rows split over the threads as they are.
        auto run_rows = [&](int64_t begin, int64_t end, bool poll) {
          if (begin >= end) return;
          std::unique_ptr<uint8_t[]> scratch;
          if (!value_is_result) {
            scratch.reset(new uint8_t[std::min(chunk, end - begin) * f.length * value_size]);
          }
          for (int64_t r0 = begin; r0 < end; r0 += chunk) {
            const int64_t r1 = std::min(end, r0 + chunk);
            RunFusedGroupRange(*f.group, inputs, outs_from(r0 * f.length, scratch.get()),
                               r0 * f.length, r1 * f.length, poll);
            if (poll && Cancelled()) return;
            ReduceRuns<T>(f.op, reinterpret_cast<const T*>(value_from(r0 * f.length, scratch.get())),
                          init, r1 - r0, f.length, o + r0);
          }
        };
        const int n = static_cast<int>(std::min<int64_t>(threads, f.rows));
        if (n <= 1) {
          run_rows(0, f.rows, /*poll=*/true);
          return;
        }
#pragma omp parallel num_threads(n)
        {
          const int t = omp_get_thread_num(), nt = omp_get_num_threads();
          run_rows(f.rows * t / nt, f.rows * (t + 1) / nt, /*poll=*/t == 0);
        }
        return;
      }
      // Each result folds one column (ColumnFold's order).
      ColumnFold<T> fold(f.op, init, f.length);
      if (threads > 1) {
        // The loop on all the threads, then the columns on this one.
        uint8_t* value = whole == nullptr ? nullptr : whole->data();
        RunFusedGroup(*f.group, inputs, outs_from(0, value));
        if (!Cancelled()) fold.Fold(reinterpret_cast<const T*>(value_from(0, value)), f.rows);
      } else {
        const int64_t rows = RoundUp(chunk, ColumnFold<T>::kRowMultiple);
        std::unique_ptr<uint8_t[]> scratch;
        if (!value_is_result) scratch.reset(new uint8_t[std::min(rows, f.rows) * f.length * value_size]);
        for (int64_t r0 = 0; r0 < f.rows; r0 += rows) {
          const int64_t r1 = std::min(f.rows, r0 + rows);
          RunFusedGroupRange(*f.group, inputs, outs_from(r0 * f.length, scratch.get()),
                             r0 * f.length, r1 * f.length, /*poll=*/true);
          if (Cancelled()) break;
          fold.Fold(reinterpret_cast<const T*>(value_from(r0 * f.length, scratch.get())), r1 - r0);
        }
      }
      fold.Finish(o);
    });
    if (num_results == 0) return out;
    results.push_back(std::move(out));
    return HostBuffer::MakeTuple(std::move(results));
  };
}

}  // namespace kiln::host
