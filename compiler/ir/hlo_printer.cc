#include "compiler/ir/hlo_printer.h"

#include <algorithm>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/hlo_values.h"

namespace kiln::ir {
namespace {

// Whether `config` can be written unquoted, as XLA writes a LAPACK call's
// options ({uplo = 76 : ui8}): one brace group that the parser reads back
// whole, of characters that cannot end the attribute or start another.
bool ReadsBackWhole(const std::string& config) {
  if (config.empty() || config.front() != '{') return false;
  int depth = 0;
  for (size_t i = 0; i < config.size(); ++i) {
    const char ch = config[i];
    if (!(absl::ascii_isalnum(ch) || ch == ' ' || ch == '=' || ch == ':' || ch == ',' ||
          ch == '{' || ch == '}' || ch == '_')) {
      return false;
    }
    if (ch == '{') ++depth;
    if (ch == '}' && --depth == 0 && i + 1 != config.size()) return false;
  }
  return depth == 0;
}

std::string List(const std::vector<int64_t>& v) {
  return absl::StrCat("{", absl::StrJoin(v, ","), "}");
}

// replica_groups, source_target_pairs: {{0,1},{2,3}}.
std::string ListOfLists(const std::vector<std::vector<int64_t>>& lists) {
  std::vector<std::string> parts;
  for (const auto& l : lists) parts.push_back(List(l));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string WindowText(const std::vector<WindowDim>& w) {
  auto field = [&](auto get) {
    std::vector<std::string> parts;
    for (const WindowDim& d : w) parts.push_back(get(d));
    return absl::StrJoin(parts, "x");
  };
  std::string out = absl::StrCat(
      "{size=", field([](const WindowDim& d) { return absl::StrCat(d.size); }));
  auto any = [&](auto pred) {
    for (const WindowDim& d : w) {
      if (pred(d)) return true;
    }
    return false;
  };
  if (any([](const WindowDim& d) { return d.stride != 1; })) {
    absl::StrAppend(&out, " stride=", field([](const WindowDim& d) {
                      return absl::StrCat(d.stride);
                    }));
  }
  if (any([](const WindowDim& d) { return d.pad_lo != 0 || d.pad_hi != 0; })) {
    absl::StrAppend(&out, " pad=", field([](const WindowDim& d) {
                      return absl::StrCat(d.pad_lo, "_", d.pad_hi);
                    }));
  }
  if (any([](const WindowDim& d) { return d.base_dilation != 1; })) {
    absl::StrAppend(&out, " lhs_dilate=", field([](const WindowDim& d) {
                      return absl::StrCat(d.base_dilation);
                    }));
  }
  if (any([](const WindowDim& d) { return d.window_dilation != 1; })) {
    absl::StrAppend(&out, " rhs_dilate=", field([](const WindowDim& d) {
                      return absl::StrCat(d.window_dilation);
                    }));
  }
  return out + "}";
}

std::string DimLabels(const ConvDims& c) {
  const size_t n = c.input_spatial.size() + 2;
  std::string in(n, '?'), k(n, '?'), out(n, '?');
  in[c.input_batch] = 'b';
  in[c.input_feature] = 'f';
  k[c.kernel_input_feature] = 'i';
  k[c.kernel_output_feature] = 'o';
  out[c.output_batch] = 'b';
  out[c.output_feature] = 'f';
  for (size_t i = 0; i < c.input_spatial.size(); ++i) {
    char digit = static_cast<char>('0' + i);
    in[c.input_spatial[i]] = digit;
    k[c.kernel_spatial[i]] = digit;
    out[c.output_spatial[i]] = digit;
  }
  return absl::StrCat(in, "_", k, "->", out);
}

template <typename Add>
void AddPrecision(const Attributes& a, Add& add) {
  if (a.operand_precision.empty()) return;
  std::vector<std::string> names;
  for (Precision p : a.operand_precision) names.emplace_back(PrecisionName(p));
  add("operand_precision", absl::StrCat("{", absl::StrJoin(names, ","), "}"));
}

}  // namespace

std::string PrintAttributes(
    const Instruction& instr,
    const std::function<std::string(const Computation*)>& comp_name) {
  const Attributes& a = instr.attrs();
  std::vector<std::string> parts;
  auto add = [&](absl::string_view key, std::string value) {
    parts.push_back(absl::StrCat(key, "=", value));
  };
  auto called = [&](int i) { return comp_name(instr.called(i)); };
  switch (instr.opcode()) {
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kReverse:
    case Opcode::kConcatenate:
      add("dimensions", List(a.dimensions));
      break;
    case Opcode::kReduce:
      add("dimensions", List(a.dimensions));
      add("to_apply", called(0));
      break;
    case Opcode::kSort:
      add("dimensions", List(a.dimensions));
      if (a.is_stable) add("is_stable", "true");
      add("to_apply", called(0));
      break;
    case Opcode::kSlice: {
      std::vector<std::string> dims;
      for (const SliceDim& s : a.slice) {
        dims.push_back(s.stride == 1
                           ? absl::StrCat("[", s.start, ":", s.limit, "]")
                           : absl::StrCat("[", s.start, ":", s.limit, ":",
                                          s.stride, "]"));
      }
      add("slice", absl::StrCat("{", absl::StrJoin(dims, ", "), "}"));
      break;
    }
    case Opcode::kDynamicSlice:
      add("dynamic_slice_sizes", List(a.slice_sizes));
      break;
    case Opcode::kPad: {
      std::vector<std::string> dims;
      for (const PadDim& p : a.padding) {
        dims.push_back(p.interior == 0
                           ? absl::StrCat(p.lo, "_", p.hi)
                           : absl::StrCat(p.lo, "_", p.hi, "_", p.interior));
      }
      add("padding", absl::StrJoin(dims, "x"));
      break;
    }
    case Opcode::kReduceWindow:
      add("window", WindowText(a.window));
      add("to_apply", called(0));
      break;
    case Opcode::kSelectAndScatter:
      add("window", WindowText(a.window));
      add("select", called(0));
      add("scatter", called(1));
      break;
    case Opcode::kDot:
      if (!a.dot.lhs_batch.empty()) add("lhs_batch_dims", List(a.dot.lhs_batch));
      add("lhs_contracting_dims", List(a.dot.lhs_contracting));
      if (!a.dot.rhs_batch.empty()) add("rhs_batch_dims", List(a.dot.rhs_batch));
      add("rhs_contracting_dims", List(a.dot.rhs_contracting));
      AddPrecision(a, add);
      break;
    case Opcode::kConvolution:
      if (!a.window.empty()) add("window", WindowText(a.window));
      add("dim_labels", DimLabels(a.conv));
      if (a.feature_group_count != 1) {
        add("feature_group_count", absl::StrCat(a.feature_group_count));
      }
      if (a.batch_group_count != 1) {
        add("batch_group_count", absl::StrCat(a.batch_group_count));
      }
      AddPrecision(a, add);
      break;
    case Opcode::kCompare:
      add("direction", std::string(ComparisonDirectionName(a.direction)));
      break;
    case Opcode::kGather:
      add("offset_dims", List(a.gather.offset_dims));
      add("collapsed_slice_dims", List(a.gather.collapsed_slice_dims));
      add("start_index_map", List(a.gather.start_index_map));
      add("index_vector_dim", absl::StrCat(a.gather.index_vector_dim));
      add("slice_sizes", List(a.slice_sizes));
      break;
    case Opcode::kScatter:
      add("update_window_dims", List(a.scatter.update_window_dims));
      add("inserted_window_dims", List(a.scatter.inserted_window_dims));
      add("scatter_dims_to_operand_dims",
          List(a.scatter.scatter_dims_to_operand_dims));
      add("index_vector_dim", absl::StrCat(a.scatter.index_vector_dim));
      add("to_apply", called(0));
      break;
    case Opcode::kIota:
      add("iota_dimension", absl::StrCat(a.iota_dimension));
      break;
    case Opcode::kGetTupleElement:
      add("index", absl::StrCat(a.tuple_index));
      break;
    case Opcode::kRng:
      add("distribution", a.distribution == RngDistribution::kNormal
                              ? "rng_normal"
                              : "rng_uniform");
      break;
    case Opcode::kCall:
      add("to_apply", called(0));
      break;
    case Opcode::kWhile:
      add("condition", called(0));
      add("body", called(1));
      break;
    case Opcode::kConditional:
      if (instr.operand_count() > 0 &&
          instr.operand(0)->shape().type() == ElementType::kPred) {
        add("true_computation", called(0));
        add("false_computation", called(1));
      } else {
        std::vector<std::string> names;
        for (size_t i = 0; i < instr.called().size(); ++i) {
          names.push_back(called(static_cast<int>(i)));
        }
        add("branch_computations",
            absl::StrCat("{", absl::StrJoin(names, ", "), "}"));
      }
      break;
    case Opcode::kAllReduce:
      add("replica_groups", ListOfLists(a.replica_groups));
      add("to_apply", called(0));
      break;
    case Opcode::kAllGather:
      add("dimensions", List(a.dimensions));
      add("replica_groups", ListOfLists(a.replica_groups));
      break;
    case Opcode::kReduceScatter:
      add("dimensions", List(a.dimensions));
      add("replica_groups", ListOfLists(a.replica_groups));
      add("to_apply", called(0));
      break;
    case Opcode::kAllToAll:
      if (!a.dimensions.empty()) add("dimensions", List(a.dimensions));
      add("replica_groups", ListOfLists(a.replica_groups));
      break;
    case Opcode::kCollectivePermute:
      add("source_target_pairs", ListOfLists(a.source_target_pairs));
      break;
    case Opcode::kRngBitGenerator:
      add("algorithm", a.config.empty() ? std::string("rng_default") : a.config);
      break;
    case Opcode::kCollectiveBroadcast:
      add("replica_groups", ListOfLists(a.replica_groups));
      break;
    case Opcode::kCholesky:
      add("lower", a.linalg.lower ? "true" : "false");
      break;
    case Opcode::kTriangularSolve:
      add("left_side", a.linalg.left_side ? "true" : "false");
      add("lower", a.linalg.lower ? "true" : "false");
      add("unit_diagonal", a.linalg.unit_diagonal ? "true" : "false");
      add("transpose_a", std::string(TransposeKindName(a.linalg.transpose_a)));
      break;
    case Opcode::kReducePrecision:
      add("exponent_bits", absl::StrCat(a.exponent_bits));
      add("mantissa_bits", absl::StrCat(a.mantissa_bits));
      break;
    case Opcode::kCustomCall:
      add("custom_call_target", hlo_text::Quote(a.custom_call_target));
      // The options of a LAPACK call the host backend runs (hlo_lowering.h),
      // as the parser spells them; anything else (from a proto) quoted and
      // escaped, so that no config can write text of its own.
      if (!a.config.empty()) {
        const bool plain = ReadsBackWhole(a.config);
        add("backend_config",
            plain ? a.config : hlo_text::Quote(a.config));
      }
      break;
    case Opcode::kInfeed:
      if (!a.config.empty()) add("infeed_config", hlo_text::Quote(a.config));
      break;
    case Opcode::kOutfeed:
      if (!a.config.empty()) add("outfeed_config", hlo_text::Quote(a.config));
      break;
    default:
      break;
  }
  return absl::StrJoin(parts, ", ");
}

std::vector<const Computation*> PrintOrder(const Module& module) {
  const std::vector<const Computation*> reachable = module.PostOrder();
  const absl::flat_hash_set<const Computation*> reached(reachable.begin(), reachable.end());
  // Computations not reachable from the entry are printed too, first and in
  // the module's order, so that printing the parsed text keeps the order.
  std::vector<const Computation*> order;
  for (const auto& c : module.computations()) {
    if (!reached.contains(c.get())) order.push_back(c.get());
  }
  order.insert(order.end(), reachable.begin(), reachable.end());
  return order;
}

std::string PrintModule(const Module& module, const PrintOptions& options) {
  const std::vector<const Computation*> order = PrintOrder(module);
  absl::flat_hash_map<const Computation*, std::string> comp_names;
  for (size_t i = 0; i < order.size(); ++i) {
    comp_names[order[i]] = options.canonical_names
                               ? absl::StrCat("%c", i)
                               : absl::StrCat("%", order[i]->name());
  }
  auto comp_name = [&](const Computation* c) {
    auto it = comp_names.find(c);
    return it == comp_names.end() ? std::string("%<unknown>") : it->second;
  };
  std::string out = options.canonical_names
                        ? "HloModule m\n"
                        : absl::StrCat("HloModule ", module.name(), "\n");
  for (const Computation* c : order) {
    auto instr_name = [&](const Instruction* i) {
      return options.canonical_names ? absl::StrCat("%", i->index())
                                     : absl::StrCat("%", i->name());
    };
    std::vector<std::string> params;
    for (const Instruction* p : c->parameters()) {
      if (p == nullptr) continue;
      params.push_back(absl::StrCat(instr_name(p).substr(1), ": ",
                                    p->shape().ToString()));
    }
    absl::StrAppend(&out, "\n", c == module.entry() ? "ENTRY " : "",
                    comp_name(c), " (", absl::StrJoin(params, ", "), ") -> ",
                    c->root() ? c->root()->shape().ToString() : "()", " {\n");
    for (const auto& instr : c->instructions()) {
      absl::StrAppend(&out, "  ", instr.get() == c->root() ? "ROOT " : "",
                      instr_name(instr.get()), " = ", instr->shape().ToString(),
                      " ", OpcodeName(instr->opcode()), "(");
      if (instr->opcode() == Opcode::kConstant) {
        absl::StrAppend(&out, instr->attrs().literal.ToText());
      } else if (instr->opcode() == Opcode::kParameter) {
        absl::StrAppend(&out, instr->attrs().parameter_number);
      } else {
        std::vector<std::string> ops;
        for (const Instruction* o : instr->operands()) {
          ops.push_back(instr_name(o));
        }
        absl::StrAppend(&out, absl::StrJoin(ops, ", "));
      }
      out += ")";
      std::string attrs = PrintAttributes(*instr, comp_name);
      if (!attrs.empty()) absl::StrAppend(&out, ", ", attrs);
      out += "\n";
    }
    out += "}\n";
  }
  return out;
}

}  // namespace kiln::ir
