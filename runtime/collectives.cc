#include "runtime/collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/device.h"
#include "runtime/memory.h"

namespace kiln::runtime {

absl::StatusOr<std::vector<std::vector<BufferPtr>>> ReplicaRendezvous::Exchange(
    int replica, std::vector<BufferPtr> operands, const CancelCheck& cancelled, uint64_t kind,
    const Reduction* reduction, bool* reduced) {
  if (reduced != nullptr) *reduced = false;
  const int local = replica - cross_.replica_offset;
  if (local < 0 || local >= local_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", replica, " does not run here (replicas ", cross_.replica_offset,
                     " to ", cross_.replica_offset + local_count_ - 1, " of ", replica_count_,
                     ")"));
  }
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  const int64_t number = next_round_[local]++;
  Round& round = rounds_[number % 2];
  if (round.number != number) {
    round.number = number;
    round.arrived = 0;
    round.ready = false;
    round.reduced = false;
    round.values.assign(replica_count_, {});
    round.kinds.assign(replica_count_, 0);
  }
  round.values[replica] = std::move(operands);
  round.kinds[replica] = kind;
  ++round.arrived;
  if (round.arrived == local_count_) {
    // Replicas that reached different collectives (a loop whose trip count
    // depends on the replica) would read each other's operands as theirs.
    if (absl::Status same = SameOperands(round.values, round.kinds); !same.ok()) {
      if (aborted_.ok()) aborted_ = same;
    } else if (cross_.group == nullptr) {
      round.ready = true;
    } else {
      // The last local replica brings the other servers' operands. The
      // others keep waiting (and polling for cancellation) meanwhile; the
      // round stays in its slot until every local replica has read it.
      const std::vector<std::vector<BufferPtr>> here(
          round.values.begin() + cross_.replica_offset,
          round.values.begin() + cross_.replica_offset + local_count_);
      round.exchanging = true;
      mu_.Unlock();
      absl::StatusOr<std::vector<std::vector<BufferPtr>>> all;
      try {
        if (reduction != nullptr) {
          // Every local replica reads the same reduced operands.
          absl::StatusOr<std::vector<std::vector<BufferPtr>>> sums =
              ReduceAcrossHosts(number, here, round.kinds[cross_.replica_offset], *reduction);
          if (sums.ok()) {
            all = std::vector<std::vector<BufferPtr>>(replica_count_);
            for (int r = 0; r < local_count_; ++r) {
              (*all)[cross_.replica_offset + r] = std::move((*sums)[r]);
            }
          } else {
            all = sums.status();
          }
        } else {
          all = ExchangeAcrossHosts(number, here, round.kinds[cross_.replica_offset]);
        }
      } catch (const std::exception& e) {  // std::bad_alloc of a large round
        all = absl::ResourceExhaustedError(
            absl::StrCat("collective ", number, " between the servers: ", e.what()));
      }
      mu_.Lock();
      round.exchanging = false;
      if (!all.ok()) {
        if (aborted_.ok()) aborted_ = all.status();
      } else {
        round.reduced = reduction != nullptr;
        for (int r = 0; r < replica_count_; ++r) {
          if (round.reduced || r < cross_.replica_offset ||
              r >= cross_.replica_offset + local_count_) {
            round.values[r] = std::move((*all)[r]);
          }
        }
        round.ready = true;
      }
    }
  }
  auto complete = [&]() { return !aborted_.ok() || (round.number == number && round.ready); };
  absl::Time deadline = absl::Now() + timeout_;
  while (!complete()) {
    // Wake a few times a second to poll `cancelled`.
    mu_.AwaitWithTimeout(absl::Condition(&complete), absl::Milliseconds(50));
    if (complete()) break;
    // The exchange between the servers has its own deadline.
    if (round.number == number && round.exchanging) deadline = absl::Now() + timeout_;
    if (cancelled && cancelled()) return absl::CancelledError("cancelled in a collective");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "replica ", replica, " waited ", absl::FormatDuration(timeout_),
          " for the other replicas at collective ", number, " (", round.arrived, " of ",
          local_count_, " arrived", cross_.group != nullptr ? " on this server" : "", ")"));
    }
  }
  if (!aborted_.ok()) return aborted_;
  if (round.reduced && reduction == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", replica, " is at another kind of collective than the replica that brought "
        "the other servers' operands at collective ", number,
        ": the replicas reached different collectives"));
  }
  if (reduced != nullptr) *reduced = round.reduced;
  return round.values;
}

