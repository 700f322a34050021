// Service's groups of servers: joining, leaving, the group store and
// what a group execution finds missing.
#include "server/service.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/net_address.h"
#include "base/status_macros.h"

namespace kiln::server {
namespace {

bool ValidGroupId(absl::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// Compares secrets in time that does not depend on where they differ.
bool SameSecret(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<v1::JoinGroupResponse> Service::JoinGroup(const v1::JoinGroupRequest& req,
                                                         const std::string& authorization,
                                                         const runtime::CancelCheck& cancelled) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  const std::string& id = req.group_id();
  if (!ValidGroupId(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a group id is 1 to 128 of [A-Za-z0-9._-], got \"",
                     absl::CHexEscape(id.substr(0, 128)), "\""));
  }
  if (req.secret().size() < 16 || req.secret().size() > 128) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": the secret must have 16 to 128 bytes, got ", req.secret().size()));
  }
  const int n = req.members_size();
  if (n < 1 || n > kMaxGroupMembers) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": ", n, " members (1 to ", kMaxGroupMembers, ")"));
  }
  if (req.rank() < 0 || req.rank() >= n) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": rank ", req.rank(), " of ", n, " members"));
  }
  for (int m = 0; m < n; ++m) {
    const std::string& address = req.members(m);
    const bool plain = std::all_of(address.begin(), address.end(), [](char c) {
      return absl::ascii_isalnum(c) || std::strchr(".-_:[]/%", c) != nullptr;
    });
    if (address.empty() || address.size() > 256 || !plain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group ", id, ": member ", m, "'s address must be 1 to 256 of [A-Za-z0-9.-_:[]/%], got \"",
          absl::CHexEscape(address.substr(0, 256)), "\""));
    }
  }
  if (req.timeout_millis() > absl::ToInt64Milliseconds(kMaxGroupTimeout)) {
    return absl::InvalidArgumentError(absl::StrCat("group ", id, ": a timeout of ", req.timeout_millis(), " ms is over the limit of ", absl::FormatDuration(kMaxGroupTimeout)));
  }
  const bool any_peer = std::find(options_.group_peers.begin(), options_.group_peers.end(),
                                  "*") != options_.group_peers.end();
  if (options_.group_peers.empty() && options_.group_peers_required) {
    return absl::FailedPreconditionError(
        "this server listens beyond loopback: name the hosts its groups may span with "
        "--group_peers (docs/groups.md)");
  }
  if (!options_.group_peers.empty() && !any_peer) {
    for (int m = 0; m < n; ++m) {
      const absl::string_view host = HostOf(req.members(m));
      if (std::find(options_.group_peers.begin(), options_.group_peers.end(), host) ==
          options_.group_peers.end()) {
        metrics_.Add("group_join_refused");
        return absl::PermissionDeniedError(absl::StrCat(
            "group ", id, ": member ", m, " is on ", host,
            ", which is not among this server's --group_peers"));
      }
    }
  }
  // The session's place for the group, and one of the server's places for
  // a group being formed, before anything waits.
  RETURN_IF_ERROR(session->ReserveGroup(id));
  absl::Cleanup unreserve = [&] { session->Unreserve(id); };
  if (joins_in_flight_.fetch_add(1) >= kMaxJoinsInFlight) {
    joins_in_flight_.fetch_sub(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server is forming ", kMaxJoinsInFlight, " groups already; try again later"));
  }
  absl::Cleanup joined = [&] { joins_in_flight_.fetch_sub(1); };
  runtime::HostGroupSpec spec;
  spec.id = id;
  spec.rank = req.rank();
  spec.members.assign(req.members().begin(), req.members().end());
  spec.bind_host = options_.group_bind_host;
  if (req.timeout_millis() > 0) spec.timeout = absl::Milliseconds(req.timeout_millis());
  if (!runtime::HostGroupsSupported()) {
    return runtime::HostGroup::Create(spec, nullptr).status();
  }
  std::shared_ptr<runtime::GroupStore> store;
  if (spec.rank == 0) {
    // Gloo writes two keys per member: its host name and its addresses.
    auto local = std::make_shared<runtime::LocalGroupStore>(2 * n + 8, int64_t{1} << 20);
    absl::MutexLock lock(&group_stores_mu_);
    // Stores of sessions that are gone go first.
    absl::erase_if(group_stores_, [&](const auto& entry) {
      return !sessions_->Alive(entry.second.session_id);
    });
    if (group_stores_.contains(id)) {
      return absl::AlreadyExistsError(
          absl::StrCat("group ", id, " is already formed on this server by another session"));
    }
    if (static_cast<int>(group_stores_.size()) >= kMaxHostedGroups) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this server keeps the stores of ", kMaxHostedGroups, " groups already"));
    }
    group_stores_[id] = HostedStore{req.secret(), session->id(), local};
    store = local;
  } else {
    if (!options_.remote_group_store) {
      return absl::UnimplementedError(absl::StrCat(
          "group ", id, ": this server reaches no other server, so it can only be member 0"));
    }
    store = options_.remote_group_store(req.members(0), id, req.secret(), spec.timeout,
                                        authorization);
  }
  auto forget_store = [&]() {
    if (spec.rank != 0) return;
    absl::MutexLock lock(&group_stores_mu_);
    auto it = group_stores_.find(id);
    if (it != group_stores_.end() && it->second.session_id == session->id()) group_stores_.erase(it);
  };
  logging::Info("session {}: joining group {} as member {} of {}", session->id(), id, spec.rank, n);
  absl::StatusOr<std::unique_ptr<runtime::HostGroup>> formed =
      runtime::HostGroup::Create(spec, store, cancelled);
  // A client that went away meanwhile gets no group (nobody would leave it).
  if (formed.ok() && cancelled && cancelled()) {
    formed = absl::CancelledError(absl::StrCat("group ", id, ": the joining call went away"));
  }
  if (!formed.ok()) {
    forget_store();
    metrics_.Add("group_join_errors");
    return formed.status();
  }
  auto entry = std::make_shared<GroupEntry>();
  entry->group = *std::move(formed);
  std::move(unreserve).Cancel();
  if (absl::Status added = session->AddGroup(id, std::move(entry)); !added.ok()) {
    forget_store();
    return added;
  }
  metrics_.Add("groups_joined");
  return v1::JoinGroupResponse();
}

