// Plain tensors in host memory whose ops run at once, with no server and
// no tracing: data preparation, metrics and checks beside the traced
// Tensor, which they convert to and from (ToDevice, FromDevice) and .npy
// files (ReadNpy, WriteNpy).
//
//   HostTensor x = HostTensor::FromVector<float>(kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
//   HostTensor y = Sum(x * 2.0, {1});                  // f32[2] {12, 30}
//   Tensor on_device = y.ToDevice(ctx.get(), "cpu:0");
//
// Elementwise ops follow the device's rules value for value (base/
// element_rules.h: half types computed in float and rounded, integers
// wrapping, XLA's division and NaN-propagating maximum), broadcast as
// NumPy does, and need operands of one element type (Cast converts). A
// misuse gives an error tensor, whose status the ops pass on, as Tensor's
// ops do. Not thread-safe (as a std::vector).
#ifndef KILN_CLIENT_HOST_TENSOR_H_
#define KILN_CLIENT_HOST_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/tensor.h"
#include "compiler/ir/literal.h"

namespace kiln::client {

class LazyContext;

class HostTensor {
 public:
  // A tensor with no value (an error tensor); use the factories.
  HostTensor() : status_(absl::FailedPreconditionError("the host tensor has no value")) {}
  // `value` must be an array (tuples and tokens give an error tensor).
  explicit HostTensor(ir::Literal value);
  static HostTensor Error(absl::Status status);

  template <typename T>
  static HostTensor FromVector(ir::ElementType type, std::vector<int64_t> dims,
                               const std::vector<T>& values);
  static HostTensor Full(ir::ElementType type, std::vector<int64_t> dims, double value);
  static HostTensor Zeros(ir::ElementType type, std::vector<int64_t> dims) {
    return Full(type, std::move(dims), 0);
  }
  // 0, 1, ..., n - 1.
  static HostTensor Arange(ir::ElementType type, int64_t n);
  // The value of a device tensor (runs what it needs).
  static absl::StatusOr<HostTensor> FromDevice(const Tensor& t);
  static absl::StatusOr<HostTensor> ReadNpy(const std::string& path);
  absl::Status WriteNpy(const std::string& path) const;
  // A device tensor with this value (uploaded, or kept on the host until a
  // program needs it, as LazyContext::FromLiteral does).
  Tensor ToDevice(LazyContext* ctx, const std::string& device) const;

  const absl::Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }
  const ir::Shape& shape() const { return value_.shape(); }
  ir::ElementType dtype() const { return shape().type(); }
  const std::vector<int64_t>& dims() const { return shape().dims(); }
  int rank() const { return shape().rank(); }
  int64_t dim(int i) const { return shape().dim(i); }
  int64_t size() const { return shape().ElementCount(); }
  const ir::Literal& literal() const { return value_; }
  // Element `index` (one position per dimension) as a double; NaN for an
  // error tensor or an index out of range.
  double At(const std::vector<int64_t>& index) const;
  // The single element of a one-element tensor.
  absl::StatusOr<double> Item() const;
  std::vector<double> ToDoubles() const;
  std::string ToString() const;

 private:
  ir::Literal value_;
  absl::Status status_;
};

template <typename T>
HostTensor HostTensor::FromVector(ir::ElementType type, std::vector<int64_t> dims,
                                  const std::vector<T>& values) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  if (count != static_cast<int64_t>(values.size())) {
    return Error(absl::InvalidArgumentError("FromVector: the values do not fill the shape"));
  }
  return HostTensor(ir::Literal::FromVector<T>(type, std::move(dims), values));
}

// Elementwise, NumPy broadcasting, operands of one type.
HostTensor operator+(const HostTensor& a, const HostTensor& b);
HostTensor operator-(const HostTensor& a, const HostTensor& b);
HostTensor operator*(const HostTensor& a, const HostTensor& b);
HostTensor operator/(const HostTensor& a, const HostTensor& b);
HostTensor operator+(const HostTensor& a, double b);
HostTensor operator-(const HostTensor& a, double b);
HostTensor operator*(const HostTensor& a, double b);
HostTensor operator/(const HostTensor& a, double b);
HostTensor operator-(const HostTensor& a);
HostTensor Maximum(const HostTensor& a, const HostTensor& b);
HostTensor Minimum(const HostTensor& a, const HostTensor& b);
// pred results.
HostTensor Equal(const HostTensor& a, const HostTensor& b);
HostTensor Less(const HostTensor& a, const HostTensor& b);
HostTensor Greater(const HostTensor& a, const HostTensor& b);
// Float types.
HostTensor Exp(const HostTensor& x);
HostTensor Log(const HostTensor& x);
HostTensor Sqrt(const HostTensor& x);
HostTensor Tanh(const HostTensor& x);
HostTensor Abs(const HostTensor& x);
HostTensor Relu(const HostTensor& x);
// To another element type, with XLA's conversion rules (float to integer
// saturates, NaN to 0; halves round to nearest even).
HostTensor Cast(const HostTensor& x, ir::ElementType type);

// Reductions over `dims` (all when empty); sums of halves accumulate in
// float, as the device's do.
HostTensor Sum(const HostTensor& x, std::vector<int64_t> dims = {}, bool keep_dims = false);
HostTensor Mean(const HostTensor& x, std::vector<int64_t> dims = {}, bool keep_dims = false);
HostTensor ReduceMax(const HostTensor& x, std::vector<int64_t> dims = {},
                     bool keep_dims = false);
// The index (s32) of the first largest element along `dim`.
HostTensor Argmax(const HostTensor& x, int64_t dim);

// [m, k] x [k, n] -> [m, n], or batched [b, m, k] x [b, k, n]; float
// types, accumulated in the type (halves in float).
HostTensor Matmul(const HostTensor& a, const HostTensor& b);

HostTensor Reshape(const HostTensor& x, std::vector<int64_t> dims);
HostTensor Transpose(const HostTensor& x, std::vector<int64_t> perm);
// Elements [starts, limits) of each dimension.
HostTensor Slice(const HostTensor& x, std::vector<int64_t> starts, std::vector<int64_t> limits);
// Rows `ids` (an integer tensor) of `x` along its first dimension:
// [n, ...] -> [ids..., ...]; an id out of range is an error.
HostTensor Take(const HostTensor& x, const HostTensor& ids);

}  // namespace kiln::client

#endif  // KILN_CLIENT_HOST_TENSOR_H_
