#include "client/lower.h"

#include <functional>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/builder.h"
#include "base/status_macros.h"

namespace kiln::client {
namespace {

// Builds the reducer computations a module needs, once per (reducer, type).
class ReducerCache {
 public:
  explicit ReducerCache(ir::Module* module) : module_(module) {}
  ir::Computation* Get(Reducer r, ir::ElementType type) {
    auto key = std::make_pair(r, type);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    if (r == Reducer::kReplace) {
      // (old, new) -> new.
      ir::Builder b(module_, absl::StrCat("replace_", ir::ElementTypeName(type)));
      b.Parameter(0, ir::Shape::Scalar(type), "old");
      ir::Instruction* update = b.Parameter(1, ir::Shape::Scalar(type), "new");
      ir::Computation* c = b.Build(update).value_or(nullptr);
      cache_[key] = c;
      return c;
    }
    ir::Opcode op = r == Reducer::kAdd   ? ir::Opcode::kAdd
                    : r == Reducer::kMax ? ir::Opcode::kMaximum
                    : r == Reducer::kMin ? ir::Opcode::kMinimum
                                         : ir::Opcode::kMultiply;
    if (type == ir::ElementType::kPred) {
      op = r == Reducer::kMin || r == Reducer::kMultiply ? ir::Opcode::kAnd : ir::Opcode::kOr;
    }
    ir::Computation* c = ir::Builder::ScalarBinary(module_, op, type);
    cache_[key] = c;
    return c;
  }
  // (a0, b0, a1, b1, ...) -> a0 <direction> b0: a sort's comparator that
  // orders by the first operand, the others carried along.
  ir::Computation* SortComparator(const std::vector<ir::ElementType>& types,
                                  ir::ComparisonDirection direction) {
    std::string name = absl::StrCat("sort_", ir::ComparisonDirectionName(direction));
    for (ir::ElementType t : types) absl::StrAppend(&name, "_", ir::ElementTypeName(t));
    if (auto it = comparators_.find(name); it != comparators_.end()) return it->second;
    ir::Builder b(module_, name);
    std::vector<ir::Instruction*> params;
    for (size_t i = 0; i < types.size(); ++i) {
      const ir::Shape scalar = ir::Shape::Scalar(types[i]);
      params.push_back(b.Parameter(static_cast<int64_t>(2 * i), scalar, absl::StrCat("a", i)));
      params.push_back(b.Parameter(static_cast<int64_t>(2 * i + 1), scalar, absl::StrCat("b", i)));
    }
    b.Compare(params[0], params[1], direction);
    ir::Computation* c = b.Build().value_or(nullptr);
    comparators_[name] = c;
    return c;
  }
  ir::Computation* SelectGe(ir::ElementType type) {
    if (select_ge_.contains(type)) return select_ge_[type];
    ir::Builder b(module_, absl::StrCat("select_ge_", ir::ElementTypeName(type)));
    ir::Instruction* x = b.Parameter(0, ir::Shape::Scalar(type), "x");
    ir::Instruction* y = b.Parameter(1, ir::Shape::Scalar(type), "y");
    b.Compare(x, y, ir::ComparisonDirection::kGe);
    ir::Computation* c = b.Build().value_or(nullptr);
    select_ge_[type] = c;
    return c;
  }

 private:
  ir::Module* module_;
  std::map<std::pair<Reducer, ir::ElementType>, ir::Computation*> cache_;
  absl::flat_hash_map<ir::ElementType, ir::Computation*> select_ge_;
  absl::flat_hash_map<std::string, ir::Computation*> comparators_;
};

// Returns the instruction for a node that is not lowered as an op of the
// computation being built (a parameter or a loop input), or null.
using LeafFn = std::function<absl::StatusOr<ir::Instruction*>(const std::shared_ptr<Node>&)>;

class Lowerer {
 public:
  explicit Lowerer(ir::Module* module) : module_(module), reducers_(module) {}

