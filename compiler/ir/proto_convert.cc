#include "compiler/ir/proto_convert.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kiln::ir {
namespace {

// Our ElementType enum and the proto's share an order, offset by one.
v1::ElementType TypeToProto(ElementType t) {
  return static_cast<v1::ElementType>(static_cast<int>(t) + 1);
}

absl::StatusOr<ElementType> TypeFromProto(int t) {
  if (t < 1 || t > static_cast<int>(ElementType::kToken) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("unknown element type ", t));
  }
  return static_cast<ElementType>(t - 1);
}

template <typename R>
std::vector<int64_t> Vec(const R& repeated) {
  return std::vector<int64_t>(repeated.begin(), repeated.end());
}
template <typename R>
void Fill(R* repeated, const std::vector<int64_t>& v) {
  repeated->Assign(v.begin(), v.end());
}

void AttrsToProto(const Attributes& a, v1::InstructionProto* p) {
  Fill(p->mutable_dimensions(), a.dimensions);
  Fill(p->mutable_slice_sizes(), a.slice_sizes);
  for (const SliceDim& s : a.slice) {
    auto* d = p->add_slice();
    d->set_start(s.start);
    d->set_limit(s.limit);
    d->set_stride(s.stride);
  }
  for (const PadDim& s : a.padding) {
    auto* d = p->add_padding();
    d->set_lo(s.lo);
    d->set_hi(s.hi);
    d->set_interior(s.interior);
  }
  for (const WindowDim& w : a.window) {
    auto* d = p->add_window();
    d->set_size(w.size);
    d->set_stride(w.stride);
    d->set_pad_lo(w.pad_lo);
    d->set_pad_hi(w.pad_hi);
    d->set_base_dilation(w.base_dilation);
    d->set_window_dilation(w.window_dilation);
  }
  Fill(p->mutable_dot()->mutable_lhs_batch(), a.dot.lhs_batch);
  Fill(p->mutable_dot()->mutable_rhs_batch(), a.dot.rhs_batch);
  Fill(p->mutable_dot()->mutable_lhs_contracting(), a.dot.lhs_contracting);
  Fill(p->mutable_dot()->mutable_rhs_contracting(), a.dot.rhs_contracting);
  auto* c = p->mutable_conv();
  c->set_input_batch(a.conv.input_batch);
  c->set_input_feature(a.conv.input_feature);
  Fill(c->mutable_input_spatial(), a.conv.input_spatial);
  c->set_kernel_input_feature(a.conv.kernel_input_feature);
  c->set_kernel_output_feature(a.conv.kernel_output_feature);
  Fill(c->mutable_kernel_spatial(), a.conv.kernel_spatial);
  c->set_output_batch(a.conv.output_batch);
  c->set_output_feature(a.conv.output_feature);
  Fill(c->mutable_output_spatial(), a.conv.output_spatial);
  p->set_feature_group_count(a.feature_group_count);
  p->set_batch_group_count(a.batch_group_count);
  auto* g = p->mutable_gather();
  Fill(g->mutable_offset_dims(), a.gather.offset_dims);
  Fill(g->mutable_collapsed_slice_dims(), a.gather.collapsed_slice_dims);
  Fill(g->mutable_start_index_map(), a.gather.start_index_map);
  g->set_index_vector_dim(a.gather.index_vector_dim);
  auto* s = p->mutable_scatter();
  Fill(s->mutable_update_window_dims(), a.scatter.update_window_dims);
  Fill(s->mutable_inserted_window_dims(), a.scatter.inserted_window_dims);
  Fill(s->mutable_scatter_dims_to_operand_dims(),
       a.scatter.scatter_dims_to_operand_dims);
  s->set_index_vector_dim(a.scatter.index_vector_dim);
  p->set_comparison_direction(std::string(ComparisonDirectionName(a.direction)));
  p->set_parameter_number(a.parameter_number);
  p->set_tuple_index(a.tuple_index);
  p->set_iota_dimension(a.iota_dimension);
  for (const auto& group : a.replica_groups) {
    Fill(p->add_replica_groups()->mutable_replica_ids(), group);
  }
  for (const auto& pair : a.source_target_pairs) {
    Fill(p->add_source_target_pairs()->mutable_replica_ids(), pair);
  }
  p->set_exponent_bits(a.exponent_bits);
  p->set_mantissa_bits(a.mantissa_bits);
  p->set_distribution(a.distribution == RngDistribution::kNormal
                          ? "rng_normal"
                          : "rng_uniform");
  p->set_is_stable(a.is_stable);
  if (a.linalg != LinalgOptions{}) {
    p->mutable_linalg()->set_lower(a.linalg.lower);
    p->mutable_linalg()->set_left_side(a.linalg.left_side);
    p->mutable_linalg()->set_unit_diagonal(a.linalg.unit_diagonal);
    p->mutable_linalg()->set_transpose_a(std::string(TransposeKindName(a.linalg.transpose_a)));
  }
  p->set_custom_call_target(a.custom_call_target);
  p->set_config(a.config);
  for (Precision prec : a.operand_precision) {
    p->add_operand_precision(std::string(PrecisionName(prec)));
  }
}