absl::Status ReplicaRendezvous::SameOperands(const std::vector<std::vector<BufferPtr>>& values,
                                             const std::vector<uint64_t>& kinds) const {
  const int first = cross_.replica_offset;
  const std::vector<BufferPtr>& like = values[first];
  auto shapes = [](const std::vector<BufferPtr>& ops) {
    std::string out;
    for (const BufferPtr& b : ops) absl::StrAppend(&out, out.empty() ? "" : ", ", b->shape().ToString());
    return out;
  };
  for (int r = first + 1; r < first + local_count_; ++r) {
    bool same = values[r].size() == like.size() && kinds[r] == kinds[first];
    for (size_t k = 0; same && k < like.size(); ++k) {
      same = values[r][k]->shape() == like[k]->shape();
    }
    if (!same) {
      return absl::FailedPreconditionError(absl::StrCat(
          "replica ", r, " is at another collective than replica ", first, " (it hands in (",
          shapes(values[r]), "), replica ", first, " (", shapes(like),
          ")): the replicas reached different collectives"));
    }
  }
  return absl::OkStatus();
}

namespace {

// What one server sends for one round, ahead of its replicas' bytes.
struct RoundHeader {
  uint64_t magic = 0;
  uint64_t program = 0;     // which program runs (CrossHost::program)
  int64_t execution = 0;    // which execution of the group
  int64_t round = 0;
  int32_t replica_offset = 0;
  int32_t replicas = 0;
  int64_t replica_bytes = 0;  // the operands of one replica
  uint64_t shapes = 0;        // a hash of the operands' shapes
  uint64_t kind = 0;          // which collective (Exchange's `kind`)
  int64_t path = 0;           // 1: exchange, 2: reduce then all-reduce
};
constexpr uint64_t kRoundMagic = 0x4b494c4e58434831;  // "KILNXCH1"

// FNV-1a: the same on every server, whatever its build.
uint64_t HashText(absl::string_view text, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}


// What this server hands in for round `number`: the header of its local
// replicas' operands (those of `first`, every local replica's shapes).
absl::StatusOr<RoundHeader> HeaderOf(const CrossHost& cross, int local_count, int64_t number,
                                     const std::vector<BufferPtr>& first, uint64_t kind,
                                     int64_t path) {
  RoundHeader header;
  header.kind = kind;
  header.path = path;
  header.magic = kRoundMagic;
  header.round = number;
  header.program = cross.program;
  header.execution = cross.execution;
  header.replica_offset = cross.replica_offset;
  header.replicas = local_count;
  header.shapes = HashText("");
  for (const BufferPtr& b : first) {
    if (b->tuple_size() > 0 || !b->shape().IsArray()) {
      return absl::UnimplementedError(absl::StrCat(
          "collective ", number, ": an operand of shape ", b->shape().ToString(),
          " cannot cross servers (arrays only)"));
    }
    header.replica_bytes += b->size_bytes();
    header.shapes = HashText(b->shape().ToString(), header.shapes);
  }
  if (header.replica_bytes >
      (kMaxGroupExchangeBytes - static_cast<int64_t>(sizeof(header))) / local_count) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "collective ", number, " would send ", header.replica_bytes, " bytes for each of ",
        local_count, " replicas to the other servers, over the limit of ",
        kMaxGroupExchangeBytes, " bytes a round"));
  }
  return header;
}