  // Lowers what `roots` need into `b`; returns their instructions.
  absl::StatusOr<std::vector<ir::Instruction*>> LowerInto(
      ir::Builder& b, NodeSpan roots, const LeafFn& leaf) {
    absl::flat_hash_map<const Node*, ir::Instruction*> lowered;
    RETURN_IF_ERROR(WalkTrace(
        roots,
        [&](const std::shared_ptr<Node>& node) -> absl::StatusOr<bool> {
          ASSIGN_OR_RETURN(ir::Instruction * as_leaf, leaf(node));
          if (as_leaf != nullptr) lowered[node.get()] = as_leaf;
          return as_leaf != nullptr;
        },
        [&](const std::shared_ptr<Node>& node, bool is_leaf) -> absl::Status {
          if (is_leaf) return absl::OkStatus();
          std::vector<ir::Instruction*> operands;
          for (const auto& o : node->operands) operands.push_back(lowered.at(o.get()));
          ASSIGN_OR_RETURN(ir::Instruction * instr, LowerOp(b, *node, std::move(operands)));
          if (instr == nullptr) return b.status();
          lowered[node.get()] = instr;
          return absl::OkStatus();
        }));
    std::vector<ir::Instruction*> out;
    for (const auto& r : roots) out.push_back(lowered.at(r.get()));
    return out;
  }

 private:
  absl::StatusOr<ir::Instruction*> LowerOp(ir::Builder& b, const Node& node,
                                           std::vector<ir::Instruction*> operands) {
    if (node.op == ir::Opcode::kConstant) return b.Constant(node.attrs->literal);
    if (node.op == ir::Opcode::kParameter) {
      return absl::FailedPreconditionError(
          "a tensor of a device loop body or a conditional branch was used outside it");
    }
    if (node.op == ir::Opcode::kWhile) return LowerLoop(b, node, std::move(operands));
    if (node.op == ir::Opcode::kConditional) return LowerCond(b, node, std::move(operands));
    std::vector<ir::Computation*> called;
    const ir::ElementType type =
        node.operands.empty() ? node.shape.type() : node.operands[0]->shape.type();
    if (node.op == ir::Opcode::kSort) {
      std::vector<ir::ElementType> types;
      for (const auto& o : node.operands) types.push_back(o->shape.type());
      called = {reducers_.SortComparator(types, node.attrs->direction)};
    } else if (node.op == ir::Opcode::kSelectAndScatter) {
      called = {reducers_.SelectGe(type), reducers_.Get(Reducer::kAdd, type)};
    } else if (node.reducer != Reducer::kNone) {
      called = {reducers_.Get(node.reducer, type)};
    }
    return b.AddOp(node.op, std::move(operands), *node.attrs, called, node.shape);
  }

  // Leaves read from the computation's tuple parameter `tuple` at `slots`.
  static LeafFn TupleLeaf(ir::Builder& b, ir::Instruction* tuple,
                          absl::flat_hash_map<const Node*, int64_t> slots) {
    return [&b, tuple, slots = std::move(slots)](
               const std::shared_ptr<Node>& n) -> absl::StatusOr<ir::Instruction*> {
      auto it = slots.find(n.get());
      if (it == slots.end()) return nullptr;
      return b.GetTupleElement(tuple, it->second);
    };
  }

  // The carried tuple is (s32 counter, state..., captured...): the condition
  // compares the counter with the trip count; the body reads the rest.
  absl::StatusOr<ir::Instruction*> LowerLoop(ir::Builder& b, const Node& node,
                                             std::vector<ir::Instruction*> operands) {
    const LoopSpec& loop = *node.loop;
    const int id = loops_++;
    std::vector<ir::Shape> carried{ir::Shape::Scalar(ir::ElementType::kS32)};
    for (const auto& o : node.operands) carried.push_back(o->shape);
    const ir::Shape tuple = ir::Shape::Tuple(carried);

    ir::Builder cond(module_, absl::StrCat("loop", id, "_condition"));
    ir::Instruction* cp = cond.Parameter(0, tuple, "state");
    cond.Compare(cond.GetTupleElement(cp, 0),
                 cond.ConstantScalar<int32_t>(ir::ElementType::kS32,
                                              static_cast<int32_t>(loop.trip_count)),
                 ir::ComparisonDirection::kLt);
    ASSIGN_OR_RETURN(ir::Computation * cond_comp, cond.Build());

    ir::Builder body(module_, absl::StrCat("loop", id, "_body"));
    ir::Instruction* bp = body.Parameter(0, tuple, "state");
    std::vector<std::shared_ptr<Node>> roots = loop.results;
    if (loop.effects != nullptr) roots.push_back(loop.effects);
    ASSIGN_OR_RETURN(std::vector<ir::Instruction*> outs,
                     LowerInto(body, roots,
                               TupleLeaf(body, bp, BodySlots(loop.placeholders, loop.captures, 1))));
    std::vector<ir::Instruction*> next{body.Binary(
        ir::Opcode::kAdd, body.GetTupleElement(bp, 0),
        body.ConstantScalar<int32_t>(ir::ElementType::kS32, 1))};
    for (size_t i = 0; i < loop.results.size(); ++i) next.push_back(outs[i]);
    for (size_t i = 0; i < loop.captures.size(); ++i) {
      next.push_back(body.GetTupleElement(bp, 1 + static_cast<int64_t>(loop.results.size() + i)));
    }
    // The outfeeds and infeeds reach the root through no value; they stay
    // in the body as instructions (every instruction of a body runs).
    ASSIGN_OR_RETURN(ir::Computation * body_comp, body.Build(body.Tuple(next)));

    std::vector<ir::Instruction*> init{b.ConstantScalar<int32_t>(ir::ElementType::kS32, 0)};
    for (ir::Instruction* o : operands) init.push_back(o);
    return b.While(cond_comp, body_comp, b.Tuple(init));
  }