absl::Status AttrsFromProto(const v1::InstructionProto& p, Attributes* a) {
  a->dimensions = Vec(p.dimensions());
  a->slice_sizes = Vec(p.slice_sizes());
  for (const auto& d : p.slice()) a->slice.push_back({d.start(), d.limit(), d.stride()});
  for (const auto& d : p.padding()) {
    a->padding.push_back({d.lo(), d.hi(), d.interior()});
  }
  for (const auto& d : p.window()) {
    a->window.push_back({d.size(), d.stride(), d.pad_lo(), d.pad_hi(),
                         d.base_dilation(), d.window_dilation()});
  }
  a->dot = {Vec(p.dot().lhs_batch()), Vec(p.dot().rhs_batch()),
            Vec(p.dot().lhs_contracting()), Vec(p.dot().rhs_contracting())};
  const auto& c = p.conv();
  a->conv = {c.input_batch(), c.input_feature(), Vec(c.input_spatial()),
             c.kernel_input_feature(), c.kernel_output_feature(),
             Vec(c.kernel_spatial()), c.output_batch(), c.output_feature(),
             Vec(c.output_spatial())};
  a->feature_group_count = p.feature_group_count();
  a->batch_group_count = p.batch_group_count();
  a->gather = {Vec(p.gather().offset_dims()),
               Vec(p.gather().collapsed_slice_dims()),
               Vec(p.gather().start_index_map()),
               p.gather().index_vector_dim()};
  a->scatter = {Vec(p.scatter().update_window_dims()),
                Vec(p.scatter().inserted_window_dims()),
                Vec(p.scatter().scatter_dims_to_operand_dims()),
                p.scatter().index_vector_dim()};
  if (!p.comparison_direction().empty()) {
    auto d = ComparisonDirectionFromName(p.comparison_direction());
    if (!d) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown comparison direction '", p.comparison_direction(), "'"));
    }
    a->direction = *d;
  }
  a->parameter_number = p.parameter_number();
  a->tuple_index = p.tuple_index();
  a->iota_dimension = p.iota_dimension();
  for (const auto& g : p.replica_groups()) {
    a->replica_groups.push_back(Vec(g.replica_ids()));
  }
  for (const auto& pair : p.source_target_pairs()) {
    a->source_target_pairs.push_back(Vec(pair.replica_ids()));
  }
  a->exponent_bits = p.exponent_bits();
  a->mantissa_bits = p.mantissa_bits();
  if (p.distribution() == "rng_normal") {
    a->distribution = RngDistribution::kNormal;
  } else if (p.distribution().empty() || p.distribution() == "rng_uniform") {
    a->distribution = RngDistribution::kUniform;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown distribution '", p.distribution(), "'"));
  }
  a->is_stable = p.is_stable();
  a->linalg.lower = p.linalg().lower();
  a->linalg.left_side = p.linalg().left_side();
  a->linalg.unit_diagonal = p.linalg().unit_diagonal();
  if (!p.linalg().transpose_a().empty()) {
    std::optional<TransposeKind> t = TransposeKindFromName(p.linalg().transpose_a());
    if (!t) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown transpose_a '", p.linalg().transpose_a(), "'"));
    }
    a->linalg.transpose_a = *t;
  }
  a->custom_call_target = p.custom_call_target();
  a->config = p.config();
  for (const std::string& name : p.operand_precision()) {
    std::optional<Precision> prec = PrecisionFromName(name);
    if (!prec) return absl::InvalidArgumentError(absl::StrCat("unknown precision '", name, "'"));
    a->operand_precision.push_back(*prec);
  }
  if (p.has_literal()) {
    ASSIGN_OR_RETURN(a->literal, LiteralFromProto(p.literal()));
  }
  return absl::OkStatus();
}

}  // namespace

