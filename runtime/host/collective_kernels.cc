// Collectives between the replicas of one replicated execution: all-reduce,
// all-gather, reduce-scatter, all-to-all, collective-permute and
// collective-broadcast. Each is one
// round of the execution's rendezvous, in which every replica hands in its
// operands and reads the others'. Without a rendezvous (one replica) the
// group is that replica alone.
#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/type_dispatch.h"
#include "runtime/collectives.h"
#include "runtime/host/kernel.h"
#include "runtime/host/reducer_ops.h"

namespace kiln::host {
namespace {

using ir::Opcode;
using ir::Shape;

// The replicas of `replica`'s group, in the group's order: every replica
// when no groups are written.
absl::StatusOr<std::vector<int64_t>> ReplicaGroupOf(
    const std::vector<std::vector<int64_t>>& groups, int replica, int replica_count) {
  if (groups.empty()) {
    std::vector<int64_t> all(replica_count);
    for (int r = 0; r < replica_count; ++r) all[r] = r;
    return all;
  }
  const std::vector<int64_t>* mine = nullptr;
  for (const auto& group : groups) {
    for (int64_t id : group) {
      if (id >= replica_count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "replica group names replica ", id, " but ", replica_count, " replicas run"));
      }
      if (id == replica) mine = &group;
    }
  }
  if (mine != nullptr) return *mine;
  return absl::InvalidArgumentError(
      absl::StrCat("replica ", replica, " is in no replica group"));
}

// What one round gave this replica: its group, its place in the group and
// each member's operands, in group order.
struct Round {
  std::vector<int64_t> group;
  int64_t position = 0;
  std::vector<std::vector<const Buffer*>> members;
  // Keeps the other replicas' buffers alive while they are read.
  std::vector<std::vector<runtime::BufferPtr>> held;
};

// Names a collective for the rendezvous, which stops replicas that reach
// different ones: its opcode, its reduction (or nothing), its dimension
// and its groups.
uint64_t KindOf(Opcode collective, Opcode reducer, int64_t dimension,
                const std::vector<std::vector<int64_t>>& groups) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(static_cast<uint64_t>(collective));
  mix(static_cast<uint64_t>(reducer));
  mix(static_cast<uint64_t>(dimension));
  for (const auto& group : groups) {
    mix(~uint64_t{0});
    for (int64_t id : group) mix(static_cast<uint64_t>(id));
  }
  return h;
}

absl::StatusOr<Round> Exchange(ExecState& st, const std::vector<std::vector<int64_t>>& groups,
                               const std::vector<BufferPtr>& ops, uint64_t kind) {
  const runtime::ExecuteOptions& o = *st.options;
  Round round;
  ASSIGN_OR_RETURN(round.group, ReplicaGroupOf(groups, o.replica_id, o.replica_count));
  if (o.rendezvous == nullptr) {
    round.held.push_back({ops.begin(), ops.end()});
  } else {
    // Every replica takes part in every round, a group of one too: rounds
    // are counted per replica, so one that skipped a round would leave the
    // others waiting for it.
    ASSIGN_OR_RETURN(round.held,
                     o.rendezvous->Exchange(o.replica_id, {ops.begin(), ops.end()}, o.cancelled,
                                            kind));
  }
  for (size_t i = 0; i < round.group.size(); ++i) {
    const int64_t r = round.group[i];
    if (r == o.replica_id) round.position = static_cast<int64_t>(i);
    std::vector<const Buffer*> values;
    for (const runtime::BufferPtr& b : round.held[r]) {
      values.push_back(&static_cast<const Buffer&>(*b));
    }
    round.members.push_back(std::move(values));
  }
  return round;
}

// An array viewed around dimension `d`: `outer` runs of `extent` rows of
// `inner` bytes.
struct Around {
  int64_t outer = 1, extent = 1, inner = 1;
};
Around AroundDim(const Shape& s, int64_t d) {
  Around a;
  for (int64_t i = 0; i < d; ++i) a.outer *= s.dim(static_cast<int>(i));
  a.extent = s.dim(static_cast<int>(d));
  for (int64_t i = d + 1; i < s.rank(); ++i) a.inner *= s.dim(static_cast<int>(i));
  a.inner *= ir::ElementTypeSize(s.type());
  return a;
}

// Copies `rows` rows of every outer run from `from` (rows `from_row`.. of
// runs `from_extent` long) to `to` (rows `to_row`.., runs `to_extent` long).
void CopyRows(const uint8_t* from, int64_t from_extent, int64_t from_row, uint8_t* to,
              int64_t to_extent, int64_t to_row, int64_t rows, const Around& a) {
  for (int64_t o = 0; o < a.outer; ++o) {
    std::memcpy(to + (o * to_extent + to_row) * a.inner,
                from + (o * from_extent + from_row) * a.inner, rows * a.inner);
  }
}

