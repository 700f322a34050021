#include "compiler/ir/shape_inference.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace kiln::ir {
namespace {

absl::Status Err(std::string msg) {
  return absl::InvalidArgumentError(std::move(msg));
}

std::string Dims(const std::vector<int64_t>& d) {
  return absl::StrCat("{", absl::StrJoin(d, ","), "}");
}

absl::Status ExpectArray(const Shape& s, absl::string_view what) {
  if (!s.IsArray()) {
    return Err(absl::StrCat(what, " must be an array, got ", s.ToString()));
  }
  return absl::OkStatus();
}

absl::Status ExpectDimsInRange(const std::vector<int64_t>& dims, int rank,
                               absl::string_view what, bool unique = true) {
  std::vector<bool> seen(rank, false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) {
      return Err(absl::StrCat(what, " ", Dims(dims), " has dimension ", d,
                              " out of range for rank ", rank));
    }
    if (unique && seen[d]) {
      return Err(absl::StrCat(what, " ", Dims(dims), " repeats dimension ", d));
    }
    seen[d] = true;
  }
  return absl::OkStatus();
}

bool SameDims(const Shape& a, const Shape& b) { return a.dims() == b.dims(); }

// The scalar signature check of reducers/comparators: `c` must take
// `param_types.size()` scalars of those types.
absl::Status CheckScalarParams(const Computation* c,
                               const std::vector<ElementType>& types,
                               absl::string_view role) {
  if (c->parameter_count() != static_cast<int>(types.size())) {
    return Err(absl::StrCat(role, " computation ", c->name(), " takes ",
                            c->parameter_count(), " parameters, expected ",
                            types.size()));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    const Instruction* p = c->parameter(static_cast<int>(i));
    if (p == nullptr || p->shape() != Shape::Scalar(types[i])) {
      return Err(absl::StrCat(role, " computation ", c->name(), " parameter ",
                              i, " must be ",
                              Shape::Scalar(types[i]).ToString()));
    }
  }
  return absl::OkStatus();
}

// Reducer of N values: (T1..TN, T1..TN) -> T1 or (T1..TN).
absl::Status CheckReducer(const Instruction& instr,
                          const std::vector<ElementType>& types) {
  if (instr.called().size() != 1) {
    return Err("needs one to_apply computation");
  }
  const Computation* c = instr.called(0);
  std::vector<ElementType> params = types;
  params.insert(params.end(), types.begin(), types.end());
  RETURN_IF_ERROR(CheckScalarParams(c, params, "reducer"));
  const Shape& out = c->root()->shape();
  if (types.size() == 1) {
    if (out != Shape::Scalar(types[0])) {
      return Err(absl::StrCat("reducer computation ", c->name(), " returns ",
                              out.ToString(), ", expected ",
                              Shape::Scalar(types[0]).ToString()));
    }
    return absl::OkStatus();
  }
  std::vector<Shape> expect;
  for (ElementType t : types) expect.push_back(Shape::Scalar(t));
  if (out != Shape::Tuple(expect)) {
    return Err(absl::StrCat("reducer computation ", c->name(), " returns ",
                            out.ToString(), ", expected ",
                            Shape::Tuple(expect).ToString()));
  }
  return absl::OkStatus();
}

// Output extent of a window along one dimension.
absl::StatusOr<int64_t> WindowedSize(int64_t dim, const WindowDim& w) {
  if (w.size < 1 || w.stride < 1 || w.base_dilation < 1 ||
      w.window_dilation < 1) {
    return Err("window size, stride and dilations must be >= 1");
  }
  if (w.pad_lo < -(int64_t{1} << 40) || w.pad_hi < -(int64_t{1} << 40) ||
      w.pad_lo > (int64_t{1} << 40) || w.pad_hi > (int64_t{1} << 40)) {
    return Err("window padding out of range");
  }
  // Sizes and dilations are unbounded int64s; their products need 128 bits.
  const __int128 padded =
      (dim == 0 ? 0 : __int128{dim - 1} * w.base_dilation + 1) + w.pad_lo +
      w.pad_hi;
  const __int128 window = __int128{w.size - 1} * w.window_dilation + 1;
  if (padded < window) return 0;
  const __int128 out = (padded - window) / w.stride + 1;
  if (out > kMaxElements) {
    return Err(absl::StrCat("window output dimension exceeds ", kMaxElements));
  }
  return static_cast<int64_t>(out);
}

absl::StatusOr<Shape> InferElementwise(const Instruction& instr) {
  const Opcode op = instr.opcode();
  for (const Instruction* o : instr.operands()) {
    RETURN_IF_ERROR(ExpectArray(o->shape(), "operand"));
  }
  const Shape& a = instr.operand(0)->shape();
  const ElementType t = a.type();
  const bool is_float = IsFloatType(t);
  const bool is_int = IsIntegralType(t);
  const bool is_pred = t == ElementType::kPred;
  auto type_error = [&]() {
    return Err(absl::StrCat(OpcodeName(op), " does not accept element type ",
                            ElementTypeName(t)));
  };
  switch (op) {
    case Opcode::kCbrt: case Opcode::kCeil: case Opcode::kCos:
    case Opcode::kExp: case Opcode::kExpm1: case Opcode::kErf: case Opcode::kFloor:
    case Opcode::kLog: case Opcode::kLog1p: case Opcode::kLogistic:
    case Opcode::kRoundAfz: case Opcode::kRoundEven: case Opcode::kRsqrt:
    case Opcode::kSin: case Opcode::kSqrt: case Opcode::kTan:
    case Opcode::kTanh: case Opcode::kAtan2: case Opcode::kAcos: case Opcode::kAcosh:
    case Opcode::kAsin: case Opcode::kAsinh: case Opcode::kAtanh: case Opcode::kCosh:
    case Opcode::kSinh:
      if (!is_float) return type_error();
      break;
    case Opcode::kIsFinite:
      if (!is_float) return type_error();
      return Shape(ElementType::kPred, a.dims());
    case Opcode::kAbs: case Opcode::kNegate: case Opcode::kSign:
    case Opcode::kAdd: case Opcode::kSubtract: case Opcode::kMultiply:
    case Opcode::kDivide: case Opcode::kRemainder: case Opcode::kPower:
    case Opcode::kMaximum: case Opcode::kMinimum:
      if (op == Opcode::kMaximum || op == Opcode::kMinimum) {
        if (!is_float && !is_int && !is_pred) return type_error();
      } else if (!is_float && !is_int) {
        return type_error();
      }
      break;
    case Opcode::kNot: case Opcode::kAnd: case Opcode::kOr: case Opcode::kXor:
      if (!is_int && !is_pred) return type_error();
      break;
    case Opcode::kClz: case Opcode::kPopcnt: case Opcode::kShiftLeft:
    case Opcode::kShiftRightArithmetic: case Opcode::kShiftRightLogical:
      if (!is_int) return type_error();
      break;
    case Opcode::kConvert: {
      const ElementType to = instr.shape().type();
      if (!IsArrayType(to)) return Err("convert to a non-array type");
      return Shape(to, a.dims());
    }
    case Opcode::kBitcastConvert: {
      const ElementType to = instr.shape().type();
      if (!IsArrayType(to) || ElementTypeSize(to) != ElementTypeSize(t)) {
        return Err(absl::StrCat("bitcast-convert from ", ElementTypeName(t),
                                " to ", ElementTypeName(to),
                                " needs equal bit widths"));
      }
      // A pred is 0 or 1; other bytes have no meaning as one.
      if (to == ElementType::kPred && t != ElementType::kPred) {
        return Err(absl::StrCat("bitcast-convert from ", ElementTypeName(t),
                                " to pred: a pred's bits are not defined; compare with "
                                "zero instead"));
      }
      return Shape(to, a.dims());
    }
    default:
      break;
  }
  if (op == Opcode::kSelect) {
    const Shape& on_true = instr.operand(1)->shape();
    const Shape& on_false = instr.operand(2)->shape();
    if (t != ElementType::kPred) {
      return Err(absl::StrCat("select predicate must be pred, got ",
                              a.ToString()));
    }
    if (on_true != on_false) {
      return Err(absl::StrCat("select branches differ: ", on_true.ToString(),
                              " vs ", on_false.ToString()));
    }
    if (!a.IsScalar() && !SameDims(a, on_true)) {
      return Err(absl::StrCat("select predicate ", a.ToString(),
                              " does not match ", on_true.ToString()));
    }
    return on_true;
  }
  if (op == Opcode::kClamp) {
    const Shape& x = instr.operand(1)->shape();
    for (int i : {0, 2}) {
      const Shape& bound = instr.operand(i)->shape();
      if (bound.type() != x.type() || (!bound.IsScalar() && !SameDims(bound, x))) {
        return Err(absl::StrCat("clamp bound ", bound.ToString(),
                                " does not match operand ", x.ToString()));
      }
    }
    return x;
  }
  for (int i = 1; i < instr.operand_count(); ++i) {
    const Shape& b = instr.operand(i)->shape();
    if (b != a) {
      return Err(absl::StrCat("operand shapes differ: ", a.ToString(), " vs ",
                              b.ToString()));
    }
  }
  if (op == Opcode::kCompare) return Shape(ElementType::kPred, a.dims());
  return a;
}

