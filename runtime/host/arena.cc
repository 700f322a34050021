#include "runtime/host/arena.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/status_macros.h"
#include "runtime/arena_plan.h"

namespace kiln::host {

ArenaPlan::ArenaPlan(const ir::Computation& c, const passes::BufferAssignment& assignment,
                     const std::vector<int>& step_of, int steps) {
  const auto& instrs = c.instructions();
  // The first step after instruction i (steps when none).
  const int n = static_cast<int>(instrs.size());
  std::vector<int> step_after(n, steps);
  for (int i = n - 2; i >= 0; --i) {
    step_after[i] = step_of[i + 1] >= 0 ? step_of[i + 1] : step_after[i + 1];
  }
  first_.assign(steps + 1, 0);
  expire_.resize(steps + 1);
  std::vector<int> per_step(steps, 0);
  std::vector<runtime::ArenaBlock> blocks;
  for (const passes::BufferAssignment::Slice& s : assignment.slices) {
    const int step = step_of[s.instruction];
    if (step < 0 || per_step[step] == Offer::kMaxArrays) continue;
    ++per_step[step];
    const ir::Instruction& instr = *instrs[s.instruction];
    ir::Shape shape = s.result < 0 ? instr.shape() : instr.shape().tuple_shape(s.result);
    expire_[step_after[s.live_until]].push_back(static_cast<int>(slices_.size()));
    slices_.push_back({std::move(shape), s.result, 0, 0});
    blocks.push_back({s.bytes, s.instruction, s.live_until});
  }
  const runtime::ArenaPlan layout = runtime::PlanArena(blocks, kAlignment);
  for (size_t k = 0; k < slices_.size(); ++k) {
    slices_[k].offset = layout.offsets[k];
    slices_[k].end = layout.offsets[k] + blocks[k].bytes;
  }
  bytes_ = layout.total_bytes;
  // Slices are in instruction order: each step's are consecutive.
  for (int s = 0; s < steps; ++s) first_[s + 1] = first_[s] + per_step[s];
}

absl::StatusOr<std::unique_ptr<Arena>> Arena::Make(const ArenaPlan& plan) {
  auto arena = std::unique_ptr<Arena>(new Arena());
  ASSIGN_OR_RETURN(arena->block_,
                   HostBuffer::Allocate(ir::Shape(ir::ElementType::kU8, {plan.bytes()}), nullptr));
  arena->arrays_.reserve(plan.slices_.size());
  for (const ArenaPlan::Slice& s : plan.slices_) {
    arena->arrays_.push_back(HostBuffer::View(arena->block_, s.offset, s.shape, true));
  }
  arena->held_flags_.assign(plan.slices_.size(), false);
  return arena;
}

std::unique_ptr<Arena> ArenaPool::Take() {
  absl::MutexLock lock(&mu_);
  if (idle_.empty()) return nullptr;
  std::unique_ptr<Arena> arena = std::move(idle_.back());
  idle_.pop_back();
  return arena;
}

void ArenaPool::Give(std::unique_ptr<Arena> arena) {
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(arena));
}

ArenaRun::ArenaRun(const ArenaPlan& plan, ArenaPool& pool, runtime::MemoryTracker* memory)
    : plan_(plan), pool_(pool), memory_(memory) {
  if (plan.empty()) return;
  arena_ = pool.Take();
  if (arena_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Arena>> made = Arena::Make(plan);
    if (!made.ok()) return;
    arena_ = *std::move(made);
  }
  if (memory_ != nullptr) {
    if (!memory_->Reserve(arena_->block_.get(), plan.bytes()).ok()) {
      // Without the charge the arena may not be used; the run allocates
      // array by array, as it may still fit.
      pool.Give(std::move(arena_));
      return;
    }
    charged_ = true;
  }
}

ArenaRun::~ArenaRun() {
  if (arena_ == nullptr) return;
  if (!finished_) {
    // The run stopped early: which arrays it left held is unknown.
    for (int i = 0; i < plan_.slice_count(); ++i) {
      if (!Free(i)) Hold(i);
    }
  }
  if (charged_) memory_->Release(arena_->block_.get(), plan_.bytes());
  pool_.Give(std::move(arena_));
}

bool ArenaRun::Free(int slice) const {
  return arena_->arrays_[slice].use_count() == 1;
}

void ArenaRun::Hold(int slice) {
  if (arena_->held_flags_[slice]) return;
  arena_->held_flags_[slice] = true;
  arena_->held_.push_back(slice);
}

void ArenaRun::Expire(int s) {
  for (int slice : plan_.expire_[s]) {
    if (!Free(slice)) Hold(slice);
  }
}

Offer* ArenaRun::Begin(int s) {
  if (arena_ == nullptr) return nullptr;
  taken_ += offer_.taken_count();
  offer_.Clear();
  Expire(s);
  std::vector<int>& held = arena_->held_;
  for (int slice = plan_.first_[s]; slice < plan_.first_[s + 1]; ++slice) {
    // A slice held since an earlier run is on the held list, which covers
    // its own bytes.
    const ArenaPlan::Slice& mine = plan_.slices_[slice];
    bool clear = true;
    for (size_t k = 0; k < held.size();) {
      if (Free(held[k])) {  // released since
        arena_->held_flags_[held[k]] = false;
        held[k] = held.back();
        held.pop_back();
        continue;
      }
      const ArenaPlan::Slice& other = plan_.slices_[held[k]];
      if (other.offset < mine.end && mine.offset < other.end) clear = false;
      ++k;
    }
    if (clear) offer_.Add(&arena_->arrays_[slice], mine.result);
  }
  if (offer_.empty()) return nullptr;
  // A holder that dropped its reference on another thread wrote nothing
  // after; its writes are seen before the array is written again.
  std::atomic_thread_fence(std::memory_order_acquire);
  return &offer_;
}

absl::StatusOr<HostBufferPtr> ArenaRun::Finish(HostBufferPtr result) {
  if (arena_ == nullptr) return result;
  taken_ += offer_.taken_count();
  offer_.Clear();
  Expire(static_cast<int>(plan_.expire_.size()) - 1);
  finished_ = true;
  return CopiedOut(std::move(result));
}

absl::StatusOr<HostBufferPtr> ArenaRun::CopiedOut(HostBufferPtr value) {
  if (value == nullptr) return value;
  if (value->shape().IsTuple()) {
    std::vector<HostBufferPtr> elements = value->tuple_elements();
    bool copied = false;
    for (HostBufferPtr& e : elements) {
      const HostBuffer* before = e.get();
      ASSIGN_OR_RETURN(e, CopiedOut(std::move(e)));
      copied |= e.get() != before;
    }
    return copied ? HostBuffer::MakeTuple(std::move(elements)) : value;
  }
  if (!value->InArena()) return value;
  ASSIGN_OR_RETURN(HostBufferPtr copy, HostBuffer::Allocate(value->shape(), memory_));
  if (copy->size_bytes() > 0) std::memcpy(copy->data(), value->data(), copy->size_bytes());
  return copy;
}

}  // namespace kiln::host