BufferPtr OneOrTuple(std::vector<BufferPtr> outs) {
  return outs.size() == 1 ? outs[0] : Buffer::MakeTuple(std::move(outs));
}

// The size of this replica's group must be the one the shapes were made
// for.
absl::Status CheckGroupSize(const Round& round, int64_t expected, absl::string_view op) {
  if (static_cast<int64_t>(round.group.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " was shaped for groups of ", expected, " but this replica's group has ",
        round.group.size()));
  }
  return absl::OkStatus();
}

// Elements [from, from + count) of every member's operand k combined with
// `op` into `dst`. Every replica of a group combines in the group's order,
// so all get bit-identical results and stay in step.
template <typename T>
void CombineMembers(const Round& round, size_t k, Opcode op, int64_t from, int64_t count,
                    T* dst) {
  using A = Accumulator<T>;
  for (int64_t i = 0; i < count; ++i) {
    A acc = static_cast<A>(round.members[0][k]->template as<T>()[from + i]);
    for (size_t g = 1; g < round.members.size(); ++g) {
      acc = ApplyReducerOp<A>(op, acc,
                              static_cast<A>(round.members[g][k]->template as<T>()[from + i]));
    }
    dst[i] = static_cast<T>(acc);
  }
}

// Whether `groups` make one group of every replica (in any order).
bool CoversEveryReplica(const std::vector<std::vector<int64_t>>& groups, int replica_count) {
  if (groups.empty()) return true;
  if (groups.size() != 1 || static_cast<int>(groups[0].size()) != replica_count) return false;
  std::vector<bool> seen(replica_count, false);
  for (int64_t id : groups[0]) {
    if (id < 0 || id >= replica_count || seen[id]) return false;
    seen[id] = true;
  }
  return true;
}

Kernel AllReduce(Opcode op, std::vector<std::vector<int64_t>> groups) {
  return [op, groups = std::move(groups)](ExecState& st, const std::vector<BufferPtr>& ops)
             -> absl::StatusOr<BufferPtr> {
    if (st.options->rendezvous == nullptr) {
      // A single replica: the reduction is the value itself.
      RETURN_IF_ERROR(ReplicaGroupOf(groups, st.options->replica_id, st.options->replica_count)
                          .status());
      return OneOrTuple(ops);
    }
    const runtime::ExecuteOptions& o = *st.options;
    if (o.rendezvous->crosses_hosts() && CoversEveryReplica(groups, o.replica_count)) {
      // Across servers: each server reduces its replicas, then the servers
      // reduce their partial results (Gloo's ring all-reduce).
      runtime::Reduction reduction;
      reduction.combine = [&ops, op](size_t k, void* out, const void* a, const void* b,
                                     size_t count) {
        ir::DispatchType(ops[k]->shape().type(), [&](auto tag) {
          using T = decltype(tag);
          using A = Accumulator<T>;
          const T* x = static_cast<const T*>(a);
          const T* y = static_cast<const T*>(b);
          T* z = static_cast<T*>(out);
          if constexpr (std::is_floating_point_v<T>) {
            if (op == Opcode::kAdd) {  // gradients: a loop the compiler vectorizes
              for (size_t i = 0; i < count; ++i) z[i] = x[i] + y[i];
              return;
            }
          }
          for (size_t i = 0; i < count; ++i) {
            z[i] = static_cast<T>(ApplyReducerOp<A>(op, static_cast<A>(x[i]), static_cast<A>(y[i])));
          }
        });
      };
      bool reduced = false;
      ASSIGN_OR_RETURN(std::vector<std::vector<runtime::BufferPtr>> values,
                       o.rendezvous->Exchange(o.replica_id, {ops.begin(), ops.end()}, o.cancelled,
                                              KindOf(Opcode::kAllReduce, op, -1, groups),
                                              &reduction, &reduced));
      if (reduced) {
        // The reduced operands are shared by this server's replicas: each
        // copies them into buffers of its own device.
        std::vector<BufferPtr> outs;
        for (size_t k = 0; k < ops.size(); ++k) {
          BufferPtr sum = HostBuffer::Cast(values[o.replica_id][k]);
          if (sum == nullptr) return absl::InternalError("a reduced operand off the host");
          ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(ops[k]->shape()));
          if (out->size_bytes() > 0) std::memcpy(out->data(), sum->data(), out->size_bytes());
          outs.push_back(std::move(out));
        }
        return OneOrTuple(std::move(outs));
      }
      // The replica that brought the other servers' operands was at another
      // kind of collective.
      return absl::FailedPreconditionError(
          "an all-reduce met another kind of collective across servers: the replicas reached "
          "different collectives");
    }
    ASSIGN_OR_RETURN(Round round, Exchange(st, groups, ops, KindOf(Opcode::kAllReduce, op, -1, groups)));
    std::vector<BufferPtr> outs;
    for (size_t k = 0; k < ops.size(); ++k) {
      ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(ops[k]->shape()));
      const int64_t n = ops[k]->shape().ElementCount();
      ir::DispatchType(ops[k]->shape().type(), [&](auto tag) {
        using T = decltype(tag);
        CombineMembers<T>(round, k, op, 0, n, out->as<T>());
      });
      outs.push_back(std::move(out));
    }
    return OneOrTuple(std::move(outs));
  };
}

