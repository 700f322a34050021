#include "runtime/host/host_buffer.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/host/block_cache.h"

namespace kiln::host {

absl::StatusOr<HostBufferPtr> HostBuffer::Allocate(const ir::Shape& shape,
                                                   runtime::MemoryTracker* tracker) {
  if (shape.IsTuple()) {
    std::vector<HostBufferPtr> elements;
    for (const ir::Shape& s : shape.tuple_shapes()) {
      ASSIGN_OR_RETURN(HostBufferPtr b, Allocate(s, tracker));
      elements.push_back(std::move(b));
    }
    return MakeTuple(std::move(elements));
  }
  HostBufferPtr buf =
      std::make_shared<HostBuffer>(Key{}, shape, shape.IsArray() ? shape.ByteSize() : 0);
  if (tracker != nullptr) {
    const int64_t charged = shape.IsArray() ? tracker->FootprintOf(shape) : 0;
    RETURN_IF_ERROR(tracker->Reserve(buf.get(), charged));
    buf->tracker_ = tracker;
    buf->set_charged_bytes(charged);
  }
  if (buf->size_bytes() > 0 && buf->size_bytes() <= kInlineBytes) {
    buf->data_ = buf->Inline();
  } else if (buf->size_bytes() > 0) {
    buf->data_ = AllocateBlock(static_cast<size_t>(buf->size_bytes()));
    if (buf->data_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host allocation of ", buf->size_bytes(), " bytes failed"));
    }
  }
  return buf;
}

HostBufferPtr HostBuffer::MakeTuple(std::vector<HostBufferPtr> elements) {
  std::vector<ir::Shape> shapes;
  for (const HostBufferPtr& e : elements) shapes.push_back(e->shape());
  HostBufferPtr buf = std::make_shared<HostBuffer>(Key{}, ir::Shape::Tuple(std::move(shapes)), 0);
  buf->elements_ = std::move(elements);
  return buf;
}

absl::StatusOr<HostBufferPtr> HostBuffer::FromLiteral(const ir::Literal& literal,
                                                      runtime::MemoryTracker* tracker) {
  if (literal.shape().IsTuple()) {
    std::vector<HostBufferPtr> elements;
    for (const ir::Literal& e : literal.tuple_elements()) {
      ASSIGN_OR_RETURN(HostBufferPtr b, FromLiteral(e, tracker));
      elements.push_back(std::move(b));
    }
    return MakeTuple(std::move(elements));
  }
  ASSIGN_OR_RETURN(HostBufferPtr buf, Allocate(literal.shape(), tracker));
  if (buf->size_bytes() > 0) {
    std::memcpy(buf->data_, literal.bytes().data(), buf->size_bytes());
  }
  return buf;
}

HostBufferPtr HostBuffer::Alias(HostBufferPtr array, ir::Shape shape) {
  const int64_t bytes = array->size_bytes();
  HostBufferPtr buf = std::make_shared<HostBuffer>(Key{}, std::move(shape), bytes);
  buf->set_charged_bytes(array->charged_bytes());
  buf->data_ = array->data_;
  buf->storage_ = std::move(array);
  return buf;
}

HostBufferPtr HostBuffer::View(HostBufferPtr storage, int64_t offset, ir::Shape shape,
                               bool held_by_arena) {
  const int64_t bytes = shape.ByteSize();
  HostBufferPtr buf = std::make_shared<HostBuffer>(Key{}, std::move(shape), bytes);
  buf->data_ = storage->data_ + offset;
  buf->storage_ = std::move(storage);
  buf->held_by_arena_ = held_by_arena;
  return buf;
}

HostBuffer::~HostBuffer() {
  if (storage_ != nullptr) return;  // an alias or view: the storage's buffer frees it
  if (data_ != Inline()) FreeBlock(data_, static_cast<size_t>(size_bytes()));
  if (tracker_ != nullptr) tracker_->Release(this, charged_bytes());
}

ir::Literal HostBuffer::ToLiteral() const {
  if (shape().IsTuple()) {
    std::vector<ir::Literal> elements;
    for (const HostBufferPtr& e : elements_) elements.push_back(e->ToLiteral());
    return ir::Literal::Tuple(std::move(elements));
  }
  ir::Literal lit(shape());
  if (size_bytes() > 0) std::memcpy(lit.mutable_bytes().data(), data_, size_bytes());
  return lit;
}

}  // namespace kiln::host