// Checks what every member handed in for the round whose header here is
// `mine`: the same program, execution, round and operand shapes, and
// replicas that cover every id once. `payload` is what follows a header
// per replica (0: nothing follows). Returns each member's header, by rank.
absl::StatusOr<std::vector<RoundHeader>> CheckRound(const HostGroup& group,
                                                    const std::vector<std::string>& all,
                                                    const RoundHeader& mine, int64_t payload,
                                                    int replica_count) {
  std::vector<RoundHeader> headers(group.size());
  std::vector<bool> seen(replica_count, false);
  const int64_t number = mine.round;
  for (int rank = 0; rank < group.size(); ++rank) {
    const std::string who =
        absl::StrCat("server ", group.spec().members[rank], " (member ", rank, ")");
    const std::string& bytes = all[rank];
    RoundHeader& theirs = headers[rank];
    if (bytes.size() < sizeof(theirs)) {
      return absl::InternalError(absl::StrCat(who, " sent ", bytes.size(), " bytes at collective ",
                                              number, ", less than a header"));
    }
    std::memcpy(&theirs, bytes.data(), sizeof(theirs));
    if (theirs.magic != kRoundMagic || theirs.program != mine.program ||
        theirs.execution != mine.execution) {
      return absl::FailedPreconditionError(absl::StrCat(
          who, " runs another program or execution of the group than this server (execution ",
          theirs.execution, " against ", mine.execution,
          "): run one execution of a group at a time, on every member"));
    }
    if (theirs.round != number) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, " is at another collective (", theirs.round, ") than this server (",
                       number, "): the servers run different programs"));
    }
    if (theirs.replica_bytes != mine.replica_bytes || theirs.shapes != mine.shapes ||
        theirs.kind != mine.kind || theirs.path != mine.path) {
      return absl::FailedPreconditionError(absl::StrCat(
          who, " is at another kind of collective or hands in operands of other shapes at "
          "collective ", number,
          ": the servers run different programs, or their replicas reached different "
          "collectives"));
    }
    if (theirs.replicas < 0 || theirs.replica_offset < 0 ||
        static_cast<int64_t>(theirs.replica_offset) + theirs.replicas > replica_count ||
        static_cast<int64_t>(bytes.size()) !=
            static_cast<int64_t>(sizeof(theirs)) + payload * theirs.replicas) {
      return absl::FailedPreconditionError(absl::StrCat(
          who, " runs replicas ", theirs.replica_offset, "+", theirs.replicas, " with ",
          bytes.size(), " bytes; the execution has ", replica_count, " replicas"));
    }
    for (int r = theirs.replica_offset; r < theirs.replica_offset + theirs.replicas; ++r) {
      if (seen[r]) {
        return absl::FailedPreconditionError(
            absl::StrCat("replica ", r, " runs on two servers, one of them ", who));
      }
      seen[r] = true;
    }
  }
  for (int r = 0; r < replica_count; ++r) {
    if (!seen[r]) {
      return absl::FailedPreconditionError(
          absl::StrCat("no server of group ", group.spec().id, " runs replica ", r, " of ",
                       replica_count));
    }
  }
  return headers;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<BufferPtr>>> ReplicaRendezvous::ExchangeAcrossHosts(
    int64_t number, const std::vector<std::vector<BufferPtr>>& local, uint64_t kind) {
  HostGroup& group = *cross_.group;
  Device& device = *cross_.device;
  // Every replica's operands have the shapes of local replica 0's.
  const std::vector<BufferPtr>& first = local[0];
  ASSIGN_OR_RETURN(RoundHeader header,
                   HeaderOf(cross_, local_count_, number, first, kind, /*path=*/1));
  // What this round holds on the host: what this server sends, and what
  // all servers send, charged as the execution's temporaries.
  MemoryCharge scratch(AccountScope::Current());
  RETURN_IF_ERROR(scratch.Grow(
      static_cast<int64_t>(sizeof(header)) * (1 + group.size()) +
          header.replica_bytes * (local_count_ + static_cast<int64_t>(replica_count_)),
      absl::StrCat("the exchange of collective ", number, " between the servers")));
  // The servers agree on the round (one fixed-size exchange, the same
  // first call on every path) before anything else crosses.
  std::string head(sizeof(header), '\0');
  std::memcpy(head.data(), &header, sizeof(header));
  ASSIGN_OR_RETURN(std::vector<std::string> heads, group.AllGatherEqual(head));
  ASSIGN_OR_RETURN(std::vector<RoundHeader> headers,
                   CheckRound(group, heads, header, 0, replica_count_));
  std::string mine(header.replica_bytes * local_count_, '\0');
  int64_t at = 0;
  for (const std::vector<BufferPtr>& operands : local) {
    for (const BufferPtr& b : operands) {
      if (b->size_bytes() > 0) {
        RETURN_IF_ERROR(device.CopyFromBuffer(*b, 0, mine.data() + at, b->size_bytes()));
      }
      at += b->size_bytes();
    }
  }
  ASSIGN_OR_RETURN(std::vector<std::string> all, group.AllGather(mine));
  std::vector<std::vector<BufferPtr>> values(replica_count_);
  for (int rank = 0; rank < group.size(); ++rank) {
    if (rank == group.rank()) continue;
    const RoundHeader& theirs = headers[rank];
    if (static_cast<int64_t>(all[rank].size()) != theirs.replica_bytes * theirs.replicas) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", group.spec().members[rank], " (member ", rank, ") sent ", all[rank].size(),
          " bytes at collective ", number, " where its header promised ",
          theirs.replica_bytes * theirs.replicas));
    }
    const char* p = all[rank].data();
    for (int r = theirs.replica_offset; r < theirs.replica_offset + theirs.replicas; ++r) {
      for (const BufferPtr& like : first) {
        ASSIGN_OR_RETURN(BufferPtr b, device.Allocate(like->shape()));
        if (like->size_bytes() > 0) {
          RETURN_IF_ERROR(device.CopyToBuffer(*b, 0, p, like->size_bytes()));
        }
        p += like->size_bytes();
        values[r].push_back(std::move(b));
      }
    }
  }
  return values;
}