absl::StatusOr<v1::LeaveGroupResponse> Service::LeaveGroup(const v1::LeaveGroupRequest& req) {
  ASSIGN_OR_RETURN(std::shared_ptr<Session> session, sessions_->Get(req.session_id()));
  RETURN_IF_ERROR(session->RemoveGroup(req.group_id()));
  absl::MutexLock lock(&group_stores_mu_);
  auto it = group_stores_.find(req.group_id());
  if (it != group_stores_.end() && it->second.session_id == session->id()) group_stores_.erase(it);
  return v1::LeaveGroupResponse();
}

absl::StatusOr<v1::GroupStoreResponse> Service::GroupStore(const v1::GroupStoreRequest& req) {
  std::shared_ptr<runtime::LocalGroupStore> store;
  {
    absl::MutexLock lock(&group_stores_mu_);
    auto it = group_stores_.find(req.group_id());
    // An unknown group and a wrong secret read alike: a caller without the
    // secret learns nothing of the groups here.
    const bool known = it != group_stores_.end() && sessions_->Alive(it->second.session_id);
    if (!known || !SameSecret(it->second.secret, req.secret())) {
      if (known) metrics_.Add("group_store_denied");
      return absl::NotFoundError(absl::StrCat("no group ",
                                              absl::CHexEscape(req.group_id().substr(0, 128)),
                                              " with this secret is formed on this server"));
    }
    store = it->second.store;
  }
  if (req.key().empty() || req.key().size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat("a group store key has 1 to 256 bytes, got ", req.key().size()));
  }
  v1::GroupStoreResponse resp;
  if (req.set()) {
    RETURN_IF_ERROR(store->Set(req.key(), req.value()));
    return resp;
  }
  const absl::Duration timeout =
      std::clamp(absl::Milliseconds(req.timeout_millis()), absl::ZeroDuration(), kMaxGroupTimeout);
  ASSIGN_OR_RETURN(*resp.mutable_value(), store->Get(req.key(), timeout));
  return resp;
}

std::string Service::MissingMembers(const GroupEntry& entry, const v1::ExecuteRequest& req) const {
  const runtime::HostGroup& group = *entry.group;
  if (!options_.probe_member) return "";
  const absl::Duration wait = std::min(absl::Seconds(2), group.spec().timeout);
  std::vector<absl::Status> answers(group.size());
  std::vector<std::thread> probes;
  for (int m = 0; m < group.size(); ++m) {
    if (m == group.rank()) continue;
    probes.emplace_back([&, m] { answers[m] = options_.probe_member(group.spec().members[m], wait); });
  }
  for (std::thread& t : probes) t.join();
  std::vector<std::string> gone;
  int first = 0;
  for (int m = 0; m < group.size(); ++m) {
    const int count = m < req.group_replicas_size() ? req.group_replicas(m) : 0;
    if (m != group.rank() && !answers[m].ok()) {
      gone.push_back(absl::StrCat("member ", m, " (", group.spec().members[m], ", replicas ", first,
                                  " to ", first + count - 1, ") does not answer: ",
                                  answers[m].message()));
    }
    first += count;
  }
  if (gone.empty()) {
    return "; every other member answers, so one of them failed or stalled in the program";
  }
  return absl::StrCat("; ", absl::StrJoin(gone, "; "));
}

}  // namespace kiln::server
