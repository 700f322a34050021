// Buffers in host memory: what the host interpreter's kernels read and
// write directly. Array storage is 64-byte aligned and charged to a
// MemoryTracker for its lifetime.
#ifndef KILN_RUNTIME_HOST_HOST_BUFFER_H_
#define KILN_RUNTIME_HOST_HOST_BUFFER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/literal.h"
#include "runtime/buffer.h"
#include "runtime/memory.h"

namespace kiln::host {

class HostBuffer;
using HostBufferPtr = std::shared_ptr<HostBuffer>;

// Thread-compatible, as runtime::Buffer.
class HostBuffer final : public runtime::Buffer {
 public:
  // Allocates an array buffer (or a token, or a tuple of them) of `shape`,
  // uninitialized; charged to `tracker` (borrowed, must outlive the buffer;
  // may be null). RESOURCE_EXHAUSTED past the tracker's capacity.
  static absl::StatusOr<HostBufferPtr> Allocate(const ir::Shape& shape,
                                                runtime::MemoryTracker* tracker);
  static HostBufferPtr MakeTuple(std::vector<HostBufferPtr> elements);
  static absl::StatusOr<HostBufferPtr> FromLiteral(const ir::Literal& literal,
                                                   runtime::MemoryTracker* tracker);
  // An array of `shape` over the storage of `array` (an array of the same
  // byte size), which it keeps alive and which stays charged for it. For a
  // reshape of a value nothing else holds: writing through one writes the
  // other, so `array` must have no other holder.
  static HostBufferPtr Alias(HostBufferPtr array, ir::Shape shape);
  // An array of `shape` over the bytes of `storage` from `offset` (they
  // must fit), which it keeps alive; charged nothing (the storage is). For
  // a program's arena (arena.h), which holds each such view between runs:
  // `held_by_arena` says so, for Unshared.
  static HostBufferPtr View(HostBufferPtr storage, int64_t offset, ir::Shape shape,
                            bool held_by_arena);
  // The host buffer behind `buffer`, or null when another backend owns it.
  static HostBufferPtr Cast(const runtime::BufferPtr& buffer) {
    return std::dynamic_pointer_cast<HostBuffer>(buffer);
  }
  ~HostBuffer() override;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  template <typename T> T* as() { return reinterpret_cast<T*>(data_); }
  template <typename T> const T* as() const { return reinterpret_cast<const T*>(data_); }

  int tuple_size() const override { return static_cast<int>(elements_.size()); }
  runtime::BufferPtr tuple_element(int index) const override { return elements_[index]; }
  const HostBufferPtr& element(int index) const { return elements_[index]; }
  const std::vector<HostBufferPtr>& tuple_elements() const { return elements_; }

  ir::Literal ToLiteral() const;

  bool held_by_arena() const { return held_by_arena_; }
  // Whether its bytes are a program arena's: a view, or an alias of one.
  bool InArena() const {
    return held_by_arena_ || (storage_ != nullptr && storage_->InArena());
  }

 private:
  // Only the factories above construct one (through std::make_shared).
  struct Key {
    explicit Key() = default;
  };

 public:
  HostBuffer(Key, ir::Shape shape, int64_t size_bytes)
      : Buffer(std::move(shape), size_bytes, 0) {}

 private:
  // Arrays up to this size live in the buffer itself: a scalar or a few
  // elements (an eager op's) take the buffer's one allocation, together
  // with its reference count. The buffer is not declared 64-byte aligned
  // (glibc's aligned allocation is several times slower): the array starts
  // at the first 64-byte boundary of inline_, whose 16-byte alignment
  // leaves at most 48 bytes before it.
  static constexpr int64_t kInlineBytes = 64;
  uint8_t* Inline() {
    return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(inline_) + 63) &
                                      ~uintptr_t{63});
  }
  uint8_t* data_ = nullptr;
  alignas(16) uint8_t inline_[kInlineBytes + 48];
  runtime::MemoryTracker* tracker_ = nullptr;
  std::vector<HostBufferPtr> elements_;
  HostBufferPtr storage_;  // for an alias or view: the buffer whose storage it is
  bool held_by_arena_ = false;
};

// Whether nothing but `buffer` (and the arena that keeps it between runs)
// holds the buffer: a kernel may then write over it or hand it on.
inline bool Unshared(const HostBufferPtr& buffer) {
  return buffer.use_count() == (buffer->held_by_arena() ? 2 : 1);
}

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_HOST_BUFFER_H_