void ShapeToProto(const Shape& shape, v1::ShapeProto* proto) {
  proto->set_element_type(TypeToProto(shape.type()));
  Fill(proto->mutable_dims(), shape.dims());
  for (const Shape& s : shape.tuple_shapes()) {
    ShapeToProto(s, proto->add_tuple_shapes());
  }
}

namespace {

absl::StatusOr<Shape> ShapeFromProtoAt(const v1::ShapeProto& proto, int depth) {
  ASSIGN_OR_RETURN(ElementType t, TypeFromProto(proto.element_type()));
  Shape shape;
  if (t == ElementType::kTuple) {
    // Checked before recursing: the nesting is the sender's choice.
    if (depth >= kMaxTupleDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("tuples nested more than ", kMaxTupleDepth, " deep"));
    }
    std::vector<Shape> elements;
    for (const auto& e : proto.tuple_shapes()) {
      ASSIGN_OR_RETURN(Shape s, ShapeFromProtoAt(e, depth + 1));
      elements.push_back(std::move(s));
    }
    shape = Shape::Tuple(std::move(elements));
  } else {
    shape = Shape(t, Vec(proto.dims()));
  }
  RETURN_IF_ERROR(ValidateShape(shape));
  return shape;
}

absl::StatusOr<Literal> LiteralFromProtoAt(const v1::LiteralProto& proto, int depth);

}  // namespace

absl::StatusOr<Shape> ShapeFromProto(const v1::ShapeProto& proto) {
  return ShapeFromProtoAt(proto, 0);
}

void LiteralToProto(const Literal& literal, v1::LiteralProto* proto) {
  ShapeToProto(literal.shape(), proto->mutable_shape());
  proto->set_data(literal.bytes().data(), literal.bytes().size());
  for (const Literal& e : literal.tuple_elements()) {
    LiteralToProto(e, proto->add_tuple_elements());
  }
}

absl::StatusOr<Literal> LiteralFromProto(const v1::LiteralProto& proto) {
  return LiteralFromProtoAt(proto, 0);
}

namespace {

absl::StatusOr<Literal> LiteralFromProtoAt(const v1::LiteralProto& proto, int depth) {
  if (depth >= kMaxTupleDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("tuple literals nested more than ", kMaxTupleDepth, " deep"));
  }
  ASSIGN_OR_RETURN(Shape shape, ShapeFromProto(proto.shape()));
  if (shape.IsTuple()) {
    if (proto.tuple_elements_size() !=
        static_cast<int>(shape.tuple_shapes().size())) {
      return absl::InvalidArgumentError("tuple literal element count mismatch");
    }
    std::vector<Literal> elements;
    for (const auto& e : proto.tuple_elements()) {
      ASSIGN_OR_RETURN(Literal l, LiteralFromProtoAt(e, depth + 1));
      elements.push_back(std::move(l));
    }
    Literal lit = Literal::Tuple(std::move(elements));
    if (lit.shape() != shape) {
      return absl::InvalidArgumentError("tuple literal element shape mismatch");
    }
    return lit;
  }
  if (static_cast<int64_t>(proto.data().size()) != shape.ByteSize()) {
    return absl::InvalidArgumentError(
        absl::StrCat("literal of ", shape.ToString(), " needs ",
                     shape.ByteSize(), " bytes, got ", proto.data().size()));
  }
  Literal lit(shape);
  // An array of no elements has no storage to copy into (a null pointer).
  if (!proto.data().empty()) {
    std::memcpy(lit.mutable_bytes().data(), proto.data().data(), proto.data().size());
  }
  if (shape.type() == ElementType::kPred) {
    NormalizePredBytes(lit.mutable_bytes().data(), static_cast<int64_t>(lit.bytes().size()));
  }
  return lit;
}

}  // namespace

