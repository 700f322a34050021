#include "client/trace_key.h"

#include <cstring>
#include <functional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "base/status_macros.h"
#include "client/lower.h"

namespace kiln::client {
namespace {

// How many fields an aggregate has: a new field changes the count wherever
// it lands (padding or not), where a size check would miss it.
struct AnyField {
  template <typename T>
  operator T() const;
};
template <typename T, size_t... I>
constexpr bool InitializesWith(std::index_sequence<I...>) {
  return requires { T{(void(I), AnyField{})...}; };
}
template <typename T, size_t N = 0>
constexpr size_t FieldCount() {
  if constexpr (InitializesWith<T>(std::make_index_sequence<N + 1>())) {
    return FieldCount<T, N + 1>();
  } else {
    return N;
  }
}

// Every field of these is written by Writer::Attributes below; a field
// added to one of them stops the build here until it is written too (and
// given an edit in trace_key_test.cc's EveryAttributeIsKeyed).
static_assert(FieldCount<ir::Attributes>() == 26);
static_assert(FieldCount<ir::LinalgOptions>() == 4);
static_assert(FieldCount<ir::SliceDim>() == 3);
static_assert(FieldCount<ir::PadDim>() == 3);
static_assert(FieldCount<ir::WindowDim>() == 6);
static_assert(FieldCount<ir::DotDims>() == 4);
static_assert(FieldCount<ir::ConvDims>() == 9);
static_assert(FieldCount<ir::GatherDims>() == 4);
static_assert(FieldCount<ir::ScatterDims>() == 4);

class Writer {
 public:
  Writer() = default;
  explicit Writer(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string& bytes() { return bytes_; }

  // Zigzag, then seven bits a byte, the high bit set on all but the last:
  // each integer delimits itself, as a fixed width would, and the small
  // ones keys are made of (ops, ids, dimensions) take a byte or two, so
  // that a key is short to write, hash and compare.
  void Int(int64_t v) {
    uint64_t u = (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
    char out[10];
    size_t n = 0;
    while (u >= 0x80) {
      out[n++] = static_cast<char>(u | 0x80);
      u >>= 7;
    }
    out[n++] = static_cast<char>(u);
    bytes_.append(out, n);
  }
  void Byte(uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void Text(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    bytes_.append(s);
  }
  void Ints(const std::vector<int64_t>& v) {
    Int(static_cast<int64_t>(v.size()));
    for (int64_t x : v) Int(x);
  }
  void Shape(const ir::Shape& s) {
    Byte(static_cast<uint8_t>(s.type()));
    if (s.IsTuple()) {
      Int(static_cast<int64_t>(s.tuple_shapes().size()));
      for (const ir::Shape& e : s.tuple_shapes()) Shape(e);
      return;
    }
    Ints(s.dims());
  }
  void Literal(const ir::Literal& l) {
    Shape(l.shape());
    Int(static_cast<int64_t>(l.bytes().size()));
    bytes_.append(reinterpret_cast<const char*>(l.bytes().data()), l.bytes().size());
    Int(static_cast<int64_t>(l.tuple_elements().size()));
    for (const ir::Literal& e : l.tuple_elements()) Literal(e);
  }
  void Attributes(const ir::Attributes& a) {
    Ints(a.dimensions);
    Ints(a.slice_sizes);
    Int(static_cast<int64_t>(a.slice.size()));
    for (const ir::SliceDim& d : a.slice) {
      Int(d.start);
      Int(d.limit);
      Int(d.stride);
    }
    Int(static_cast<int64_t>(a.padding.size()));
    for (const ir::PadDim& d : a.padding) {
      Int(d.lo);
      Int(d.hi);
      Int(d.interior);
    }
    Int(static_cast<int64_t>(a.window.size()));
    for (const ir::WindowDim& w : a.window) {
      Int(w.size);
      Int(w.stride);
      Int(w.pad_lo);
      Int(w.pad_hi);
      Int(w.base_dilation);
      Int(w.window_dilation);
    }
    Ints(a.dot.lhs_batch);
    Ints(a.dot.rhs_batch);
    Ints(a.dot.lhs_contracting);
    Ints(a.dot.rhs_contracting);
    const ir::ConvDims& c = a.conv;
    Int(c.input_batch);
    Int(c.input_feature);
    Ints(c.input_spatial);
    Int(c.kernel_input_feature);
    Int(c.kernel_output_feature);
    Ints(c.kernel_spatial);
    Int(c.output_batch);
    Int(c.output_feature);
    Ints(c.output_spatial);
    Int(a.feature_group_count);
    Int(a.batch_group_count);
    Ints(a.gather.offset_dims);
    Ints(a.gather.collapsed_slice_dims);
    Ints(a.gather.start_index_map);
    Int(a.gather.index_vector_dim);
    Ints(a.scatter.update_window_dims);
    Ints(a.scatter.inserted_window_dims);
    Ints(a.scatter.scatter_dims_to_operand_dims);
    Int(a.scatter.index_vector_dim);
    Byte(static_cast<uint8_t>(a.direction));
    Int(a.parameter_number);
    Int(a.tuple_index);
    Int(a.iota_dimension);
    Int(static_cast<int64_t>(a.replica_groups.size()));
    for (const auto& g : a.replica_groups) Ints(g);
    Int(static_cast<int64_t>(a.source_target_pairs.size()));
    for (const auto& pair : a.source_target_pairs) Ints(pair);
    Int(a.exponent_bits);
    Int(a.mantissa_bits);
    Byte(static_cast<uint8_t>(a.distribution));
    Byte(a.is_stable ? 1 : 0);
    Byte(static_cast<uint8_t>((a.linalg.lower ? 1 : 0) | (a.linalg.left_side ? 2 : 0) |
                              (a.linalg.unit_diagonal ? 4 : 0) |
                              (static_cast<int>(a.linalg.transpose_a) << 3)));
    Int(static_cast<int64_t>(a.operand_precision.size()));
    for (ir::Precision p : a.operand_precision) Byte(static_cast<uint8_t>(p));
    Text(a.custom_call_target);
    Text(a.config);
    Literal(a.literal);
  }

 private:
  std::string bytes_;
};

// Writes `node` as a leaf of the computation being walked, returning
// whether it is one.
using LeafFn = std::function<bool(const std::shared_ptr<Node>&, Writer&)>;

absl::Status WriteLoop(Writer& w, const LoopSpec* loop);
absl::Status WriteCond(Writer& w, const CondSpec* cond);

// Writes the nodes `roots` need, in the walk Lower lowers them in
// (WalkTrace), each as its op, shape, attributes and the ids of its
// operands; loop bodies nest. Ids number the nodes of one computation in
// that order.
absl::Status WriteComputation(Writer& w, NodeSpan roots,
                              const LeafFn& leaf) {
  NodeNumbers id;
  RETURN_IF_ERROR(WalkTrace(
      roots, [&](const std::shared_ptr<Node>& node) -> absl::StatusOr<bool> { return leaf(node, w); },
      [&](const std::shared_ptr<Node>& node, bool is_leaf) -> absl::Status {
        if (!is_leaf) {
          w.Byte('O');
          w.Int(static_cast<int64_t>(node->op));
          w.Shape(node->shape);
          w.Byte(static_cast<uint8_t>(node->reducer));
          // Most ops have the default attributes: one byte says so.
          w.Byte(node->attrs.empty() ? 0 : 1);
          if (!node->attrs.empty()) w.Attributes(*node->attrs);
          w.Int(static_cast<int64_t>(node->operands.size()));
          for (const auto& o : node->operands) {
            w.Int(id.Find(o.get()));
            w.Shape(o->shape);
          }
          if (node->op == ir::Opcode::kWhile) RETURN_IF_ERROR(WriteLoop(w, node->loop.get()));
          if (node->op == ir::Opcode::kConditional) RETURN_IF_ERROR(WriteCond(w, node->cond.get()));
        }
        id.Add(node.get());
        return absl::OkStatus();
      }));
  w.Byte('R');
  w.Int(static_cast<int64_t>(roots.size()));
  for (const auto& r : roots) w.Int(id.Find(r.get()));
  return absl::OkStatus();
}

// Leaves of a loop body or branch: the tuple slot each reads (BodySlots).
LeafFn SlotLeaf(absl::flat_hash_map<const Node*, int64_t> slots) {
  return [slots = std::move(slots)](const std::shared_ptr<Node>& n, Writer& w) {
    auto it = slots.find(n.get());
    if (it == slots.end()) return false;
    w.Byte('S');
    w.Int(it->second);
    return true;
  };
}

// Writes a while node's loop: its counts and its body, whose leaves are the
// carried state's slots (as LowerLoop gives them).
absl::Status WriteLoop(Writer& w, const LoopSpec* loop) {
  if (loop == nullptr) return absl::InternalError("a while node without its loop");
  w.Byte('L');
  w.Int(loop->trip_count);
  w.Int(static_cast<int64_t>(loop->placeholders.size()));
  w.Int(static_cast<int64_t>(loop->results.size()));
  w.Int(static_cast<int64_t>(loop->captures.size()));
  w.Byte(loop->effects != nullptr ? 1 : 0);
  std::vector<std::shared_ptr<Node>> body_roots = loop->results;
  if (loop->effects != nullptr) body_roots.push_back(loop->effects);
  RETURN_IF_ERROR(WriteComputation(w, body_roots,
                                   SlotLeaf(BodySlots(loop->placeholders, loop->captures, 1))));
  w.Byte('E');
  return absl::OkStatus();
}

// Writes a conditional node's branches, whose leaves are the slots of the
// tuple every branch reads (as LowerCond gives them).
absl::Status WriteCond(Writer& w, const CondSpec* cond) {
  if (cond == nullptr) return absl::InternalError("a conditional node without branches");
  w.Byte('C');
  w.Int(static_cast<int64_t>(cond->branches.size()));
  w.Int(static_cast<int64_t>(cond->operand_count));
  w.Int(static_cast<int64_t>(cond->captures.size()));
  for (const CondBranch& branch : cond->branches) {
    RETURN_IF_ERROR(WriteComputation(
        w, branch.results, SlotLeaf(BodySlots(branch.placeholders, cond->captures, 0))));
  }
  w.Byte('E');
  return absl::OkStatus();
}

}  // namespace

absl::Status KeyOfTrace(NodeSpan outputs, absl::string_view prefix, TraceKey& key) {
  key.params.clear();
  Writer w(std::move(key.bytes));
  w.bytes().clear();
  w.bytes().reserve(256);  // one op's key, without growing
  w.bytes().append(prefix.data(), prefix.size());
  LeafFn leaf = [&key](const std::shared_ptr<Node>& n, Writer& lw) {
    if (!n->realized()) return false;
    key.params.push_back(n);
    lw.Byte('P');
    lw.Shape(n->shape);
    return true;
  };
  absl::Status written = WriteComputation(w, outputs, leaf);
  key.bytes = std::move(w.bytes());
  if (!written.ok()) key.params.clear();
  return written;
}

absl::StatusOr<TraceKey> KeyOfTrace(NodeSpan outputs, absl::string_view prefix) {
  TraceKey key;
  RETURN_IF_ERROR(KeyOfTrace(outputs, prefix, key));
  return key;
}

}  // namespace kiln::client