absl::StatusOr<Shape> InferDot(const Instruction& instr) {
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  RETURN_IF_ERROR(ExpectArray(lhs, "dot lhs"));
  RETURN_IF_ERROR(ExpectArray(rhs, "dot rhs"));
  if (lhs.type() != rhs.type()) {
    return Err(absl::StrCat("dot operand types differ: ", lhs.ToString(),
                            " vs ", rhs.ToString()));
  }
  const DotDims& d = instr.attrs().dot;
  std::vector<int64_t> lhs_used = d.lhs_batch, rhs_used = d.rhs_batch;
  lhs_used.insert(lhs_used.end(), d.lhs_contracting.begin(),
                  d.lhs_contracting.end());
  rhs_used.insert(rhs_used.end(), d.rhs_contracting.begin(),
                  d.rhs_contracting.end());
  RETURN_IF_ERROR(ExpectDimsInRange(lhs_used, lhs.rank(), "dot lhs dims"));
  RETURN_IF_ERROR(ExpectDimsInRange(rhs_used, rhs.rank(), "dot rhs dims"));
  if (d.lhs_batch.size() != d.rhs_batch.size() ||
      d.lhs_contracting.size() != d.rhs_contracting.size()) {
    return Err("dot batch/contracting dimension counts differ");
  }
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (lhs.dim(d.lhs_batch[i]) != rhs.dim(d.rhs_batch[i])) {
      return Err(absl::StrCat("dot batch dimension sizes differ: ",
                              lhs.ToString(), " vs ", rhs.ToString()));
    }
  }
  for (size_t i = 0; i < d.lhs_contracting.size(); ++i) {
    if (lhs.dim(d.lhs_contracting[i]) != rhs.dim(d.rhs_contracting[i])) {
      return Err(absl::StrCat("dot contracting dimension sizes differ: ",
                              lhs.ToString(), " vs ", rhs.ToString()));
    }
  }
  std::vector<int64_t> dims;
  for (int64_t b : d.lhs_batch) dims.push_back(lhs.dim(b));
  for (int i = 0; i < lhs.rank(); ++i) {
    if (std::find(lhs_used.begin(), lhs_used.end(), i) == lhs_used.end()) {
      dims.push_back(lhs.dim(i));
    }
  }
  for (int i = 0; i < rhs.rank(); ++i) {
    if (std::find(rhs_used.begin(), rhs_used.end(), i) == rhs_used.end()) {
      dims.push_back(rhs.dim(i));
    }
  }
  ElementType out = instr.shape().IsArray() ? instr.shape().type() : lhs.type();
  return Shape(out, dims);
}

absl::StatusOr<Shape> InferConvolution(const Instruction& instr) {
  const Shape& in = instr.operand(0)->shape();
  const Shape& k = instr.operand(1)->shape();
  RETURN_IF_ERROR(ExpectArray(in, "convolution input"));
  RETURN_IF_ERROR(ExpectArray(k, "convolution kernel"));
  if (in.type() != k.type()) {
    return Err("convolution input and kernel types differ");
  }
  const ConvDims& c = instr.attrs().conv;
  const int n = static_cast<int>(c.input_spatial.size());
  if (in.rank() != n + 2 || k.rank() != n + 2 ||
      c.kernel_spatial.size() != size_t(n) ||
      c.output_spatial.size() != size_t(n)) {
    return Err(absl::StrCat("convolution dim_labels have ", n,
                            " spatial dims but operands are ", in.ToString(),
                            " and ", k.ToString()));
  }
  std::vector<int64_t> in_dims = c.input_spatial;
  in_dims.push_back(c.input_batch);
  in_dims.push_back(c.input_feature);
  std::vector<int64_t> k_dims = c.kernel_spatial;
  k_dims.push_back(c.kernel_input_feature);
  k_dims.push_back(c.kernel_output_feature);
  std::vector<int64_t> o_dims = c.output_spatial;
  o_dims.push_back(c.output_batch);
  o_dims.push_back(c.output_feature);
  RETURN_IF_ERROR(ExpectDimsInRange(in_dims, n + 2, "input dim_labels"));
  RETURN_IF_ERROR(ExpectDimsInRange(k_dims, n + 2, "kernel dim_labels"));
  RETURN_IF_ERROR(ExpectDimsInRange(o_dims, n + 2, "output dim_labels"));
  const int64_t fgc = instr.attrs().feature_group_count;
  const int64_t bgc = instr.attrs().batch_group_count;
  if (fgc < 1 || bgc < 1) return Err("group counts must be >= 1");
  if (fgc > 1 && bgc > 1) {
    return Err("feature_group_count and batch_group_count both > 1");
  }
  const int64_t in_features = in.dim(c.input_feature);
  const int64_t k_in = k.dim(c.kernel_input_feature);
  const int64_t k_out = k.dim(c.kernel_output_feature);
  if (in_features != __int128{k_in} * fgc) {
    return Err(absl::StrCat("input feature size ", in_features,
                            " != kernel input feature size ", k_in,
                            " * feature_group_count ", fgc));
  }
  if (k_out % fgc != 0 || k_out % bgc != 0) {
    return Err("kernel output features not divisible by the group count");
  }
  if (in.dim(c.input_batch) % bgc != 0) {
    return Err("input batch not divisible by batch_group_count");
  }
  std::vector<WindowDim> window = instr.attrs().window;
  if (window.empty()) window.resize(n);
  if (window.size() != size_t(n)) {
    return Err(absl::StrCat("window has ", window.size(),
                            " dims, convolution has ", n, " spatial dims"));
  }
  std::vector<int64_t> dims(n + 2);
  dims[c.output_batch] = in.dim(c.input_batch) / bgc;
  dims[c.output_feature] = k_out;
  for (int i = 0; i < n; ++i) {
    WindowDim w = window[i];
    if (w.size != k.dim(c.kernel_spatial[i])) {
      return Err(absl::StrCat("window size ", w.size,
                              " does not match kernel spatial size ",
                              k.dim(c.kernel_spatial[i])));
    }
    ASSIGN_OR_RETURN(dims[c.output_spatial[i]],
                     WindowedSize(in.dim(c.input_spatial[i]), w));
  }
  ElementType out = instr.shape().IsArray() ? instr.shape().type() : in.type();
  return Shape(out, dims);
}