  // Every branch reads one tuple (operands..., captures...): the node's
  // operands after the selector.
  absl::StatusOr<ir::Instruction*> LowerCond(ir::Builder& b, const Node& node,
                                             std::vector<ir::Instruction*> operands) {
    if (node.cond == nullptr) return absl::InternalError("a conditional node without branches");
    const CondSpec& spec = *node.cond;
    const int id = conds_++;
    std::vector<ir::Instruction*> inputs(operands.begin() + 1, operands.end());
    std::vector<ir::Shape> input_shapes;
    for (size_t i = 1; i < node.operands.size(); ++i) input_shapes.push_back(node.operands[i]->shape);
    const ir::Shape tuple = ir::Shape::Tuple(input_shapes);
    std::vector<ir::Computation*> called;
    for (size_t k = 0; k < spec.branches.size(); ++k) {
      const CondBranch& branch = spec.branches[k];
      ir::Builder bb(module_, absl::StrCat("cond", id, "_branch", k));
      ir::Instruction* bp = bb.Parameter(0, tuple, "operands");
      ASSIGN_OR_RETURN(
          std::vector<ir::Instruction*> outs,
          LowerInto(bb, branch.results,
                    TupleLeaf(bb, bp, BodySlots(branch.placeholders, spec.captures, 0))));
      ASSIGN_OR_RETURN(ir::Computation * c, bb.Build(bb.Tuple(outs)));
      called.push_back(c);
    }
    ir::Instruction* packed = b.Tuple(inputs);
    std::vector<ir::Instruction*> cond_operands{operands[0]};
    for (size_t k = 0; k < called.size(); ++k) cond_operands.push_back(packed);
    return b.AddOp(ir::Opcode::kConditional, std::move(cond_operands), {}, called, node.shape);
  }

  ir::Module* module_;
  ReducerCache reducers_;
  int loops_ = 0;
  int conds_ = 0;
};

}  // namespace

absl::StatusOr<Lowered> Lower(NodeSpan outputs) {
  Lowered out;
  out.module = std::make_unique<ir::Module>("trace");
  Lowerer lowerer(out.module.get());
  ir::Builder b(out.module.get(), "main");
  LeafFn leaf = [&](const std::shared_ptr<Node>& n) -> absl::StatusOr<ir::Instruction*> {
    if (!n->realized()) return nullptr;
    out.params.push_back(n);
    return b.Parameter(static_cast<int64_t>(out.params.size() - 1), n->shape);
  };
  ASSIGN_OR_RETURN(std::vector<ir::Instruction*> roots, lowerer.LowerInto(b, outputs, leaf));
  // One array is the entry's result itself: no tuple to build and take apart.
  ir::Instruction* root =
      roots.size() == 1 && roots[0]->shape().IsArray() ? roots[0] : b.Tuple(roots);
  ASSIGN_OR_RETURN(ir::Computation * entry, b.Build(root));
  out.module->set_entry(entry);
  return out;
}

}  // namespace kiln::client
