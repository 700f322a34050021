#include "client/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/element_rules.h"
#include "base/type_dispatch.h"
#include "client/lazy.h"
#include "client/npy.h"

namespace kiln::client {
namespace {

using ir::ElementType;
using ir::Shape;
namespace rules = element_rules;

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

HostTensor Fail(const std::string& what, const std::string& why) {
  return HostTensor::Error(absl::InvalidArgumentError(absl::StrCat(what, ": ", why)));
}

bool IsFloat(ElementType t) { return ir::IsFloatType(t); }

// Output shape of NumPy broadcasting, or an error naming both shapes.
absl::StatusOr<std::vector<int64_t>> Broadcast(const Shape& a, const Shape& b) {
  const int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(r);
  for (int i = 0; i < r; ++i) {
    const int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    const int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(a.ToString(), " and ", b.ToString(), " do not broadcast"));
    }
    out[i] = std::max(da, db);
  }
  return out;
}

// Strides of `s` read as `out_rank` dimensions, 0 where it is broadcast.
std::vector<int64_t> BroadcastStrides(const Shape& s, const std::vector<int64_t>& out) {
  const int r = static_cast<int>(out.size());
  const std::vector<int64_t> own = Strides(s.dims());
  std::vector<int64_t> strides(r, 0);
  for (int i = 0; i < r; ++i) {
    const int is = i - (r - s.rank());
    if (is >= 0 && s.dim(is) != 1) strides[i] = own[is];
  }
  return strides;
}

// out[i] = fn(a[...], b[...]) over the broadcast shape; R is bool for
// comparisons, else the operands' type.
template <bool kPredResult, typename Fn>
HostTensor Binary(const HostTensor& a, const HostTensor& b, const char* what, Fn fn) {
  if (!a.ok()) return a;
  if (!b.ok()) return b;
  if (a.dtype() != b.dtype()) {
    return Fail(what, absl::StrCat("operands of ", a.shape().ToString(), " and ",
                                   b.shape().ToString(), " differ in type (Cast one)"));
  }
  absl::StatusOr<std::vector<int64_t>> dims = Broadcast(a.shape(), b.shape());
  if (!dims.ok()) return Fail(what, std::string(dims.status().message()));
  const ElementType out_type = kPredResult ? ElementType::kPred : a.dtype();
  ir::Literal out(Shape(out_type, *dims));
  const int64_t n = out.element_count();
  bool failed = false;
  DispatchType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using R = std::conditional_t<kPredResult, bool, T>;
    if constexpr (!std::is_invocable_v<Fn, T, T>) {
      failed = true;
    } else {
      const T* x = a.literal().data<T>();
      const T* y = b.literal().data<T>();
      R* o = out.data<R>();
      if (a.shape() == b.shape()) {
        for (int64_t i = 0; i < n; ++i) o[i] = fn(x[i], y[i]);
        return;
      }
      const std::vector<int64_t> sa = BroadcastStrides(a.shape(), *dims);
      const std::vector<int64_t> sb = BroadcastStrides(b.shape(), *dims);
      const int r = static_cast<int>(dims->size());
      std::vector<int64_t> idx(r, 0);
      int64_t pa = 0, pb = 0;
      for (int64_t i = 0; i < n; ++i) {
        o[i] = fn(x[pa], y[pb]);
        for (int d = r - 1; d >= 0; --d) {
          pa += sa[d];
          pb += sb[d];
          if (++idx[d] < (*dims)[d]) break;
          pa -= sa[d] * idx[d];
          pb -= sb[d] * idx[d];
          idx[d] = 0;
        }
      }
    }
  });
  if (failed) return Fail(what, absl::StrCat("not defined on ", a.shape().ToString()));
  return HostTensor(std::move(out));
}