absl::StatusOr<Shape> InferGather(const Instruction& instr) {
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(1)->shape();
  RETURN_IF_ERROR(ExpectArray(operand, "gather operand"));
  if (!indices.IsArray() || !IsIntegralType(indices.type())) {
    return Err("gather indices must be an integer array");
  }
  const GatherDims& g = instr.attrs().gather;
  const auto& sizes = instr.attrs().slice_sizes;
  if (g.index_vector_dim < 0 || g.index_vector_dim > indices.rank()) {
    return Err("gather index_vector_dim out of range");
  }
  const int64_t index_len = g.index_vector_dim == indices.rank()
                                ? 1
                                : indices.dim(g.index_vector_dim);
  if (static_cast<int64_t>(g.start_index_map.size()) != index_len) {
    return Err(absl::StrCat("gather start_index_map has ",
                            g.start_index_map.size(),
                            " entries, index vectors have ", index_len));
  }
  RETURN_IF_ERROR(
      ExpectDimsInRange(g.start_index_map, operand.rank(), "start_index_map"));
  RETURN_IF_ERROR(ExpectDimsInRange(g.collapsed_slice_dims, operand.rank(),
                                    "collapsed_slice_dims"));
  if (sizes.size() != size_t(operand.rank())) {
    return Err(absl::StrCat("gather slice_sizes has ", sizes.size(),
                            " entries for operand rank ", operand.rank()));
  }
  for (int i = 0; i < operand.rank(); ++i) {
    if (sizes[i] < 0 || sizes[i] > operand.dim(i)) {
      return Err(absl::StrCat("gather slice size ", sizes[i],
                              " out of range for dimension ", i, " of ",
                              operand.ToString()));
    }
  }
  for (int64_t d : g.collapsed_slice_dims) {
    if (sizes[d] > 1) {
      return Err(absl::StrCat("collapsed slice dimension ", d,
                              " has slice size ", sizes[d]));
    }
  }
  std::vector<int64_t> offset_sizes;
  for (int i = 0; i < operand.rank(); ++i) {
    if (std::find(g.collapsed_slice_dims.begin(), g.collapsed_slice_dims.end(),
                  i) == g.collapsed_slice_dims.end()) {
      offset_sizes.push_back(sizes[i]);
    }
  }
  if (offset_sizes.size() != g.offset_dims.size()) {
    return Err(absl::StrCat("gather offset_dims has ", g.offset_dims.size(),
                            " entries, expected ", offset_sizes.size()));
  }
  std::vector<int64_t> batch_sizes;
  for (int i = 0; i < indices.rank(); ++i) {
    if (i != g.index_vector_dim) batch_sizes.push_back(indices.dim(i));
  }
  const int rank = static_cast<int>(batch_sizes.size() + offset_sizes.size());
  RETURN_IF_ERROR(ExpectDimsInRange(g.offset_dims, rank, "offset_dims"));
  if (!std::is_sorted(g.offset_dims.begin(), g.offset_dims.end())) {
    return Err("gather offset_dims must be sorted");
  }
  std::vector<int64_t> dims(rank);
  size_t oi = 0, bi = 0;
  for (int i = 0; i < rank; ++i) {
    if (oi < g.offset_dims.size() && g.offset_dims[oi] == i) {
      dims[i] = offset_sizes[oi++];
    } else {
      dims[i] = batch_sizes[bi++];
    }
  }
  return Shape(operand.type(), dims);
}

// scatter(operands..., indices, updates...): N operands of one shape, the
// indices, and N updates of one shape, update i of operand i's type.
absl::StatusOr<Shape> InferScatter(const Instruction& instr) {
  const int count = instr.operand_count();
  if (count < 3 || count % 2 == 0) {
    return Err(absl::StrCat("scatter takes operands, indices and as many updates (an odd count "
                            "of 3 or more), got ",
                            count));
  }
  const int n = count / 2;
  const Shape& operand = instr.operand(0)->shape();
  const Shape& indices = instr.operand(n)->shape();
  const Shape& updates = instr.operand(n + 1)->shape();
  std::vector<ElementType> types;
  std::vector<Shape> results;
  for (int i = 0; i < n; ++i) {
    const Shape& o = instr.operand(i)->shape();
    const Shape& u = instr.operand(n + 1 + i)->shape();
    RETURN_IF_ERROR(ExpectArray(o, "scatter operand"));
    RETURN_IF_ERROR(ExpectArray(u, "scatter updates"));
    if (o.dims() != operand.dims() || u.dims() != updates.dims()) {
      return Err("scatter operands, and its updates, must share their dimensions");
    }
    if (u.type() != o.type()) {
      return Err("scatter updates type differs from operand");
    }
    types.push_back(o.type());
    results.push_back(o);
  }
  if (!indices.IsArray() || !IsIntegralType(indices.type())) {
    return Err("scatter indices must be an integer array");
  }
  const ScatterDims& s = instr.attrs().scatter;
  if (s.index_vector_dim < 0 || s.index_vector_dim > indices.rank()) {
    return Err("scatter index_vector_dim out of range");
  }
  const int64_t index_len = s.index_vector_dim == indices.rank()
                                ? 1
                                : indices.dim(s.index_vector_dim);
  if (static_cast<int64_t>(s.scatter_dims_to_operand_dims.size()) !=
      index_len) {
    return Err("scatter_dims_to_operand_dims does not match index vectors");
  }
  RETURN_IF_ERROR(ExpectDimsInRange(s.scatter_dims_to_operand_dims,
                                    operand.rank(),
                                    "scatter_dims_to_operand_dims"));
  RETURN_IF_ERROR(ExpectDimsInRange(s.inserted_window_dims, operand.rank(),
                                    "inserted_window_dims"));
  RETURN_IF_ERROR(ExpectDimsInRange(s.update_window_dims, updates.rank(),
                                    "update_window_dims"));
  if (!std::is_sorted(s.update_window_dims.begin(),
                      s.update_window_dims.end())) {
    return Err("update_window_dims must be sorted");
  }
  if (s.update_window_dims.size() + s.inserted_window_dims.size() !=
      size_t(operand.rank())) {
    return Err("update_window_dims + inserted_window_dims must equal the "
               "operand rank");
  }
  const int64_t batch_rank =
      indices.rank() - (s.index_vector_dim < indices.rank() ? 1 : 0);
  if (updates.rank() != batch_rank + int64_t(s.update_window_dims.size())) {
    return Err(absl::StrCat("scatter updates rank ", updates.rank(),
                            " does not match indices and window dims"));
  }
  // Window dims of updates must fit the operand's non-inserted dims.
  size_t wi = 0;
  for (int i = 0; i < operand.rank(); ++i) {
    if (std::find(s.inserted_window_dims.begin(), s.inserted_window_dims.end(),
                  i) != s.inserted_window_dims.end()) {
      continue;
    }
    if (updates.dim(s.update_window_dims[wi++]) > operand.dim(i)) {
      return Err("scatter update window larger than operand");
    }
  }
  std::vector<int64_t> upd_batch;
  for (int i = 0; i < updates.rank(); ++i) {
    if (std::find(s.update_window_dims.begin(), s.update_window_dims.end(),
                  i) == s.update_window_dims.end()) {
      upd_batch.push_back(updates.dim(i));
    }
  }
  std::vector<int64_t> idx_batch;
  for (int i = 0; i < indices.rank(); ++i) {
    if (i != s.index_vector_dim) idx_batch.push_back(indices.dim(i));
  }
  if (upd_batch != idx_batch) {
    return Err("scatter updates scatter dims do not match indices");
  }
  RETURN_IF_ERROR(CheckReducer(instr, types));
  return n == 1 ? operand : Shape::Tuple(results);
}

