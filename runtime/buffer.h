// Device buffers: the storage of one array (or a tuple of buffers) on some
// device, owned by shared_ptr so that a release during execution is safe.
// The interface says nothing about where the bytes are: they are reached
// only through the owning device's copy methods (Device::CopyToBuffer,
// CopyFromBuffer), so memory the host cannot address fits here too. Each
// backend derives its own buffer type.
#ifndef KILN_RUNTIME_BUFFER_H_
#define KILN_RUNTIME_BUFFER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "compiler/ir/shape.h"

namespace kiln::runtime {

class Buffer;
using BufferPtr = std::shared_ptr<Buffer>;

// Thread-compatible: a buffer is written by the one kernel (or transfer)
// that produces it and read-only afterwards.
class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const ir::Shape& shape() const { return shape_; }
  // The array's bytes (row-major, unpadded); 0 for tuples and tokens.
  int64_t size_bytes() const { return size_bytes_; }
  // What the buffer costs its device's memory (its tiles, padding included).
  int64_t charged_bytes() const { return charged_bytes_; }

  // A tuple's elements (empty for arrays and tokens).
  virtual int tuple_size() const = 0;
  virtual BufferPtr tuple_element(int index) const = 0;

 protected:
  Buffer(ir::Shape shape, int64_t size_bytes, int64_t charged_bytes)
      : shape_(std::move(shape)), size_bytes_(size_bytes), charged_bytes_(charged_bytes) {}
  void set_charged_bytes(int64_t bytes) { charged_bytes_ = bytes; }

 private:
  const ir::Shape shape_;
  const int64_t size_bytes_;
  int64_t charged_bytes_;
};

}  // namespace kiln::runtime

#endif  // KILN_RUNTIME_BUFFER_H_
