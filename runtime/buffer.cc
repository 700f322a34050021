#include "runtime/buffer.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/ir/status_macros.h"

namespace kiln::runtime {

absl::StatusOr<BufferPtr> Buffer::Allocate(const ir::Shape& shape,
                                           MemoryTracker* tracker) {
  if (shape.IsTuple()) {
    std::vector<BufferPtr> elements;
    for (const ir::Shape& s : shape.tuple_shapes()) {
      ASSIGN_OR_RETURN(BufferPtr b, Allocate(s, tracker));
      elements.push_back(std::move(b));
    }
    return MakeTuple(std::move(elements));
  }
  BufferPtr buf(new Buffer());
  buf->shape_ = shape;
  buf->size_bytes_ = shape.IsArray() ? shape.ByteSize() : 0;
  if (tracker != nullptr) {
    const int64_t charged = shape.IsArray() ? tracker->FootprintOf(shape) : 0;
    RETURN_IF_ERROR(tracker->Reserve(buf.get(), charged));
    buf->tracker_ = tracker;
    buf->charged_bytes_ = charged;
  }
  if (buf->size_bytes_ > 0) {
    size_t rounded = (static_cast<size_t>(buf->size_bytes_) + 63) & ~size_t{63};
    buf->data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
    if (buf->data_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "host allocation of ", buf->size_bytes_, " bytes failed"));
    }
  }
  return buf;
}

BufferPtr Buffer::MakeTuple(std::vector<BufferPtr> elements) {
  BufferPtr buf(new Buffer());
  std::vector<ir::Shape> shapes;
  for (const BufferPtr& e : elements) shapes.push_back(e->shape());
  buf->shape_ = ir::Shape::Tuple(std::move(shapes));
  buf->elements_ = std::move(elements);
  return buf;
}

absl::StatusOr<BufferPtr> Buffer::FromLiteral(const ir::Literal& literal,
                                              MemoryTracker* tracker) {
  if (literal.shape().IsTuple()) {
    std::vector<BufferPtr> elements;
    for (const ir::Literal& e : literal.tuple_elements()) {
      ASSIGN_OR_RETURN(BufferPtr b, FromLiteral(e, tracker));
      elements.push_back(std::move(b));
    }
    return MakeTuple(std::move(elements));
  }
  ASSIGN_OR_RETURN(BufferPtr buf, Allocate(literal.shape(), tracker));
  if (buf->size_bytes_ > 0) {
    std::memcpy(buf->data_, literal.bytes().data(), buf->size_bytes_);
  }
  return buf;
}

Buffer::~Buffer() {
  std::free(data_);
  if (tracker_ != nullptr) tracker_->Release(this, charged_bytes_);
}

ir::Literal Buffer::ToLiteral() const {
  if (shape_.IsTuple()) {
    std::vector<ir::Literal> elements;
    for (const BufferPtr& e : elements_) elements.push_back(e->ToLiteral());
    return ir::Literal::Tuple(std::move(elements));
  }
  ir::Literal lit(shape_);
  if (size_bytes_ > 0) {
    std::memcpy(lit.mutable_bytes().data(), data_, size_bytes_);
  }
  return lit;
}

}  // namespace kiln::runtime
