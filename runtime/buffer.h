// Device buffers: the storage of one array (or a tuple of buffers), owned by
// shared_ptr so that a release during execution is safe. Array storage is
// 64-byte aligned and charged to a MemoryTracker for its lifetime.
#ifndef KILN_RUNTIME_BUFFER_H_
#define KILN_RUNTIME_BUFFER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/literal.h"
#include "compiler/ir/shape.h"
#include "runtime/memory.h"

namespace kiln::runtime {

class Buffer;
using BufferPtr = std::shared_ptr<Buffer>;

// Thread-compatible: a buffer is written by the one kernel that produces it
// and read-only afterwards.
class Buffer {
 public:
  // Allocates an array buffer (or a token) of `shape`, uninitialized; tracked
  // by `tracker` (borrowed, must outlive the buffer; may be null).
  static absl::StatusOr<BufferPtr> Allocate(const ir::Shape& shape,
                                            MemoryTracker* tracker);
  static BufferPtr MakeTuple(std::vector<BufferPtr> elements);
  static absl::StatusOr<BufferPtr> FromLiteral(const ir::Literal& literal,
                                               MemoryTracker* tracker);
  ~Buffer();

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const ir::Shape& shape() const { return shape_; }
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  template <typename T> T* as() { return reinterpret_cast<T*>(data_); }
  template <typename T> const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }
  int64_t size_bytes() const { return size_bytes_; }
  // What the buffer costs its device's memory (its tiles, padding included).
  int64_t charged_bytes() const { return charged_bytes_; }
  const std::vector<BufferPtr>& tuple_elements() const { return elements_; }

  ir::Literal ToLiteral() const;

 private:
  Buffer() = default;
  ir::Shape shape_;
  uint8_t* data_ = nullptr;
  int64_t size_bytes_ = 0;
  int64_t charged_bytes_ = 0;
  MemoryTracker* tracker_ = nullptr;
  std::vector<BufferPtr> elements_;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_BUFFER_H_