// Arithmetic on numbers (not pred): the device's rules per element.
struct AddOp {
  template <typename T, typename = std::enable_if_t<!std::is_same_v<T, bool>>>
  T operator()(T a, T b) const {
    if constexpr (rules::kIsInt<T>) return rules::WrapAdd(a, b);
    else return rules::St<T>(rules::Ld(a) + rules::Ld(b));
  }
};
struct SubOp {
  template <typename T, typename = std::enable_if_t<!std::is_same_v<T, bool>>>
  T operator()(T a, T b) const {
    if constexpr (rules::kIsInt<T>) return rules::WrapSub(a, b);
    else return rules::St<T>(rules::Ld(a) - rules::Ld(b));
  }
};
struct MulOp {
  template <typename T, typename = std::enable_if_t<!std::is_same_v<T, bool>>>
  T operator()(T a, T b) const {
    if constexpr (rules::kIsInt<T>) return rules::WrapMul(a, b);
    else return rules::St<T>(rules::Ld(a) * rules::Ld(b));
  }
};
struct DivOp {
  template <typename T, typename = std::enable_if_t<!std::is_same_v<T, bool>>>
  T operator()(T a, T b) const {
    if constexpr (rules::kIsInt<T>) return rules::IntDiv(a, b);
    else return rules::St<T>(rules::Ld(a) / rules::Ld(b));
  }
};
struct MaxOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kIsFloat<T>) return rules::St<T>(rules::FMax(rules::Ld(a), rules::Ld(b)));
    else return std::max(a, b);
  }
};
struct MinOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kIsFloat<T>) return rules::St<T>(rules::FMin(rules::Ld(a), rules::Ld(b)));
    else return std::min(a, b);
  }
};

HostTensor ScalarLike(const HostTensor& like, double value) {
  if (!like.ok()) return like;
  return HostTensor::Full(like.dtype(), {}, value);
}

// out[i] = fn(x[i]) for float types.
template <typename Fn>
HostTensor UnaryFloat(const HostTensor& x, const char* what, Fn fn) {
  if (!x.ok()) return x;
  if (!IsFloat(x.dtype())) {
    return Fail(what, absl::StrCat("needs a float tensor, not ", x.shape().ToString()));
  }
  ir::Literal out(x.shape());
  DispatchType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      const T* in = x.literal().data<T>();
      T* o = out.data<T>();
      for (int64_t i = 0; i < x.size(); ++i) o[i] = rules::St<T>(fn(rules::Ld(in[i])));
    }
  });
  return HostTensor(std::move(out));
}

// The dimensions `dims` names, checked and sorted (all when empty).
absl::StatusOr<std::vector<bool>> ReducedDims(const HostTensor& x, std::vector<int64_t> dims) {
  std::vector<bool> reduced(x.rank(), dims.empty());
  for (int64_t d : dims) {
    if (d < 0) d += x.rank();
    if (d < 0 || d >= x.rank() || reduced[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad or repeated dimension for ", x.shape().ToString()));
    }
    reduced[d] = true;
  }
  return reduced;
}

// Folds x over the dimensions `reduced` marks with `fold` from `init`
// (accumulating halves in float), keeping them as size 1 when `keep`.
template <typename Fold>
HostTensor Reduce(const HostTensor& x, std::vector<int64_t> dims, bool keep, const char* what,
                  bool float_only, double init, Fold fold) {
  if (!x.ok()) return x;
  if (x.dtype() == ElementType::kPred || (float_only && !IsFloat(x.dtype()))) {
    return Fail(what, absl::StrCat("not defined on ", x.shape().ToString()));
  }
  absl::StatusOr<std::vector<bool>> reduced = ReducedDims(x, std::move(dims));
  if (!reduced.ok()) return Fail(what, std::string(reduced.status().message()));
  std::vector<int64_t> out_dims, kept_dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (!(*reduced)[d]) {
      out_dims.push_back(x.dim(d));
      kept_dims.push_back(x.dim(d));
    } else if (keep) {
      kept_dims.push_back(1);
    }
  }
  ir::Literal out(Shape(x.dtype(), keep ? kept_dims : out_dims));
  DispatchType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using A = rules::Calc<T>;
      std::vector<A> acc(out.element_count(), static_cast<A>(init));
      // Output position of each input element: its kept coordinates.
      const std::vector<int64_t> out_strides = Strides(out_dims);
      std::vector<int64_t> step(x.rank(), 0);
      for (int d = 0, k = 0; d < x.rank(); ++d) {
        if (!(*reduced)[d]) step[d] = out_strides[k++];
      }
      const T* in = x.literal().data<T>();
      std::vector<int64_t> idx(x.rank(), 0);
      int64_t at = 0;
      for (int64_t i = 0; i < x.size(); ++i) {
        acc[at] = fold(acc[at], rules::Ld(in[i]));
        for (int d = x.rank() - 1; d >= 0; --d) {
          at += step[d];
          if (++idx[d] < x.dim(d)) break;
          at -= step[d] * idx[d];
          idx[d] = 0;
        }
      }
      T* o = out.data<T>();
      for (size_t i = 0; i < acc.size(); ++i) o[i] = rules::St<T>(acc[i]);
    }
  });
  return HostTensor(std::move(out));
}

}  // namespace