v1::ModuleProto ModuleToProto(const Module& module) {
  v1::ModuleProto proto;
  proto.set_name(module.name());
  absl::flat_hash_map<const Computation*, int64_t> comp_ids;
  for (size_t i = 0; i < module.computations().size(); ++i) {
    comp_ids[module.computations()[i].get()] = static_cast<int64_t>(i);
  }
  for (const auto& c : module.computations()) {
    auto* cp = proto.add_computations();
    cp->set_id(comp_ids[c.get()]);
    cp->set_name(c->name());
    for (const auto& instr : c->instructions()) {
      auto* ip = cp->add_instructions();
      ip->set_id(instr->index());
      ip->set_name(instr->name());
      ip->set_opcode(std::string(OpcodeName(instr->opcode())));
      ShapeToProto(instr->shape(), ip->mutable_shape());
      for (const Instruction* o : instr->operands()) ip->add_operand_ids(o->index());
      for (const Computation* k : instr->called()) {
        ip->add_called_computation_ids(comp_ids[k]);
      }
      AttrsToProto(instr->attrs(), ip);
      if (instr->opcode() == Opcode::kConstant) {
        LiteralToProto(instr->attrs().literal, ip->mutable_literal());
      }
    }
    cp->set_root_id(c->root() ? c->root()->index() : -1);
  }
  proto.set_entry_computation_id(module.entry() ? comp_ids[module.entry()] : -1);
  return proto;
}

absl::StatusOr<std::unique_ptr<Module>> ModuleFromProto(
    const v1::ModuleProto& proto) {
  auto module = std::make_unique<Module>(proto.name());
  absl::flat_hash_map<int64_t, Computation*> comps;
  for (const auto& cp : proto.computations()) {
    if (comps.contains(cp.id())) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate computation id ", cp.id()));
    }
    comps[cp.id()] = module->AddComputation(std::make_unique<Computation>(cp.name()));
  }
  for (const auto& cp : proto.computations()) {
    Computation* comp = comps[cp.id()];
    absl::flat_hash_map<int64_t, Instruction*> instrs;
    for (const auto& ip : cp.instructions()) {
      std::optional<Opcode> op = OpcodeFromName(ip.opcode());
      if (!op) {
        return absl::InvalidArgumentError(absl::StrCat(
            "instruction ", ip.name(), ": unknown opcode '", ip.opcode(), "'"));
      }
      ASSIGN_OR_RETURN(Shape shape, ShapeFromProto(ip.shape()));
      if (*op == Opcode::kConstant && !ip.has_literal()) {
        return absl::InvalidArgumentError(
            absl::StrCat("instruction ", ip.name(), ": a constant needs its literal"));
      }
      auto instr = std::make_unique<Instruction>(*op, shape, ip.name());
      absl::Status st = AttrsFromProto(ip, &instr->mutable_attrs());
      if (!st.ok()) return WithContext(st, absl::StrCat("instruction ", ip.name()));
      for (int64_t id : ip.operand_ids()) {
        auto it = instrs.find(id);
        if (it == instrs.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "instruction ", ip.name(), " refers to operand id ", id,
              " that is not defined before it"));
        }
        instr->AddOperand(it->second);
      }
      for (int64_t id : ip.called_computation_ids()) {
        auto it = comps.find(id);
        if (it == comps.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "instruction ", ip.name(), " calls unknown computation id ", id));
        }
        instr->AddCalled(it->second);
      }
      if (!instrs.emplace(ip.id(), comp->AddInstruction(std::move(instr))).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate instruction id ", ip.id()));
      }
    }
    auto root = instrs.find(cp.root_id());
    if (root == instrs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("computation ", cp.name(), " has unknown root id"));
    }
    comp->set_root(root->second);
  }
  auto entry = comps.find(proto.entry_computation_id());
  if (entry == comps.end()) {
    return absl::InvalidArgumentError("unknown entry computation id");
  }
  module->set_entry(entry->second);
  return module;
}