// The size of every replica group of a collective, when its groups are
// written; nullopt when they are not (all replicas, a count known only
// when it runs). Groups of different sizes are an error.
absl::StatusOr<std::optional<int64_t>> GroupSize(const Instruction& instr) {
  const auto& groups = instr.attrs().replica_groups;
  if (groups.empty()) return std::optional<int64_t>();
  for (const auto& g : groups) {
    if (g.size() != groups[0].size()) {
      return Err(absl::StrCat(OpcodeName(instr.opcode()),
                              " replica groups must all have the same size"));
    }
  }
  return std::optional<int64_t>(static_cast<int64_t>(groups[0].size()));
}

// all-gather concatenates the group's operands along `dimensions`;
// reduce-scatter reduces them and keeps one block along it. With written
// replica groups the result follows; without them the written result must
// be the operand with that dimension a multiple (all-gather) or a divisor
// (reduce-scatter) of the operand's.
absl::StatusOr<Shape> InferGatherOrScatterCollective(const Instruction& instr) {
  const Opcode op = instr.opcode();
  const bool gather = op == Opcode::kAllGather;
  const Attributes& at = instr.attrs();
  if (instr.operand_count() < 1) return Err(absl::StrCat(OpcodeName(op), " needs operands"));
  if (at.dimensions.size() != 1) {
    return Err(absl::StrCat(OpcodeName(op), " needs one dimension, got ", Dims(at.dimensions)));
  }
  const int64_t d = at.dimensions[0];
  ASSIGN_OR_RETURN(std::optional<int64_t> group, GroupSize(instr));
  const Shape& written = instr.shape();
  const int n = instr.operand_count();
  if (!group.has_value() && !(n == 1 ? written.IsArray()
                                     : written.IsTuple() &&
                                           written.tuple_shapes().size() == size_t(n))) {
    return Err(absl::StrCat(OpcodeName(op), " over all replicas needs its result shape"));
  }
  std::vector<Shape> outs;
  for (int i = 0; i < n; ++i) {
    const Shape& a = instr.operand(i)->shape();
    RETURN_IF_ERROR(ExpectArray(a, absl::StrCat(OpcodeName(op), " operand")));
    if (d < 0 || d >= a.rank()) {
      return Err(absl::StrCat(OpcodeName(op), " dimension ", d, " out of range for ",
                              a.ToString()));
    }
    if (i > 0 && a.type() != instr.operand(0)->shape().type()) {
      return Err(absl::StrCat(OpcodeName(op), " operands must share an element type"));
    }
    std::vector<int64_t> dims = a.dims();
    if (group.has_value()) {
      if (gather) {
        dims[d] *= *group;
      } else if (dims[d] % *group != 0) {
        return Err(absl::StrCat("reduce-scatter dimension ", d, " of ", a.ToString(),
                                " does not split into ", *group, " blocks"));
      } else {
        dims[d] /= *group;
      }
    } else {
      // The gathered (all-gather's result, reduce-scatter's operand) extent
      // must be a multiple of the other.
      const Shape& w = n == 1 ? written : written.tuple_shape(i);
      const bool fits = w.IsArray() && w.rank() == a.rank();
      const int64_t whole = fits ? (gather ? w.dim(d) : dims[d]) : -1;
      const int64_t part = fits ? (gather ? dims[d] : w.dim(d)) : -1;
      if (!fits || (part == 0 ? whole != 0 : whole % part != 0)) {
        return Err(absl::StrCat(OpcodeName(op), " result ", w.ToString(), " does not fit ",
                                a.ToString(), " along dimension ", d));
      }
      dims[d] = w.dim(d);
    }
    outs.push_back(Shape(a.type(), std::move(dims)));
  }
  if (!gather) RETURN_IF_ERROR(CheckReducer(instr, {outs[0].type()}));
  return n == 1 ? outs[0] : Shape::Tuple(outs);
}

// all-to-all: with `dimensions` (one operand) the operand is split along it
// into a block per group member and the blocks received are concatenated
// there, so the shape is kept; without it each operand goes to one member
// and the result is the tuple of what each member sent.
absl::StatusOr<Shape> InferAllToAll(const Instruction& instr) {
  const Attributes& at = instr.attrs();
  if (instr.operand_count() < 1) return Err("all-to-all needs operands");
  ASSIGN_OR_RETURN(std::optional<int64_t> group, GroupSize(instr));
  const Shape& a = instr.operand(0)->shape();
  RETURN_IF_ERROR(ExpectArray(a, "all-to-all operand"));
  if (!at.dimensions.empty()) {
    if (at.dimensions.size() != 1 || instr.operand_count() != 1) {
      return Err("all-to-all with dimensions takes one operand and one dimension");
    }
    const int64_t d = at.dimensions[0];
    if (d < 0 || d >= a.rank()) {
      return Err(absl::StrCat("all-to-all dimension ", d, " out of range for ", a.ToString()));
    }
    if (group.has_value() && a.dim(d) % *group != 0) {
      return Err(absl::StrCat("all-to-all dimension ", d, " of ", a.ToString(),
                              " does not split into ", *group, " blocks"));
    }
    return a;
  }
  std::vector<Shape> outs;
  for (const Instruction* o : instr.operands()) {
    if (o->shape() != a) return Err("all-to-all operands must share a shape");
    outs.push_back(a);
  }
  if (group.has_value() && *group != instr.operand_count()) {
    return Err(absl::StrCat("all-to-all sends ", instr.operand_count(),
                            " operands to groups of ", *group));
  }
  return Shape::Tuple(outs);
}