HostTensor::HostTensor(ir::Literal value) : value_(std::move(value)) {
  if (!value_.shape().IsArray()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("host tensors are arrays, not ", value_.shape().ToString()));
  }
}

HostTensor HostTensor::Error(absl::Status status) {
  HostTensor t;
  t.status_ = status.ok() ? absl::InternalError("an error tensor without an error") : status;
  return t;
}

HostTensor HostTensor::Full(ElementType type, std::vector<int64_t> dims, double value) {
  if (!ir::IsArrayType(type)) return Error(absl::InvalidArgumentError("Full needs an array type"));
  for (int64_t d : dims) {
    if (d < 0) return Error(absl::InvalidArgumentError("Full: a negative dimension"));
  }
  ir::Literal lit(Shape(type, std::move(dims)));
  for (int64_t i = 0; i < lit.element_count(); ++i) lit.SetFromDouble(i, value);
  return HostTensor(std::move(lit));
}

HostTensor HostTensor::Arange(ElementType type, int64_t n) {
  if (n < 0) return Error(absl::InvalidArgumentError("Arange of a negative count"));
  ir::Literal lit(Shape(type, {n}));
  for (int64_t i = 0; i < n; ++i) lit.SetFromDouble(i, static_cast<double>(i));
  return HostTensor(std::move(lit));
}

absl::StatusOr<HostTensor> HostTensor::FromDevice(const Tensor& t) {
  absl::StatusOr<ir::Literal> value = t.ToHost();
  if (!value.ok()) return value.status();
  HostTensor h(*std::move(value));
  if (!h.ok()) return h.status();
  return h;
}

absl::StatusOr<HostTensor> HostTensor::ReadNpy(const std::string& path) {
  absl::StatusOr<ir::Literal> value = ReadNpyFile(path);
  if (!value.ok()) return value.status();
  return HostTensor(*std::move(value));
}

absl::Status HostTensor::WriteNpy(const std::string& path) const {
  if (!ok()) return status_;
  return WriteNpyFile(path, value_);
}

Tensor HostTensor::ToDevice(LazyContext* ctx, const std::string& device) const {
  if (!ok()) {
    Tensor t = ctx->FromLiteral(ir::Literal(Shape(ElementType::kF32, {})), device);
    return ErrorTensor(t, status_);
  }
  return ctx->FromLiteral(value_, device);
}

double HostTensor::At(const std::vector<int64_t>& index) const {
  if (!ok() || static_cast<int>(index.size()) != rank()) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  int64_t at = 0;
  for (int d = 0; d < rank(); ++d) {
    if (index[d] < 0 || index[d] >= dim(d)) return std::numeric_limits<double>::quiet_NaN();
    at = at * dim(d) + index[d];
  }
  return value_.GetAsDouble(at);
}

absl::StatusOr<double> HostTensor::Item() const {
  if (!ok()) return status_;
  if (size() != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("Item() needs one element, the tensor is ", shape().ToString()));
  }
  return value_.GetAsDouble(0);
}

std::vector<double> HostTensor::ToDoubles() const {
  std::vector<double> out;
  if (!ok()) return out;
  for (int64_t i = 0; i < size(); ++i) out.push_back(value_.GetAsDouble(i));
  return out;
}

std::string HostTensor::ToString() const {
  if (!ok()) return absl::StrCat("error: ", status_.message());
  std::vector<std::string> elements;
  for (int64_t i = 0; i < std::min<int64_t>(size(), 20); ++i) {
    elements.push_back(ir::FormatElement(value_, i));
  }
  return absl::StrCat(shape().ToString(), " {", absl::StrJoin(elements, ", "),
                      size() > 20 ? ", ..." : "", "}");
}

