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
    ExecState& st, const std::vector<std::vector<int>>& in_place,
    const std::vector<BufferPtr>& ops, const std::vector<ir::Shape>& shapes) {
  absl::InlinedVector<BufferPtr, 2> outs(shapes.size());
  absl::InlinedVector<bool, 8> taken(ops.size(), false);
  for (size_t j = 0; j < outs.size(); ++j) {
    static const std::vector<int>* const none = new std::vector<int>();
    for (int k : j < in_place.size() ? in_place[j] : *none) {
      if (!taken[k] && Unshared(ops[k])) {
        outs[j] = ops[k];
        taken[k] = true;
        break;
      }
    }
    if (outs[j] == nullptr) {
      ASSIGN_OR_RETURN(outs[j], st.Allocate(shapes[j], static_cast<int>(j)));
    }
  }
  return outs;
}

Kernel MakeFusedReduceKernel(FusedReduce spec) {
  auto shared = std::make_shared<const FusedReduce>(std::move(spec));
  return [shared](ExecState& st, const std::vector<BufferPtr>& ops) -> absl::StatusOr<BufferPtr> {
    const FusedReduce& f = *shared;
    const int num_results = static_cast<int>(f.results.size());
    ASSIGN_OR_RETURN(auto taken, LoopOutputs(st, f.in_place, ops, f.results));
    std::vector<BufferPtr> results(taken.begin(), taken.end());
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(f.reduce_shape, num_results));
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
    // Three ways to run:
    //  - whole: the loop on all the threads first, then the reduction on
    //    this one (a leading reduction, or fewer result rows than threads);
    //  - split: result rows split over the threads, each in chunks;
    //  - chunks: one thread, in chunks.
    // Each chunk holds whole result rows (a multiple of ColumnFold's rows
    // for a leading reduction). The value, when not a result, goes to
    // device memory like any buffer: the whole of it, or a chunk per thread.
    const bool whole = threads > 1 && (f.leading || f.rows < threads);
    const int split = !whole && threads > 1 ? threads : 1;
    const int64_t rows_per_thread = (f.rows + split - 1) / split;
    const int64_t chunk = std::min(
        std::max<int64_t>(1, rows_per_thread),
        RoundUp(std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, f.length)), 4));
    BufferPtr scratch;
    if (!value_is_result) {
      const int64_t elements = whole ? count : split * chunk * f.length;
      ASSIGN_OR_RETURN(scratch, st.Allocate(ir::Shape(f.reduce_shape.type(), {elements}),
                                            ExecState::kScratch));
    }
    // The scratch of thread t (or of the whole loop).
    auto scratch_of = [&](int t) {
      return scratch == nullptr ? nullptr : scratch->data() + t * chunk * f.length * value_size;
    };
    ir::DispatchType(f.reduce_shape.type(), [&](auto tag) {
      using T = decltype(tag);
      const T init = ops.back()->as<T>()[0];
      T* o = out->as<T>();
      ColumnFold<T> fold(f.op, init, f.leading ? f.length : 0);
      if (whole) {
        uint8_t* value = scratch_of(0);
        RunFusedGroup(*f.group, inputs, outs_from(0, value));
        if (Cancelled()) return;
        const T* v = reinterpret_cast<const T*>(value_from(0, value));
        if (f.leading) {
          fold.Fold(v, f.rows);
          fold.Finish(o);
        } else {
          ReduceRuns<T>(f.op, v, init, f.rows, f.length, o);
        }
        return;
      }
      // Rows [begin, end) in chunks on the calling thread (thread t).
      auto run_rows = [&](int64_t begin, int64_t end, int t) {
        uint8_t* mine = scratch_of(t);
        for (int64_t r0 = begin; r0 < end; r0 += chunk) {
          const int64_t r1 = std::min(end, r0 + chunk);
          RunFusedGroupRange(*f.group, inputs, outs_from(r0 * f.length, mine), r0 * f.length,
                             r1 * f.length, /*poll=*/t == 0);
          if (t == 0 && Cancelled()) return;
          const T* v = reinterpret_cast<const T*>(value_from(r0 * f.length, mine));
          if (f.leading) {
            fold.Fold(v, r1 - r0);
          } else {
            ReduceRuns<T>(f.op, v, init, r1 - r0, f.length, o + r0);
          }
        }
      };
      if (split <= 1) {
        run_rows(0, f.rows, 0);
        if (f.leading) fold.Finish(o);
        return;
      }
      // Trailing: each result is one run, so threads take rows as they are.
#pragma omp parallel num_threads(split)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        run_rows(f.rows * t / nt, f.rows * (t + 1) / nt, t);
      }
    });
    if (num_results == 0) return out;
    results.push_back(std::move(out));
    return HostBuffer::MakeTuple(std::move(results));
  };
}

}  // namespace kiln::host