// Each member's operand k, concatenated along `d` in group order.
Kernel AllGather(int64_t d, std::vector<std::vector<int64_t>> groups, Shape out_shape) {
  return [d, groups = std::move(groups), out_shape](ExecState& st,
                                                    const std::vector<BufferPtr>& ops)
             -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(Round round, Exchange(st, groups, ops, KindOf(Opcode::kAllGather, Opcode::kParameter, d, groups)));
    std::vector<BufferPtr> outs;
    for (size_t k = 0; k < ops.size(); ++k) {
      const Shape& in = ops[k]->shape();
      const Shape& shape = ops.size() == 1 ? out_shape : out_shape.tuple_shape(static_cast<int>(k));
      const Around a = AroundDim(in, d);
      const int64_t out_extent = shape.dim(static_cast<int>(d));
      RETURN_IF_ERROR(CheckGroupSize(
          round, a.extent == 0 ? static_cast<int64_t>(round.group.size()) : out_extent / a.extent,
          "all-gather"));
      ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(shape));
      for (size_t m = 0; m < round.members.size(); ++m) {
        CopyRows(round.members[m][k]->data(), a.extent, 0, out->data(), out_extent,
                 static_cast<int64_t>(m) * a.extent, a.extent, a);
      }
      outs.push_back(std::move(out));
    }
    return OneOrTuple(std::move(outs));
  };
}

// The group's operands reduced element by element (in group order, as
// all-reduce), of which this replica keeps block `position` along `d`.
Kernel ReduceScatter(Opcode op, int64_t d, std::vector<std::vector<int64_t>> groups,
                     Shape out_shape) {
  return [op, d, groups = std::move(groups), out_shape](ExecState& st,
                                                        const std::vector<BufferPtr>& ops)
             -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(Round round, Exchange(st, groups, ops, KindOf(Opcode::kReduceScatter, op, d, groups)));
    std::vector<BufferPtr> outs;
    for (size_t k = 0; k < ops.size(); ++k) {
      const Shape& in = ops[k]->shape();
      const Shape& shape = ops.size() == 1 ? out_shape : out_shape.tuple_shape(static_cast<int>(k));
      const int64_t block = shape.dim(static_cast<int>(d));
      const int64_t extent = in.dim(static_cast<int>(d));
      RETURN_IF_ERROR(CheckGroupSize(
          round, block == 0 ? static_cast<int64_t>(round.group.size()) : extent / block,
          "reduce-scatter"));
      ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(shape));
      Around a = AroundDim(in, d);
      const int64_t inner = a.inner / ir::ElementTypeSize(in.type());
      ir::DispatchType(in.type(), [&](auto tag) {
        using T = decltype(tag);
        for (int64_t o = 0; o < a.outer; ++o) {
          CombineMembers<T>(round, k, op, (o * extent + round.position * block) * inner,
                            block * inner, out->as<T>() + o * block * inner);
        }
      });
      outs.push_back(std::move(out));
    }
    return OneOrTuple(std::move(outs));
  };
}

// With a dimension: block j of each member's operand along `d` goes to
// member j, and the blocks a member receives are concatenated there in
// group order. Without one: operand j goes to member j, and element i of
// the result is what member i sent.
Kernel AllToAll(std::optional<int64_t> d, std::vector<std::vector<int64_t>> groups) {
  return [d, groups = std::move(groups)](ExecState& st, const std::vector<BufferPtr>& ops)
             -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(Round round, Exchange(st, groups, ops, KindOf(Opcode::kAllToAll, Opcode::kParameter, d.value_or(-1), groups)));
    const int64_t g = static_cast<int64_t>(round.group.size());
    if (!d.has_value()) {
      RETURN_IF_ERROR(CheckGroupSize(round, static_cast<int64_t>(ops.size()), "all-to-all"));
      std::vector<BufferPtr> outs;
      for (int64_t i = 0; i < g; ++i) {
        const Buffer& sent = *round.members[i][round.position];
        ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(sent.shape()));
        std::memcpy(out->data(), sent.data(), sent.shape().ByteSize());
        outs.push_back(std::move(out));
      }
      return Buffer::MakeTuple(std::move(outs));
    }
    const Shape& shape = ops[0]->shape();
    const Around a = AroundDim(shape, *d);
    if (a.extent % g != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all-to-all dimension ", *d, " of ", shape.ToString(), " does not split into ", g,
          " blocks"));
    }
    const int64_t block = a.extent / g;
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(shape));
    for (int64_t s = 0; s < g; ++s) {
      CopyRows(round.members[s][0]->data(), a.extent, round.position * block, out->data(),
               a.extent, s * block, block, a);
    }
    return out;
  };
}