HostTensor operator+(const HostTensor& a, const HostTensor& b) {
  return Binary<false>(a, b, "add", AddOp{});
}
HostTensor operator-(const HostTensor& a, const HostTensor& b) {
  return Binary<false>(a, b, "subtract", SubOp{});
}
HostTensor operator*(const HostTensor& a, const HostTensor& b) {
  return Binary<false>(a, b, "multiply", MulOp{});
}
HostTensor operator/(const HostTensor& a, const HostTensor& b) {
  return Binary<false>(a, b, "divide", DivOp{});
}
HostTensor operator+(const HostTensor& a, double b) { return a + ScalarLike(a, b); }
HostTensor operator-(const HostTensor& a, double b) { return a - ScalarLike(a, b); }
HostTensor operator*(const HostTensor& a, double b) { return a * ScalarLike(a, b); }
HostTensor operator/(const HostTensor& a, double b) { return a / ScalarLike(a, b); }
HostTensor operator-(const HostTensor& a) { return ScalarLike(a, 0) - a; }
HostTensor Maximum(const HostTensor& a, const HostTensor& b) {
  return Binary<false>(a, b, "maximum", MaxOp{});
}
HostTensor Minimum(const HostTensor& a, const HostTensor& b) {
  return Binary<false>(a, b, "minimum", MinOp{});
}
HostTensor Equal(const HostTensor& a, const HostTensor& b) {
  return Binary<true>(a, b, "equal",
                      [](auto x, auto y) { return rules::Ld(x) == rules::Ld(y); });
}
HostTensor Less(const HostTensor& a, const HostTensor& b) {
  return Binary<true>(a, b, "less", [](auto x, auto y) { return rules::Ld(x) < rules::Ld(y); });
}
HostTensor Greater(const HostTensor& a, const HostTensor& b) {
  return Binary<true>(a, b, "greater",
                      [](auto x, auto y) { return rules::Ld(x) > rules::Ld(y); });
}

HostTensor Exp(const HostTensor& x) {
  return UnaryFloat(x, "exp", [](auto v) { return std::exp(v); });
}
HostTensor Log(const HostTensor& x) {
  return UnaryFloat(x, "log", [](auto v) { return std::log(v); });
}
HostTensor Sqrt(const HostTensor& x) {
  return UnaryFloat(x, "sqrt", [](auto v) { return std::sqrt(v); });
}
HostTensor Tanh(const HostTensor& x) {
  return UnaryFloat(x, "tanh", [](auto v) { return std::tanh(v); });
}
HostTensor Abs(const HostTensor& x) {
  return UnaryFloat(x, "abs", [](auto v) { return std::abs(v); });
}
HostTensor Relu(const HostTensor& x) {
  return UnaryFloat(x, "relu", [](auto v) { return rules::FMax(v, decltype(v)(0)); });
}

HostTensor Cast(const HostTensor& x, ElementType type) {
  if (!x.ok()) return x;
  if (!ir::IsArrayType(type)) return Fail("cast", "needs an array type");
  ir::Literal out(Shape(type, x.dims()));
  DispatchType(x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    DispatchType(type, [&](auto to_tag) {
      using To = decltype(to_tag);
      const From* in = x.literal().data<From>();
      To* o = out.data<To>();
      for (int64_t i = 0; i < x.size(); ++i) o[i] = ConvertValue<To>(in[i]);
    });
  });
  return HostTensor(std::move(out));
}

HostTensor Sum(const HostTensor& x, std::vector<int64_t> dims, bool keep_dims) {
  return Reduce(x, std::move(dims), keep_dims, "sum", false, 0, [](auto acc, auto v) {
    using A = decltype(acc);
    if constexpr (std::is_integral_v<A>) return rules::WrapAdd(acc, static_cast<A>(v));
    else return static_cast<A>(acc + v);
  });
}