absl::StatusOr<std::vector<std::vector<BufferPtr>>> ReplicaRendezvous::ReduceAcrossHosts(
    int64_t number, const std::vector<std::vector<BufferPtr>>& local, uint64_t kind,
    const Reduction& reduction) {
  HostGroup& group = *cross_.group;
  Device& device = *cross_.device;
  const std::vector<BufferPtr>& first = local[0];
  // The members agree on the round first (a header each): an all-reduce of
  // mismatched lengths would not fail cleanly.
  ASSIGN_OR_RETURN(RoundHeader header,
                   HeaderOf(cross_, local_count_, number, first, kind, /*path=*/2));
  std::string mine(sizeof(header), '\0');
  std::memcpy(mine.data(), &header, sizeof(header));
  ASSIGN_OR_RETURN(std::vector<std::string> all, group.AllGatherEqual(mine));
  RETURN_IF_ERROR(CheckRound(group, all, header, 0, replica_count_).status());
  // The host scratch of the largest operand, charged as the execution's
  // temporaries.
  int64_t largest = 0;
  for (const BufferPtr& b : first) largest = std::max(largest, b->size_bytes());
  MemoryCharge scratch(AccountScope::Current());
  RETURN_IF_ERROR(scratch.Grow(largest * (local_count_ > 1 ? 2 : 1),
                               absl::StrCat("the all-reduce of collective ", number,
                                            " between the servers")));
  // By local replica: every reduced operand (shared).
  std::vector<std::vector<BufferPtr>> reduced(local_count_);
  for (size_t k = 0; k < first.size(); ++k) {
    const ir::Shape& shape = first[k]->shape();
    const int64_t bytes = first[k]->size_bytes();
    const int64_t count = shape.ElementCount();
    // This server's replicas first, in replica order, then the servers'.
    // (Scratch is not zeroed: every byte is written before it is read.)
    std::unique_ptr<char[]> partial(new (std::nothrow) char[std::max<int64_t>(bytes, 1)]);
    std::unique_ptr<char[]> next;
    if (partial == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("collective ", number, ": no host memory for ", bytes, " bytes"));
    }
    if (bytes > 0) RETURN_IF_ERROR(device.CopyFromBuffer(*first[k], 0, partial.get(), bytes));
    for (int r = 1; r < local_count_ && bytes > 0; ++r) {
      if (next == nullptr) next.reset(new (std::nothrow) char[bytes]);
      if (next == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("collective ", number, ": no host memory for ", bytes, " bytes"));
      }
      RETURN_IF_ERROR(device.CopyFromBuffer(*local[r][k], 0, next.get(), bytes));
      reduction.combine(k, partial.get(), partial.get(), next.get(), count);
    }
    RETURN_IF_ERROR(group.AllReduce(
        partial.get(), count, ir::ElementTypeSize(shape.type()),
        [&](void* out, const void* a, const void* b, size_t n) { reduction.combine(k, out, a, b, n); }));
    // One buffer, which this server's replicas copy from.
    ASSIGN_OR_RETURN(BufferPtr out, device.Allocate(shape));
    if (bytes > 0) RETURN_IF_ERROR(device.CopyToBuffer(*out, 0, partial.get(), bytes));
    for (int r = 0; r < local_count_; ++r) reduced[r].push_back(out);
  }
  return reduced;
}

void ReplicaRendezvous::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = std::move(status);
}

}  // namespace kiln::runtime