absl::Status CheckFeedValue(const Shape& shape, int64_t max_bytes) {
  bool flat = shape.IsArray();
  if (shape.IsTuple()) {
    flat = true;
    for (const Shape& e : shape.tuple_shapes()) flat = flat && e.IsArray();
  }
  if (!flat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed values are arrays or tuples of arrays, not ", shape.ToString()));
  }
  if (shape.ByteSize() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "value of ", shape.ByteSize(), " bytes exceeds the limit of ", max_bytes));
  }
  return absl::OkStatus();
}

const std::vector<uint8_t>& FeedValueBytes(const Literal& value, std::vector<uint8_t>* storage) {
  if (!value.shape().IsTuple()) return value.bytes();
  storage->clear();
  for (const Literal& e : value.tuple_elements()) {
    storage->insert(storage->end(), e.bytes().begin(), e.bytes().end());
  }
  return *storage;
}

absl::Status ChunkedValue::Start(const v1::ShapeProto& shape_proto, int64_t total_bytes,
                                 int64_t max_bytes) {
  if (started()) {
    return absl::InvalidArgumentError(absl::StrCat("a new value began after ", received_,
                                                   " of the previous value's ", total_,
                                                   " bytes"));
  }
  absl::StatusOr<Shape> shape = ShapeFromProto(shape_proto);
  if (!shape.ok()) return shape.status();
  RETURN_IF_ERROR(CheckFeedValue(*shape, max_bytes));
  if (total_bytes != shape->ByteSize()) {
    return absl::InvalidArgumentError(absl::StrCat("value declares ", total_bytes,
                                                   " bytes but ", shape->ToString(), " has ",
                                                   shape->ByteSize()));
  }
  shape_ = *shape;
  parts_.assign(shape_->IsTuple() ? shape_->tuple_shapes().size() : 1, {});
  part_ = 0;
  total_ = total_bytes;
  received_ = 0;
  return absl::OkStatus();
}

absl::Status ChunkedValue::Append(absl::string_view data) {
  if (data.empty()) return absl::OkStatus();
  if (!started()) return absl::InvalidArgumentError("data before a value's shape");
  if (static_cast<int64_t>(data.size()) > total_ - received_) {
    return absl::InvalidArgumentError(
        absl::StrCat("value sent more than its declared ", total_, " bytes"));
  }
  received_ += static_cast<int64_t>(data.size());
  // As bytes of one type, so that each copy is one memmove.
  const auto* next = reinterpret_cast<const uint8_t*>(data.data());
  size_t left = data.size();
  while (left > 0) {
    const size_t size = static_cast<size_t>(
        shape_->IsTuple() ? shape_->tuple_shapes()[part_].ByteSize() : total_);
    std::vector<uint8_t>& part = parts_[part_];
    const size_t n = std::min(left, size - part.size());
    part.insert(part.end(), next, next + n);
    next += n;
    left -= n;
    if (part.size() == size && part_ + 1 < parts_.size()) ++part_;
  }
  return absl::OkStatus();
}

Literal ChunkedValue::Take() {
  auto array = [](const Shape& shape, std::vector<uint8_t> bytes) {
    if (shape.type() == ElementType::kPred) {
      NormalizePredBytes(bytes.data(), static_cast<int64_t>(bytes.size()));
    }
    return Literal::FromBytes(shape, std::move(bytes));
  };
  Literal out;
  if (shape_->IsTuple()) {
    std::vector<Literal> elements;
    for (size_t i = 0; i < parts_.size(); ++i) {
      elements.push_back(array(shape_->tuple_shapes()[i], std::move(parts_[i])));
    }
    out = Literal::Tuple(std::move(elements));
  } else {
    out = array(*shape_, std::move(parts_[0]));
  }
  shape_.reset();
  parts_ = {};
  part_ = 0;
  total_ = received_ = 0;
  return out;
}

}  // namespace kiln::ir