HostTensor Mean(const HostTensor& x, std::vector<int64_t> dims, bool keep_dims) {
  if (!x.ok()) return x;
  if (!IsFloat(x.dtype())) return Fail("mean", "needs a float tensor (Cast first)");
  absl::StatusOr<std::vector<bool>> reduced = ReducedDims(x, dims);
  if (!reduced.ok()) return Fail("mean", std::string(reduced.status().message()));
  int64_t count = 1;
  for (int d = 0; d < x.rank(); ++d) count *= (*reduced)[d] ? x.dim(d) : 1;
  return Sum(x, std::move(dims), keep_dims) / static_cast<double>(count);
}

HostTensor ReduceMax(const HostTensor& x, std::vector<int64_t> dims, bool keep_dims) {
  return Reduce(x, std::move(dims), keep_dims, "max", true,
                -std::numeric_limits<double>::infinity(),
                [](auto acc, auto v) { return rules::FMax(acc, static_cast<decltype(acc)>(v)); });
}

HostTensor Argmax(const HostTensor& x, int64_t dim) {
  if (!x.ok()) return x;
  if (dim < 0) dim += x.rank();
  if (dim < 0 || dim >= x.rank()) return Fail("argmax", "no such dimension");
  std::vector<int64_t> out_dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (d != dim) out_dims.push_back(x.dim(d));
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= x.dim(d);
  for (int d = static_cast<int>(dim) + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const int64_t n = x.dim(static_cast<int>(dim));
  ir::Literal out(Shape(ElementType::kS32, out_dims));
  int32_t* o = out.data<int32_t>();
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t c = 0; c < inner; ++c) {
      int64_t best = 0;
      double best_value = n > 0 ? x.literal().GetAsDouble(a * n * inner + c) : 0;
      for (int64_t k = 1; k < n && !std::isnan(best_value); ++k) {
        const double v = x.literal().GetAsDouble((a * n + k) * inner + c);
        if (v > best_value || std::isnan(v)) {
          best = k;
          best_value = v;
        }
      }
      o[a * inner + c] = static_cast<int32_t>(best);
    }
  }
  return HostTensor(std::move(out));
}

HostTensor Matmul(const HostTensor& a, const HostTensor& b) {
  if (!a.ok()) return a;
  if (!b.ok()) return b;
  const bool batched = a.rank() == 3 && b.rank() == 3 && a.dim(0) == b.dim(0);
  if (a.dtype() != b.dtype() || !IsFloat(a.dtype()) ||
      !((a.rank() == 2 && b.rank() == 2) || batched) ||
      a.dim(a.rank() - 1) != b.dim(b.rank() - 2)) {
    return Fail("matmul", absl::StrCat("takes float [m,k]x[k,n] or [b,m,k]x[b,k,n], not ",
                                       a.shape().ToString(), " and ", b.shape().ToString()));
  }
  const int64_t batch = batched ? a.dim(0) : 1;
  const int64_t m = a.dim(a.rank() - 2), k = a.dim(a.rank() - 1), n = b.dim(b.rank() - 1);
  ir::Literal out(Shape(a.dtype(), batched ? std::vector<int64_t>{batch, m, n}
                                           : std::vector<int64_t>{m, n}));
  DispatchType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kIsFloat<T>) {
      using A = rules::Calc<T>;
      const T* x = a.literal().data<T>();
      const T* y = b.literal().data<T>();
      T* o = out.data<T>();
      std::vector<A> row(n);
      for (int64_t p = 0; p < batch; ++p) {
        for (int64_t i = 0; i < m; ++i) {
          std::fill(row.begin(), row.end(), A(0));
          // i-k-j order: the inner loop runs along contiguous rows of b
          // and of the result, which the compiler vectorizes.
          for (int64_t l = 0; l < k; ++l) {
            const A xv = rules::Ld(x[(p * m + i) * k + l]);
            const T* yr = y + (p * k + l) * n;
            for (int64_t j = 0; j < n; ++j) row[j] += xv * rules::Ld(yr[j]);
          }
          for (int64_t j = 0; j < n; ++j) o[(p * m + i) * n + j] = rules::St<T>(row[j]);
        }
      }
    }
  });
  return HostTensor(std::move(out));
}