// Each target receives its source's operand; a replica that is no target
// gets zeros.
Kernel CollectivePermute(std::vector<std::vector<int64_t>> pairs) {
  return [pairs = std::move(pairs)](ExecState& st, const std::vector<BufferPtr>& ops)
             -> absl::StatusOr<BufferPtr> {
    const runtime::ExecuteOptions& o = *st.options;
    for (const auto& pair : pairs) {
      if (pair[0] >= o.replica_count || pair[1] >= o.replica_count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "source_target_pairs names replica ", std::max(pair[0], pair[1]), " but ",
            o.replica_count, " replicas run"));
      }
    }
    std::vector<std::vector<runtime::BufferPtr>> all;
    if (o.rendezvous == nullptr) {
      all.push_back({ops[0]});
    } else {
      ASSIGN_OR_RETURN(all, o.rendezvous->Exchange(
                                o.replica_id, {ops[0]}, o.cancelled,
                                KindOf(Opcode::kCollectivePermute, Opcode::kParameter, -1, pairs)));
    }
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(ops[0]->shape()));
    const int64_t bytes = ops[0]->shape().ByteSize();
    std::memset(out->data(), 0, bytes);
    for (const auto& pair : pairs) {
      if (pair[1] == o.replica_id) {
        std::memcpy(out->data(), static_cast<const Buffer&>(*all[pair[0]][0]).data(), bytes);
      }
    }
    return out;
  };
}

// Every member of a group gets the operand of the group's first member.
Kernel CollectiveBroadcast(std::vector<std::vector<int64_t>> groups) {
  return [groups = std::move(groups)](ExecState& st, const std::vector<BufferPtr>& ops)
             -> absl::StatusOr<BufferPtr> {
    ASSIGN_OR_RETURN(Round round, Exchange(st, groups, ops, KindOf(Opcode::kCollectiveBroadcast, Opcode::kParameter, -1, groups)));
    const Buffer& root = *round.members[0][0];
    ASSIGN_OR_RETURN(BufferPtr out, st.Allocate(root.shape()));
    std::memcpy(out->data(), root.data(), root.shape().ByteSize());
    return out;
  };
}

}  // namespace

absl::StatusOr<Kernel> MakeCollectiveKernel(const ir::Instruction& instr) {
  const ir::Attributes& at = instr.attrs();
  auto reducer = [&]() -> absl::StatusOr<Opcode> {
    std::optional<Opcode> op =
        instr.called().empty() ? std::nullopt : MatchScalarBinary(*instr.called(0));
    if (!op) {
      return absl::UnimplementedError(absl::StrCat(
          ir::OpcodeName(instr.opcode()),
          " combines with add, multiply, maximum, minimum, and or or"));
    }
    return *op;
  };
  switch (instr.opcode()) {
    case Opcode::kAllReduce: {
      ASSIGN_OR_RETURN(Opcode op, reducer());
      return AllReduce(op, at.replica_groups);
    }
    case Opcode::kAllGather:
      return AllGather(at.dimensions[0], at.replica_groups, instr.shape());
    case Opcode::kReduceScatter: {
      ASSIGN_OR_RETURN(Opcode op, reducer());
      return ReduceScatter(op, at.dimensions[0], at.replica_groups, instr.shape());
    }
    case Opcode::kAllToAll:
      return AllToAll(at.dimensions.empty() ? std::nullopt
                                            : std::optional<int64_t>(at.dimensions[0]),
                      at.replica_groups);
    case Opcode::kCollectivePermute:
      return CollectivePermute(at.source_target_pairs);
    case Opcode::kCollectiveBroadcast:
      return CollectiveBroadcast(at.replica_groups);
    default:
      return absl::InternalError(
          absl::StrCat(ir::OpcodeName(instr.opcode()), " is not a collective"));
  }
}

}  // namespace kiln::host