// The ops that call computations; on any other a called computation is
// read by no rule and written by no printer.
bool CallsComputations(Opcode op) {
  switch (op) {
    case Opcode::kReduce: case Opcode::kReduceWindow: case Opcode::kSelectAndScatter:
    case Opcode::kScatter: case Opcode::kSort: case Opcode::kCall: case Opcode::kWhile:
    case Opcode::kConditional: case Opcode::kAllReduce: case Opcode::kReduceScatter:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<Shape> InferUnchecked(const Instruction& instr) {
  const Opcode op = instr.opcode();
  const int arity = OpcodeArity(op);
  if (arity >= 0 && instr.operand_count() != arity) {
    return Err(absl::StrCat(OpcodeName(op), " takes ", arity,
                            " operands, got ", instr.operand_count()));
  }
  if (!CallsComputations(op) && !instr.called().empty()) {
    return Err(absl::StrCat(OpcodeName(op), " calls no computation, got ",
                            instr.called().size()));
  }
  if (IsElementwise(op)) return InferElementwise(instr);
  const Attributes& at = instr.attrs();
  auto operand_shape = [&](int i) -> const Shape& {
    return instr.operand(i)->shape();
  };
  auto need_called = [&](size_t n) -> absl::Status {
    if (instr.called().size() != n) {
      return Err(absl::StrCat(OpcodeName(op), " needs ", n,
                              " called computations, got ",
                              instr.called().size()));
    }
    return absl::OkStatus();
  };
  switch (op) {
    case Opcode::kParameter:
    case Opcode::kCustomCall:
      return instr.shape();
    case Opcode::kConstant:
      if (at.literal.shape() != instr.shape()) {
        return Err(absl::StrCat("constant literal has shape ",
                                at.literal.shape().ToString(), ", declared ",
                                instr.shape().ToString()));
      }
      // A literal built without its data (a constant whose literal never
      // arrived) holds fewer bytes than its shape: kernels would read past it.
      if (!at.literal.HoldsItsShape()) {
        return Err(absl::StrCat("constant literal of ", instr.shape().ToString(),
                                " does not hold its data"));
      }
      return instr.shape();
    case Opcode::kIota:
      RETURN_IF_ERROR(ExpectArray(instr.shape(), "iota"));
      if (at.iota_dimension < 0 || at.iota_dimension >= instr.shape().rank()) {
        return Err(absl::StrCat("iota_dimension ", at.iota_dimension,
                                " out of range for ", instr.shape().ToString()));
      }
      return instr.shape();
    case Opcode::kReplicaId:
      return Shape::Scalar(ElementType::kU32);
    case Opcode::kBroadcast: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "broadcast operand"));
      const Shape& out = instr.shape();
      if (!out.IsArray()) return Err("broadcast result must be an array");
      if (at.dimensions.size() != size_t(a.rank())) {
        return Err(absl::StrCat("broadcast dimensions ", Dims(at.dimensions),
                                " do not match operand rank ", a.rank()));
      }
      RETURN_IF_ERROR(
          ExpectDimsInRange(at.dimensions, out.rank(), "broadcast dimensions"));
      for (int i = 0; i < a.rank(); ++i) {
        if (a.dim(i) != out.dim(at.dimensions[i])) {
          return Err(absl::StrCat("broadcast operand dimension ", i, " (", a.dim(i),
                                  ") does not match result dimension ",
                                  at.dimensions[i], " (",
                                  out.dim(at.dimensions[i]), ")"));
        }
      }
      return Shape(a.type(), out.dims());
    }
    case Opcode::kReshape: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "reshape operand"));
      RETURN_IF_ERROR(ExpectArray(instr.shape(), "reshape result"));
      if (a.ElementCount() != instr.shape().ElementCount()) {
        return Err(absl::StrCat("reshape from ", a.ToString(), " to ",
                                instr.shape().ToString(),
                                " changes the element count"));
      }
      return Shape(a.type(), instr.shape().dims());
    }
    case Opcode::kTranspose: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "transpose operand"));
      if (at.dimensions.size() != size_t(a.rank())) {
        return Err("transpose dimensions must be a permutation of the operand "
                   "dims");
      }
      RETURN_IF_ERROR(
          ExpectDimsInRange(at.dimensions, a.rank(), "transpose dimensions"));
      std::vector<int64_t> dims;
      for (int64_t d : at.dimensions) dims.push_back(a.dim(d));
      return Shape(a.type(), dims);
    }
    case Opcode::kSlice: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "slice operand"));
      if (at.slice.size() != size_t(a.rank())) {
        return Err(absl::StrCat("slice has ", at.slice.size(),
                                " dimensions, operand has ", a.rank()));
      }
      std::vector<int64_t> dims;
      for (int i = 0; i < a.rank(); ++i) {
        const SliceDim& s = at.slice[i];
        if (s.start < 0 || s.limit > a.dim(i) || s.start > s.limit ||
            s.stride < 1) {
          return Err(absl::StrCat("slice [", s.start, ":", s.limit, ":",
                                  s.stride, "] out of range for dimension ", i,
                                  " of ", a.ToString()));
        }
        // Not (limit - start + stride - 1) / stride: that overflows for
        // strides near the int64 limit.
        dims.push_back(s.limit == s.start
                           ? 0
                           : (s.limit - s.start - 1) / s.stride + 1);
      }
      return Shape(a.type(), dims);
    }
    case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice: {
      const bool update = op == Opcode::kDynamicUpdateSlice;
      const int first_index = update ? 2 : 1;
      if (instr.operand_count() < first_index) {
        return Err(absl::StrCat(OpcodeName(op), " needs at least ",
                                first_index, " operands"));
      }
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "operand"));
      const int n_idx = instr.operand_count() - first_index;
      if (n_idx == 1 && a.rank() != 1 && operand_shape(first_index).rank() == 1) {
        // Old form: one rank-1 index array.
        const Shape& idx = operand_shape(first_index);
        if (!IsIntegralType(idx.type()) || idx.dim(0) != a.rank()) {
          return Err("start index array must be integer with one entry per "
                     "operand dimension");
        }
      } else {
        if (n_idx != a.rank()) {
          return Err(absl::StrCat(OpcodeName(op), " has ", n_idx,
                                  " start indices for operand rank ",
                                  a.rank()));
        }
        for (int i = first_index; i < instr.operand_count(); ++i) {
          const Shape& s = operand_shape(i);
          if (!s.IsScalar() || !IsIntegralType(s.type())) {
            return Err(absl::StrCat("start index ", i - first_index,
                                    " must be an integer scalar, got ",
                                    s.ToString()));
          }
        }
      }
      if (update) {
        const Shape& u = operand_shape(1);
        RETURN_IF_ERROR(ExpectArray(u, "update"));
        if (u.rank() != a.rank() || u.type() != a.type()) {
          return Err(absl::StrCat("update ", u.ToString(),
                                  " does not match operand ", a.ToString()));
        }
        for (int i = 0; i < a.rank(); ++i) {
          if (u.dim(i) > a.dim(i)) {
            return Err(absl::StrCat("update ", u.ToString(),
                                    " larger than operand ", a.ToString()));
          }
        }
        return a;
      }
      if (at.slice_sizes.size() != size_t(a.rank())) {
        return Err("dynamic_slice_sizes must have one entry per dimension");
      }
      for (int i = 0; i < a.rank(); ++i) {
        if (at.slice_sizes[i] < 0 || at.slice_sizes[i] > a.dim(i)) {
          return Err(absl::StrCat("dynamic slice size ", at.slice_sizes[i],
                                  " out of range for dimension ", i, " of ",
                                  a.ToString()));
        }
      }
      return Shape(a.type(), at.slice_sizes);
    }
    case Opcode::kConcatenate: {
      if (instr.operand_count() < 1) return Err("concatenate needs operands");
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "operand"));
      if (at.dimensions.size() != 1 || at.dimensions[0] < 0 ||
          at.dimensions[0] >= a.rank()) {
        return Err("concatenate needs one dimension in range");
      }
      const int64_t d = at.dimensions[0];
      std::vector<int64_t> dims = a.dims();
      for (int i = 1; i < instr.operand_count(); ++i) {
        const Shape& b = operand_shape(i);
        if (!b.IsArray() || b.type() != a.type() || b.rank() != a.rank()) {
          return Err(absl::StrCat("concatenate operand ", i, " ", b.ToString(),
                                  " does not match ", a.ToString()));
        }
        for (int j = 0; j < a.rank(); ++j) {
          if (j != d && b.dim(j) != a.dim(j)) {
            return Err(absl::StrCat("concatenate operand ", i, " ",
                                    b.ToString(), " does not match ",
                                    a.ToString(), " outside dimension ", d));
          }
        }
        if (dims[d] > kMaxElements - b.dim(d)) {
          return Err(absl::StrCat("concatenate dimension ", d, " exceeds ",
                                  kMaxElements));
        }
        dims[d] += b.dim(d);
      }
      return Shape(a.type(), dims);
    }
    case Opcode::kPad: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "pad operand"));
      if (operand_shape(1) != Shape::Scalar(a.type())) {
        return Err("padding value must be a scalar of the operand type");
      }
      if (at.padding.size() != size_t(a.rank())) {
        return Err(absl::StrCat("padding has ", at.padding.size(),
                                " dimensions, operand has ", a.rank()));
      }
      std::vector<int64_t> dims;
      for (int i = 0; i < a.rank(); ++i) {
        const PadDim& p = at.padding[i];
        const int64_t lim = int64_t{1} << 40;
        // Not std::abs: it overflows for INT64_MIN.
        if (p.interior < 0 || p.interior > lim || p.lo < -lim || p.lo > lim ||
            p.hi < -lim || p.hi > lim) {
          return Err("padding out of range");
        }
        // Dimension and interior may each be 2^40: the product needs 128 bits.
        const __int128 size =
            __int128{p.lo} + p.hi + a.dim(i) +
            __int128{std::max<int64_t>(a.dim(i) - 1, 0)} * p.interior;
        if (size < 0) {
          return Err(absl::StrCat("padding makes dimension ", i, " negative"));
        }
        if (size > kMaxElements) {
          return Err(absl::StrCat("padding makes dimension ", i, " exceed ",
                                  kMaxElements));
        }
        dims.push_back(static_cast<int64_t>(size));
      }
      return Shape(a.type(), dims);
    }
    case Opcode::kReverse: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "reverse operand"));
      RETURN_IF_ERROR(
          ExpectDimsInRange(at.dimensions, a.rank(), "reverse dimensions"));
      return a;
    }
    case Opcode::kReduce: {
      const int n = instr.operand_count() / 2;
      if (n < 1 || instr.operand_count() % 2 != 0) {
        return Err("reduce takes N inputs and N init values");
      }
      const Shape& a = operand_shape(0);
      std::vector<ElementType> types;
      for (int i = 0; i < n; ++i) {
        const Shape& in = operand_shape(i);
        RETURN_IF_ERROR(ExpectArray(in, "reduce input"));
        if (in.dims() != a.dims()) return Err("reduce inputs differ in dims");
        if (operand_shape(n + i) != Shape::Scalar(in.type())) {
          return Err(absl::StrCat("reduce init value ", i, " must be ",
                                  Shape::Scalar(in.type()).ToString()));
        }
        types.push_back(in.type());
      }
      RETURN_IF_ERROR(
          ExpectDimsInRange(at.dimensions, a.rank(), "reduce dimensions"));
      RETURN_IF_ERROR(CheckReducer(instr, types));
      std::vector<int64_t> dims;
      for (int i = 0; i < a.rank(); ++i) {
        if (std::find(at.dimensions.begin(), at.dimensions.end(), i) ==
            at.dimensions.end()) {
          dims.push_back(a.dim(i));
        }
      }
      if (n == 1) return Shape(types[0], dims);
      std::vector<Shape> outs;
      for (ElementType t : types) outs.push_back(Shape(t, dims));
      return Shape::Tuple(outs);
    }
    case Opcode::kReduceWindow: {
      const int n = instr.operand_count() / 2;
      if (n < 1 || instr.operand_count() % 2 != 0) {
        return Err("reduce-window takes N inputs and N init values");
      }
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "reduce-window input"));
      if (at.window.size() != size_t(a.rank())) {
        return Err(absl::StrCat("window has ", at.window.size(),
                                " dims, input has rank ", a.rank()));
      }
      std::vector<ElementType> types;
      for (int i = 0; i < n; ++i) {
        const Shape& in = operand_shape(i);
        if (!in.IsArray() || in.dims() != a.dims()) {
          return Err("reduce-window inputs differ in dims");
        }
        if (operand_shape(n + i) != Shape::Scalar(in.type())) {
          return Err("reduce-window init value type mismatch");
        }
        types.push_back(in.type());
      }
      RETURN_IF_ERROR(CheckReducer(instr, types));
      std::vector<int64_t> dims;
      for (int i = 0; i < a.rank(); ++i) {
        ASSIGN_OR_RETURN(int64_t d, WindowedSize(a.dim(i), at.window[i]));
        dims.push_back(d);
      }
      if (n == 1) return Shape(types[0], dims);
      std::vector<Shape> outs;
      for (ElementType t : types) outs.push_back(Shape(t, dims));
      return Shape::Tuple(outs);
    }
    case Opcode::kSelectAndScatter: {
      const Shape& a = operand_shape(0);
      const Shape& src = operand_shape(1);
      RETURN_IF_ERROR(ExpectArray(a, "operand"));
      RETURN_IF_ERROR(ExpectArray(src, "source"));
      if (operand_shape(2) != Shape::Scalar(a.type()) ||
          src.type() != a.type()) {
        return Err("select-and-scatter source/init types must match operand");
      }
      if (at.window.size() != size_t(a.rank())) {
        return Err("window rank does not match operand");
      }
      std::vector<int64_t> dims;
      for (int i = 0; i < a.rank(); ++i) {
        if (at.window[i].base_dilation != 1 ||
            at.window[i].window_dilation != 1) {
          return Err("select-and-scatter does not take dilations");
        }
        ASSIGN_OR_RETURN(int64_t d, WindowedSize(a.dim(i), at.window[i]));
        dims.push_back(d);
      }
      if (dims != src.dims()) {
        return Err(absl::StrCat("source ", src.ToString(),
                                " does not match the windowed operand dims ",
                                Dims(dims)));
      }
      RETURN_IF_ERROR(need_called(2));
      const Computation* sel = instr.called(0);
      RETURN_IF_ERROR(CheckScalarParams(sel, {a.type(), a.type()}, "select"));
      if (sel->root()->shape() != Shape::Scalar(ElementType::kPred)) {
        return Err("select computation must return pred[]");
      }
      const Computation* sc = instr.called(1);
      RETURN_IF_ERROR(CheckScalarParams(sc, {a.type(), a.type()}, "scatter"));
      if (sc->root()->shape() != Shape::Scalar(a.type())) {
        return Err("scatter computation must return the operand type");
      }
      return a;
    }
    case Opcode::kDot:
      return InferDot(instr);
    case Opcode::kConvolution:
      return InferConvolution(instr);
    case Opcode::kGather:
      return InferGather(instr);
    case Opcode::kScatter:
      return InferScatter(instr);
    case Opcode::kSort: {
      if (instr.operand_count() < 1) return Err("sort needs operands");
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "sort operand"));
      std::vector<ElementType> params;
      std::vector<Shape> outs;
      for (const Instruction* o : instr.operands()) {
        if (!o->shape().IsArray() || o->shape().dims() != a.dims()) {
          return Err("sort operands differ in dims");
        }
        params.push_back(o->shape().type());
        params.push_back(o->shape().type());
        outs.push_back(o->shape());
      }
      if (at.dimensions.size() != 1 || at.dimensions[0] < 0 ||
          at.dimensions[0] >= std::max(a.rank(), 1)) {
        return Err("sort needs one dimension in range");
      }
      RETURN_IF_ERROR(need_called(1));
      RETURN_IF_ERROR(CheckScalarParams(instr.called(0), params, "comparator"));
      if (instr.called(0)->root()->shape() !=
          Shape::Scalar(ElementType::kPred)) {
        return Err("sort comparator must return pred[]");
      }
      if (outs.size() == 1) return outs[0];
      return Shape::Tuple(outs);
    }
    case Opcode::kRng: {
      const Shape& a = operand_shape(0);
      const Shape& b = operand_shape(1);
      if (!a.IsScalar() || a != b) {
        return Err("rng parameters must be two scalars of one type");
      }
      if (!instr.shape().IsArray() || instr.shape().type() != a.type()) {
        return Err("rng result type must match its parameters");
      }
      if (at.distribution == RngDistribution::kNormal && !IsFloatType(a.type())) {
        return Err("rng_normal needs a floating-point type");
      }
      if (!IsFloatType(a.type()) && !IsIntegralType(a.type())) {
        return Err("rng needs a numeric type");
      }
      return instr.shape();
    }
    case Opcode::kTuple: {
      std::vector<Shape> shapes;
      for (const Instruction* o : instr.operands()) shapes.push_back(o->shape());
      return Shape::Tuple(shapes);
    }
    case Opcode::kGetTupleElement: {
      const Shape& t = operand_shape(0);
      if (!t.IsTuple()) return Err("get-tuple-element operand is not a tuple");
      if (at.tuple_index < 0 ||
          at.tuple_index >= static_cast<int64_t>(t.tuple_shapes().size())) {
        return Err(absl::StrCat("tuple index ", at.tuple_index,
                                " out of range for ", t.ToString()));
      }
      return t.tuple_shape(static_cast<int>(at.tuple_index));
    }
    case Opcode::kCall: {
      RETURN_IF_ERROR(need_called(1));
      const Computation* c = instr.called(0);
      if (c->parameter_count() != instr.operand_count()) {
        return Err(absl::StrCat("call passes ", instr.operand_count(),
                                " arguments to ", c->name(), " which takes ",
                                c->parameter_count()));
      }
      for (int i = 0; i < instr.operand_count(); ++i) {
        if (c->parameter(i) == nullptr ||
            c->parameter(i)->shape() != operand_shape(i)) {
          return Err(absl::StrCat("call argument ", i, " ",
                                  operand_shape(i).ToString(),
                                  " does not match parameter of ", c->name()));
        }
      }
      return c->root()->shape();
    }
    case Opcode::kWhile: {
      RETURN_IF_ERROR(need_called(2));
      const Computation* cond = instr.called(0);
      const Computation* body = instr.called(1);
      const Shape& s = operand_shape(0);
      for (const Computation* c : {cond, body}) {
        if (c->parameter_count() != 1 || c->parameter(0) == nullptr ||
            c->parameter(0)->shape() != s) {
          return Err(absl::StrCat("while ", c == cond ? "condition " : "body ",
                                  c->name(), " must take one parameter of ",
                                  s.ToString()));
        }
      }
      if (cond->root()->shape() != Shape::Scalar(ElementType::kPred)) {
        return Err(absl::StrCat("while condition ", cond->name(),
                                " must return pred[]"));
      }
      if (body->root()->shape() != s) {
        return Err(absl::StrCat("while body ", body->name(), " returns ",
                                body->root()->shape().ToString(),
                                ", expected ", s.ToString()));
      }
      return s;
    }
    case Opcode::kConditional: {
      const int branches = static_cast<int>(instr.called().size());
      if (branches < 1 || instr.operand_count() != branches + 1) {
        return Err("conditional needs one operand per branch plus the selector");
      }
      const Shape& sel = operand_shape(0);
      if (sel != Shape::Scalar(ElementType::kPred) &&
          sel != Shape::Scalar(ElementType::kS32)) {
        return Err("conditional selector must be pred[] or s32[]");
      }
      if (sel.type() == ElementType::kPred && branches != 2) {
        return Err("a pred selector needs exactly two branches");
      }
      const Shape& out = instr.called(0)->root()->shape();
      for (int i = 0; i < branches; ++i) {
        const Computation* c = instr.called(i);
        if (c->parameter_count() != 1 || c->parameter(0) == nullptr ||
            c->parameter(0)->shape() != operand_shape(i + 1)) {
          return Err(absl::StrCat("branch ", c->name(),
                                  " must take one parameter of ",
                                  operand_shape(i + 1).ToString()));
        }
        if (c->root()->shape() != out) {
          return Err("conditional branches return different shapes");
        }
      }
      return out;
    }
    case Opcode::kInfeed: {
      if (!operand_shape(0).IsToken()) return Err("infeed takes a token");
      const Shape& s = instr.shape();
      if (!s.IsTuple() || s.tuple_shapes().size() != 2 ||
          !s.tuple_shape(1).IsToken()) {
        return Err("infeed result must be (data, token[])");
      }
      return s;
    }
    case Opcode::kOutfeed:
      if (!operand_shape(1).IsToken()) {
        return Err("outfeed's second operand must be a token");
      }
      return Shape::Token();
    case Opcode::kAfterAll:
      for (const Instruction* o : instr.operands()) {
        if (!o->shape().IsToken()) return Err("after-all takes tokens");
      }
      return Shape::Token();
    case Opcode::kAllReduce: {
      if (instr.operand_count() < 1) return Err("all-reduce needs operands");
      std::vector<Shape> outs;
      for (const Instruction* o : instr.operands()) {
        RETURN_IF_ERROR(ExpectArray(o->shape(), "all-reduce operand"));
        outs.push_back(o->shape());
      }
      for (const Shape& s : outs) {
        if (s.type() != outs[0].type()) {
          return Err("all-reduce operands must share an element type");
        }
      }
      RETURN_IF_ERROR(CheckReducer(instr, {outs[0].type()}));
      if (outs.size() == 1) return outs[0];
      return Shape::Tuple(outs);
    }
    case Opcode::kAllGather: case Opcode::kReduceScatter:
      return InferGatherOrScatterCollective(instr);
    case Opcode::kAllToAll:
      return InferAllToAll(instr);
    case Opcode::kCollectivePermute: {
      RETURN_IF_ERROR(ExpectArray(operand_shape(0), "collective-permute operand"));
      absl::flat_hash_set<int64_t> sources, targets;
      for (const std::vector<int64_t>& pair : at.source_target_pairs) {
        if (pair.size() != 2 || pair[0] < 0 || pair[1] < 0) {
          return Err(absl::StrCat("source_target_pairs entry ", Dims(pair),
                                  " is not a pair of replica ids"));
        }
        if (!sources.insert(pair[0]).second) {
          return Err(absl::StrCat("source_target_pairs names source ", pair[0], " twice"));
        }
        if (!targets.insert(pair[1]).second) {
          return Err(absl::StrCat("source_target_pairs names target ", pair[1], " twice"));
        }
      }
      return operand_shape(0);
    }
    case Opcode::kCollectiveBroadcast:
      RETURN_IF_ERROR(ExpectArray(operand_shape(0), "collective-broadcast operand"));
      RETURN_IF_ERROR(GroupSize(instr).status());
      return operand_shape(0);
    case Opcode::kPartitionId:
      return Shape::Scalar(ElementType::kU32);
    case Opcode::kRngBitGenerator: {
      // (new state, bits): the state a u64 vector of a key and a counter,
      // as XLA's algorithms take it: three_fry u64[2], philox (and
      // rng_default, which is philox) u64[2] or u64[3].
      const Shape& state = operand_shape(0);
      const std::string& algorithm = instr.attrs().config;
      if (!algorithm.empty() && algorithm != "rng_philox" && algorithm != "rng_three_fry") {
        return Err(absl::StrCat("rng-bit-generator's algorithm '", absl::CEscape(algorithm),
                                "' is not rng_default, rng_philox or rng_three_fry"));
      }
      const bool three_fry = algorithm == "rng_three_fry";
      if (!state.IsArray() || state.type() != ElementType::kU64 || state.rank() != 1 ||
          state.dim(0) < 2 || state.dim(0) > (three_fry ? 2 : 3)) {
        return Err(absl::StrCat("rng-bit-generator's state must be u64[2]",
                                three_fry ? "" : " or u64[3]", " for ",
                                three_fry ? "rng_three_fry" : "philox", ", got ",
                                state.ToString()));
      }
      const Shape& out = instr.shape();
      if (!out.IsTuple() || out.tuple_shapes().size() != 2 || out.tuple_shape(0) != state ||
          !out.tuple_shape(1).IsArray() || !IsIntegralType(out.tuple_shape(1).type()) ||
          out.tuple_shape(1).type() == ElementType::kPred) {
        return Err(absl::StrCat("rng-bit-generator's result must be (", state.ToString(),
                                ", an integer array), got ", out.ToString()));
      }
      return out;
    }
    case Opcode::kCholesky: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "cholesky operand"));
      if (!IsFloatType(a.type()) || a.rank() < 2 || a.dim(a.rank() - 1) != a.dim(a.rank() - 2)) {
        return Err(absl::StrCat("cholesky takes floating-point square matrices [..., n, n], got ",
                                a.ToString()));
      }
      return a;
    }
    case Opcode::kTriangularSolve: {
      const Shape& a = operand_shape(0);
      const Shape& b = operand_shape(1);
      RETURN_IF_ERROR(ExpectArray(a, "triangular-solve matrix"));
      RETURN_IF_ERROR(ExpectArray(b, "triangular-solve right-hand side"));
      const int r = a.rank();
      if (!IsFloatType(a.type()) || r < 2 || a.dim(r - 1) != a.dim(r - 2)) {
        return Err(absl::StrCat(
            "triangular-solve's a must be floating-point square matrices [..., m, m], got ",
            a.ToString()));
      }
      const int64_t m = a.dim(r - 1);
      bool batch_match = b.rank() == r && b.type() == a.type();
      for (int d = 0; batch_match && d + 2 < r; ++d) batch_match = a.dim(d) == b.dim(d);
      const int64_t b_m = batch_match ? b.dim(at.linalg.left_side ? r - 2 : r - 1) : -1;
      if (!batch_match || b_m != m) {
        return Err(absl::StrCat("triangular-solve's b must be ", at.linalg.left_side ? "[..., m, n]" : "[..., n, m]",
                                " of a's type and batch for a ", a.ToString(), " (left_side=",
                                at.linalg.left_side ? "true" : "false", "), got ", b.ToString()));
      }
      return b;
    }
    case Opcode::kReducePrecision: {
      const Shape& a = operand_shape(0);
      RETURN_IF_ERROR(ExpectArray(a, "reduce-precision operand"));
      if (!IsFloatType(a.type())) {
        return Err(absl::StrCat("reduce-precision takes floating-point values, got ",
                                a.ToString()));
      }
      if (at.exponent_bits < 1 || at.exponent_bits > 11 || at.mantissa_bits < 0 ||
          at.mantissa_bits > 52) {
        return Err(absl::StrCat("reduce-precision needs 1 to 11 exponent bits and 0 to 52 "
                                "mantissa bits, got ",
                                at.exponent_bits, " and ", at.mantissa_bits));
      }
      return a;
    }
    default:
      return Err(absl::StrCat("no shape rule for ", OpcodeName(op)));
  }
}

}  // namespace

absl::StatusOr<Shape> InferShape(const Instruction& instr) {
  // Several rules take dims from the declared shape (parameter, reshape,
  // broadcast, iota, rng, infeed): an invalid one must not reach them.
  RETURN_IF_ERROR(ValidateShape(instr.shape()));
  ASSIGN_OR_RETURN(Shape result, InferUnchecked(instr));
  // Valid operands can still give an invalid result: dot and pad multiply
  // extents, so the element count can pass the limit.
  if (absl::Status st = ValidateShape(result); !st.ok()) {
    return Err(absl::StrCat("result ", st.message()));
  }
  return result;
}

}  // namespace kiln::ir