HostTensor Reshape(const HostTensor& x, std::vector<int64_t> dims) {
  if (!x.ok()) return x;
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) return Fail("reshape", "a negative dimension");
    count *= d;
  }
  if (count != x.size()) {
    return Fail("reshape", absl::StrCat(x.shape().ToString(), " has ", x.size(),
                                        " elements, not ", count));
  }
  return HostTensor(ir::Literal::FromBytes(Shape(x.dtype(), std::move(dims)),
                                           x.literal().bytes()));
}

namespace {

// A new tensor of `dims` whose element at index (i0, i1, ...) is x's
// element at offset + i0 * strides[0] + i1 * strides[1] + ... (elements,
// not bytes): a strided view of x, copied out.
HostTensor CopyStrided(const HostTensor& x, const std::vector<int64_t>& dims,
                       const std::vector<int64_t>& strides, int64_t offset) {
  ir::Literal out(Shape(x.dtype(), dims));
  const int size = ir::ElementTypeSize(x.dtype());
  const uint8_t* in = x.literal().bytes().data();
  uint8_t* o = out.mutable_bytes().data();
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> idx(rank, 0);
  int64_t at = offset;
  for (int64_t i = 0; i < out.element_count(); ++i) {
    std::copy_n(in + at * size, size, o + i * size);
    for (int d = rank - 1; d >= 0; --d) {
      at += strides[d];
      if (++idx[d] < dims[d]) break;
      at -= strides[d] * idx[d];
      idx[d] = 0;
    }
  }
  return HostTensor(std::move(out));
}

}  // namespace

HostTensor Transpose(const HostTensor& x, std::vector<int64_t> perm) {
  if (!x.ok()) return x;
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(x.rank());
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity) return Fail("transpose", "the permutation is not one of the dimensions");
  const std::vector<int64_t> in_strides = Strides(x.dims());
  std::vector<int64_t> out_dims, strides;
  for (int64_t p : perm) {
    out_dims.push_back(x.dim(static_cast<int>(p)));
    strides.push_back(in_strides[p]);
  }
  return CopyStrided(x, out_dims, strides, 0);
}

HostTensor Slice(const HostTensor& x, std::vector<int64_t> starts, std::vector<int64_t> limits) {
  if (!x.ok()) return x;
  if (static_cast<int>(starts.size()) != x.rank() || static_cast<int>(limits.size()) != x.rank()) {
    return Fail("slice", "needs a start and a limit per dimension");
  }
  const std::vector<int64_t> strides = Strides(x.dims());
  std::vector<int64_t> out_dims;
  int64_t offset = 0;
  for (int d = 0; d < x.rank(); ++d) {
    if (starts[d] < 0 || limits[d] > x.dim(d) || starts[d] > limits[d]) {
      return Fail("slice", absl::StrCat("[", starts[d], ", ", limits[d], ") is outside dimension ",
                                        d, " of ", x.shape().ToString()));
    }
    out_dims.push_back(limits[d] - starts[d]);
    offset += starts[d] * strides[d];
  }
  return CopyStrided(x, out_dims, strides, offset);
}

HostTensor Take(const HostTensor& x, const HostTensor& ids) {
  if (!x.ok()) return x;
  if (!ids.ok()) return ids;
  if (x.rank() < 1 || !ir::IsIntegralType(ids.dtype()) || ids.dtype() == ElementType::kPred) {
    return Fail("take", "takes rows of a tensor of rank 1 or more by integer ids");
  }
  std::vector<int64_t> out_dims = ids.dims();
  for (int d = 1; d < x.rank(); ++d) out_dims.push_back(x.dim(d));
  ir::Literal out(Shape(x.dtype(), out_dims));
  const int64_t row_bytes = x.size() / std::max<int64_t>(x.dim(0), 1) *
                            ir::ElementTypeSize(x.dtype());
  for (int64_t i = 0; i < ids.size(); ++i) {
    const double id = ids.literal().GetAsDouble(i);
    if (id < 0 || id >= static_cast<double>(x.dim(0))) {
      return Fail("take", absl::StrCat("id ", id, " outside the ", x.dim(0), " rows"));
    }
    std::copy_n(x.literal().bytes().data() + static_cast<int64_t>(id) * row_bytes, row_bytes,
                out.mutable_bytes().data() + i * row_bytes);
  }
  return HostTensor(std::move(out));
}

}  // namespace kiln::client
