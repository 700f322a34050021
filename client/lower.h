// Cuts a lazy trace into a module: realized nodes become entry parameters,
// recorded ops become instructions, device loops become while loops with
// their own body computations.
#ifndef KILN_CLIENT_LOWER_H_
#define KILN_CLIENT_LOWER_H_

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "client/tensor.h"
#include "compiler/ir/instruction.h"

namespace kiln::client {

// Where a loop body or a conditional branch finds each of its leaves in the
// tuple it takes: the stand-ins from index `first` on, the captures after
// them (a loop's tuple starts with its counter, so its body's `first` is 1;
// a branch's is 0). Lower and the trace key both place leaves by this.
inline absl::flat_hash_map<const Node*, int64_t> BodySlots(
    const std::vector<std::shared_ptr<Node>>& placeholders,
    const std::vector<std::shared_ptr<Node>>& captures, int64_t first) {
  absl::flat_hash_map<const Node*, int64_t> slots;
  for (size_t i = 0; i < placeholders.size(); ++i) {
    slots[placeholders[i].get()] = first + static_cast<int64_t>(i);
  }
  const int64_t after = first + static_cast<int64_t>(placeholders.size());
  for (size_t i = 0; i < captures.size(); ++i) {
    slots[captures[i].get()] = after + static_cast<int64_t>(i);
  }
  return slots;
}

// The nodes a walk has numbered, 0, 1, 2, ... in the order it added them.
// A short trace's (an eager op's) stay in an inline list searched in
// order; longer ones are hashed.
class NodeNumbers {
 public:
  // Its number, or -1.
  int64_t Find(const Node* node) const {
    if (!hashed_.empty()) {
      auto it = hashed_.find(node);
      return it == hashed_.end() ? -1 : it->second;
    }
    for (size_t i = 0; i < listed_.size(); ++i) {
      if (listed_[i] == node) return static_cast<int64_t>(i);
    }
    return -1;
  }
  bool contains(const Node* node) const { return Find(node) >= 0; }
  // Numbers a node not numbered yet.
  int64_t Add(const Node* node) {
    const int64_t n = size_++;
    if (hashed_.empty() && listed_.size() < kListed) {
      listed_.push_back(node);
      return n;
    }
    if (hashed_.empty()) {
      for (size_t i = 0; i < listed_.size(); ++i) hashed_[listed_[i]] = static_cast<int64_t>(i);
    }
    hashed_[node] = n;
    return n;
  }
  int64_t size() const { return size_; }

 private:
  static constexpr size_t kListed = 8;
  absl::InlinedVector<const Node*, kListed> listed_;
  absl::flat_hash_map<const Node*, int64_t> hashed_;
  int64_t size_ = 0;
};

// Walks the nodes `roots` need, each once, operands before the node, in the
// order Lower builds instructions (so that anything keyed by the walk agrees
// with the module). `leaf(node)` (a StatusOr<bool>) says, when the walk
// first reaches a node, whether it stands for a value the computation
// receives; a leaf's operands are not walked. `visit(node, is_leaf)` (a
// Status) follows, once every operand is visited. A node with an error
// stops the walk with it.
template <typename LeafFn, typename VisitFn>
absl::Status WalkTrace(NodeSpan roots, LeafFn&& leaf,
                       VisitFn&& visit) {
  NodeNumbers done;
  struct Frame {
    std::shared_ptr<Node> node;
    size_t next = 0;  // the operand to walk next
    bool reached = false, is_leaf = false;
  };
  absl::InlinedVector<Frame, 8> stack;
  for (const auto& root : roots) {
    if (done.contains(root.get())) continue;
    stack.push_back({root});
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (done.contains(f.node.get())) {
        stack.pop_back();
        continue;
      }
      if (!f.reached) {
        if (!f.node->status.ok()) return f.node->status;
        absl::StatusOr<bool> is_leaf = leaf(f.node);
        if (!is_leaf.ok()) return is_leaf.status();
        f.reached = true;
        f.is_leaf = *is_leaf;
      }
      if (!f.is_leaf && f.next < f.node->operands.size()) {
        std::shared_ptr<Node> child = f.node->operands[f.next++];
        if (!done.contains(child.get())) stack.push_back({std::move(child)});
        continue;
      }
      std::shared_ptr<Node> node = std::move(f.node);
      const bool is_leaf = f.is_leaf;
      stack.pop_back();
      if (absl::Status st = visit(node, is_leaf); !st.ok()) return st;
      done.Add(node.get());
    }
  }
  return absl::OkStatus();
}

struct Lowered {
  std::unique_ptr<ir::Module> module;
  // The realized nodes behind the entry parameters, in parameter order.
  std::vector<std::shared_ptr<Node>> params;
};

// The entry returns a tuple of `outputs` in order, or the one output itself
// when it is a single array.
absl::StatusOr<Lowered> Lower(NodeSpan outputs);

}  // namespace kiln::client

#endif  // KILN_CLIENT_LOWER_H_
