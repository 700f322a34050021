#include "compiler/passes/buffer_assignment.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/opcode.h"
#include "compiler/passes/dot_fusion.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/reduction_fusion.h"

namespace kiln::passes {
namespace {

using ir::Instruction;
using ir::Opcode;

// Whether `v` may give its buffer to a result of `shape` computed by the
// instruction at `reader`, which reads it for the last time.
bool Donor(const Instruction& v, const ir::Shape& shape, int reader,
           const std::vector<int>& last_reader) {
  return v.shape().IsArray() && v.shape().ElementCount() != 1 && v.shape() == shape &&
         last_reader[v.index()] == reader;
}

// The in-place operands of each result of a call whose callee computes
// `outputs` (instructions of it) in one loop.
std::vector<std::vector<int>> CallInPlace(const Instruction& call,
                                          const std::vector<const Instruction*>& outputs,
                                          const std::vector<int>& last_reader) {
  const ir::Computation& callee = *call.called(0);
  const Instruction* root = callee.root();
  // The last node of the loop that reads each parameter (-1: none).
  std::vector<int> last_in_loop(callee.parameter_count(), -1);
  for (const auto& m : callee.instructions()) {
    if (root->opcode() == Opcode::kTuple && m.get() == root) continue;
    for (const Instruction* o : m->operands()) {
      if (o->opcode() == Opcode::kParameter) {
        int& at = last_in_loop[o->attrs().parameter_number];
        at = std::max(at, m->index());
      }
    }
  }
  // How many times the call passes each value.
  absl::flat_hash_map<const Instruction*, int> passed;
  for (const Instruction* v : call.operands()) ++passed[v];
  std::vector<std::vector<int>> in_place(outputs.size());
  for (size_t j = 0; j < outputs.size(); ++j) {
    for (int q = 0; q < call.operand_count(); ++q) {
      const Instruction& v = *call.operand(q);
      const bool once = passed[&v] == 1;
      if (once && q < static_cast<int>(last_in_loop.size()) && last_in_loop[q] >= 0 &&
          last_in_loop[q] <= outputs[j]->index() &&
          Donor(v, outputs[j]->shape(), call.index(), last_reader)) {
        in_place[j].push_back(q);
      }
    }
  }
  return in_place;
}

// The results of `user` that may hold the buffer of its operand `q`: a
// tuple's element q; the whole of it (-1) when it is not written fresh
// (`fresh`: FreshResult(user)); else those that may be computed in q's
// place, and a dot fusion's result for its accumulator.
std::vector<int> HoldingResults(const Instruction& user, bool fresh, int q,
                                const BufferAssignment& a);

}  // namespace

bool FreshResult(const Instruction& instr) {
  switch (instr.opcode()) {
    case Opcode::kBroadcast: case Opcode::kIota: case Opcode::kTranspose: case Opcode::kSlice:
    case Opcode::kReverse: case Opcode::kPad: case Opcode::kConcatenate:
    case Opcode::kDynamicSlice: case Opcode::kDynamicUpdateSlice: case Opcode::kReduce:
    case Opcode::kReduceWindow: case Opcode::kSelectAndScatter: case Opcode::kDot:
    case Opcode::kConvolution: case Opcode::kGather:
      return true;
    case Opcode::kCall:
      return instr.called().size() == 1 && IsFusedCallee(*instr.called(0));
    default:
      return ir::IsElementwise(instr.opcode());
  }
}

namespace {

std::vector<int> HoldingResults(const Instruction& user, bool fresh, int q,
                                const BufferAssignment& a) {
  if (user.opcode() == Opcode::kTuple) return {q};
  if (!fresh) return {-1};
  std::vector<int> holding;
  const std::vector<std::vector<int>>& results = a.in_place[user.index()];
  for (size_t j = 0; j < results.size(); ++j) {
    if (std::find(results[j].begin(), results[j].end(), q) != results[j].end()) {
      holding.push_back(user.shape().IsTuple() ? static_cast<int>(j) : -1);
    }
  }
  // A dot fusion accumulates into its third operand, in place when it can.
  if (q == 2 && user.opcode() == Opcode::kCall && IsDotFusion(*user.called(0))) {
    holding.push_back(-1);
  }
  return holding;
}

}  // namespace

BufferAssignment AssignBuffers(const ir::Computation& c) {
  const auto& instrs = c.instructions();
  const int n = static_cast<int>(instrs.size());
  BufferAssignment a;
  a.released_by.resize(n);
  a.in_place.resize(n);
  std::vector<int> last_reader(n, -1);
  for (int i = 0; i < n; ++i) {
    for (const Instruction* o : instrs[i]->operands()) last_reader[o->index()] = i;
  }
  const int root = c.root()->index();
  for (int v = 0; v < n; ++v) {
    if (last_reader[v] >= 0 && v != root) a.released_by[last_reader[v]].push_back(v);
  }
  // The root lives past every reader: no result takes its buffer.
  last_reader[root] = n;
  for (int i = 0; i < n; ++i) {
    const Instruction& instr = *instrs[i];
    const bool call = instr.opcode() == Opcode::kCall && instr.called().size() == 1;
    if (call && IsLoopFusion(*instr.called(0))) {
      // Its outputs: the root, or the root tuple's elements.
      const Instruction* root = instr.called(0)->root();
      std::vector<const Instruction*> outputs;
      if (root->opcode() == Opcode::kTuple) {
        outputs.assign(root->operands().begin(), root->operands().end());
      } else {
        outputs.push_back(root);
      }
      a.in_place[i] = CallInPlace(instr, outputs, last_reader);
    } else if (call && IsReductionFusion(*instr.called(0))) {
      // Its loop's results: the root tuple's elements before the reduce's.
      const Instruction* root = instr.called(0)->root();
      std::vector<const Instruction*> results;
      if (root->opcode() == Opcode::kTuple) {
        results.assign(root->operands().begin(), root->operands().end() - 1);
      }
      a.in_place[i] = CallInPlace(instr, results, last_reader);
    } else if ((ir::IsElementwise(instr.opcode()) || IsExpandableBroadcast(instr)) &&
               instr.shape().IsArray()) {
      std::vector<int>& donors = a.in_place[i].emplace_back();
      for (int q = 0; q < instr.operand_count(); ++q) {
        const Instruction& v = *instr.operand(q);
        // An operand given twice is one input of the loop.
        const bool first = std::find(instr.operands().begin(), instr.operands().end(), &v) ==
                           instr.operands().begin() + q;
        if (first && Donor(v, instr.shape(), i, last_reader)) donors.push_back(q);
      }
    }
  }
  // The outputs and the instruction results they are.
  const Instruction* r = c.root();
  std::vector<const Instruction*> outputs;
  if (r->opcode() == Opcode::kTuple) {
    for (const Instruction* o : r->operands()) outputs.push_back(o);
  } else {
    outputs.push_back(r);
  }
  // The operand each result of `instr` takes when every candidate is free,
  // as a backend hands them out: in result order, the first not taken by
  // an earlier result of the same instruction (-1: none).
  auto taken = [&](const Instruction& instr) {
    std::vector<int> chosen;
    absl::flat_hash_set<int> used;
    for (const std::vector<int>& candidates : a.in_place[instr.index()]) {
      int& q = chosen.emplace_back(-1);
      for (int c : candidates) {
        if (used.insert(c).second) {
          q = c;
          break;
        }
      }
    }
    return chosen;
  };
  absl::flat_hash_map<const Instruction*, std::vector<int>> chosen;
  for (size_t e = 0; e < outputs.size(); ++e) {
    const Instruction* v = outputs[e];
    size_t result = 0;
    if (v->opcode() == Opcode::kGetTupleElement) {
      result = static_cast<size_t>(v->attrs().tuple_index);
      v = v->operand(0);
    }
    if (result >= a.in_place[v->index()].size()) continue;
    auto it = chosen.find(v);
    if (it == chosen.end()) it = chosen.emplace(v, taken(*v)).first;
    const int q = it->second[result];
    if (q >= 0 && v->operand(q)->opcode() == Opcode::kParameter) {
      a.donation_aliases.push_back(
          {static_cast<int>(e), v->operand(q)->attrs().parameter_number});
    }
  }
  // How long each value's buffer may live: to its last reader, and to the
  // end of every value that may hold it. Users follow their operands, so a
  // backward sweep sees each user's end first. The elements of a tuple a
  // fresh instruction writes live apart: element j lives as long as the
  // get-tuple-elements of j, and the whole tuple as long as any other
  // user that may hold it. An output lives past the computation (n).
  std::vector<bool> output(n, false);
  output[root] = true;
  for (const Instruction* o : outputs) output[o->index()] = true;
  std::vector<std::vector<std::pair<int, int>>> users(n);  // (user, operand number)
  for (int i = 0; i < n; ++i) {
    for (int q = 0; q < instrs[i]->operand_count(); ++q) {
      users[instrs[i]->operand(q)->index()].push_back({i, q});
    }
  }
  // FreshResult per instruction (matching a fused callee is not free).
  std::vector<bool> fresh(n);
  for (int i = 0; i < n; ++i) fresh[i] = FreshResult(*instrs[i]);
  std::vector<int> live_until(n);
  std::vector<std::vector<int>> element_until(n);  // per tuple element
  // The end of result `j` of `u` (-1: all of it).
  auto end_of = [&](int u, int j) {
    return j < 0 || element_until[u].empty() ? live_until[u] : element_until[u][j];
  };
  for (int v = n - 1; v >= 0; --v) {
    const Instruction& instr = *instrs[v];
    const int floor = output[v] ? n : std::max(last_reader[v], v);
    int whole = floor;  // what every element lives to
    std::vector<int>& elements = element_until[v];
    if (instr.shape().IsTuple()) elements.assign(instr.shape().tuple_shapes().size(), floor);
    for (const auto& [u, q] : users[v]) {
      const Instruction& user = *instrs[u];
      if (!elements.empty() && user.opcode() == Opcode::kGetTupleElement) {
        int& e = elements[user.attrs().tuple_index];
        e = std::max(e, live_until[u]);
        continue;
      }
      for (int j : HoldingResults(user, fresh[u], q, a)) whole = std::max(whole, end_of(u, j));
    }
    live_until[v] = whole;
    for (int& e : elements) {
      e = std::max(e, whole);
      live_until[v] = std::max(live_until[v], e);
    }
  }
  for (int i = 0; i < n; ++i) {
    const Instruction& instr = *instrs[i];
    if (!fresh[i]) continue;
    auto in_place = [&](size_t result) {
      return result < a.in_place[i].size() && !a.in_place[i][result].empty();
    };
    if (instr.shape().IsArray()) {
      if (live_until[i] < n && !in_place(0) && instr.shape().ByteSize() > 0) {
        a.slices.push_back({i, -1, instr.shape().ByteSize(), live_until[i]});
      }
      continue;
    }
    // Of tuples, only a fusion's loop writes each element apart (a variadic
    // reduce or window writes its tuple whole).
    if (!instr.shape().IsTuple() || instr.opcode() != Opcode::kCall) continue;
    for (int e = 0; e < static_cast<int>(instr.shape().tuple_shapes().size()); ++e) {
      const ir::Shape& element = instr.shape().tuple_shape(e);
      if (element_until[i][e] < n && element.IsArray() && element.ByteSize() > 0 &&
          !in_place(static_cast<size_t>(e))) {
        a.slices.push_back({i, e, element.ByteSize(), element_until[i][e]});
      }
    }
  }
  return a;
}

std::string BufferAssignment::Summary() const {
  int values = 0, in_place_results = 0;
  for (const auto& results : in_place) {
    for (const auto& donors : results) in_place_results += donors.empty() ? 0 : 1;
  }
  for (const auto& released : released_by) values += static_cast<int>(released.size());
  int64_t slice_bytes = 0;
  for (const Slice& slice : slices) slice_bytes += slice.bytes;
  std::string s = absl::StrCat(values, " values released after their last reader, ",
                               in_place_results, " results that may be computed in place, ",
                               slices.size(), " arrays (", slice_bytes, " bytes) for an arena");
  for (const Alias& alias : donation_aliases) {
    absl::StrAppend(&s, "; output ", alias.output, " may take parameter ", alias.parameter,
                    " when donated");
  }
  return s;
}

}  // namespace kiln::passes
