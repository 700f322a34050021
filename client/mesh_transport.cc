#include "client/mesh_transport.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "client/fan_out.h"

namespace kiln::client {
namespace {

// "host<i>/<rest>" -> (i, rest).
absl::StatusOr<std::pair<int, std::string>> SplitName(absl::string_view name, int hosts,
                                                      absl::string_view what) {
  const size_t slash = name.find('/');
  int host = -1;
  if (slash == absl::string_view::npos || name.substr(0, 4) != "host" ||
      !absl::SimpleAtoi(name.substr(4, slash - 4), &host) || host < 0 || host >= hosts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a mesh ", what, " reads host<i>/... with i below ", hosts, ", got \"",
        absl::CHexEscape(name.substr(0, 256)), "\""));
  }
  return std::make_pair(host, std::string(name.substr(slash + 1)));
}

std::string Prefixed(int host, absl::string_view name) {
  return absl::StrCat("host", host, "/", name);
}

absl::Status OnHost(int host, const std::string& address, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("host", host, " (", address, "): ", status.message()));
}

class MeshTransport : public Transport {
 public:
  MeshTransport(std::vector<std::unique_ptr<Transport>> hosts, std::vector<std::string> addresses,
                absl::Duration group_timeout)
      : group_timeout_(group_timeout) {
    for (size_t i = 0; i < hosts.size(); ++i) {
      hosts_.push_back(Host{std::move(hosts[i]), addresses[i], "", {}});
    }
  }

  ~MeshTransport() override {
    absl::flat_hash_map<std::string, Group> groups;
    {
      absl::MutexLock lock(&mu_);
      groups.swap(groups_);
    }
    for (const auto& [key, group] : groups) LeaveQuietly(group);
  }

  absl::StatusOr<v1::HandshakeResponse> Handshake(const v1::HandshakeRequest& r) override {
    const int n = static_cast<int>(hosts_.size());
    std::vector<absl::StatusOr<v1::HandshakeResponse>> shakes(n);
    ForEachInParallel(n, [&](int i) { shakes[i] = hosts_[i].transport->Handshake(r); });
    v1::HandshakeResponse out;
    // At most 5: a sequenced execution (6) names its outputs by the
    // server's numbering, which the mesh's host-prefixed handles do not
    // follow; the mesh's executions run one after another.
    out.set_version(std::min<uint32_t>(r.max_version(), 5));
    out.set_session_id("mesh");
    out.set_lease_seconds(0);
    std::vector<std::string> warnings;
    for (int i = 0; i < n; ++i) {
      if (!shakes[i].ok()) return OnHost(i, hosts_[i].address, shakes[i].status());
      const v1::HandshakeResponse& s = *shakes[i];
      hosts_[i].session = s.session_id();
      out.set_version(std::min(out.version(), s.version()));
      if (out.lease_seconds() == 0 || s.lease_seconds() < out.lease_seconds()) {
        out.set_lease_seconds(s.lease_seconds());
      }
      if (!s.security_warning().empty()) {
        warnings.push_back(absl::StrCat("host", i, ": ", s.security_warning()));
      }
      for (const v1::DeviceInfo& d : s.devices()) {
        v1::DeviceInfo* mine = out.add_devices();
        *mine = d;
        mine->set_name(Prefixed(i, d.name()));
        hosts_[i].devices.push_back(d);
      }
    }
    out.set_security_warning(absl::StrJoin(warnings, "; "));
    return out;
  }

  // Every server at once: one that does not answer does not keep the
  // others' sessions from being renewed.
  absl::StatusOr<v1::KeepAliveResponse> KeepAlive(const v1::KeepAliveRequest&) override {
    const int n = hosts();
    std::vector<absl::StatusOr<v1::KeepAliveResponse>> renewed(n, v1::KeepAliveResponse());
    ForEachInParallel(n, [&](int i) {
      if (Gone(i)) return;
      v1::KeepAliveRequest req;
      req.set_session_id(hosts_[i].session);
      renewed[i] = hosts_[i].transport->KeepAlive(req);
    });
    v1::KeepAliveResponse out;
    for (int i = 0; i < n; ++i) {
      if (!renewed[i].ok()) return Named(i, renewed[i].status());
      const int64_t lease = renewed[i]->lease_seconds();
      if (lease > 0 && (out.lease_seconds() == 0 || lease < out.lease_seconds())) {
        out.set_lease_seconds(lease);
      }
    }
    return out;
  }

  // Every server at once; one found gone is skipped.
  absl::StatusOr<v1::CloseSessionResponse> CloseSession(const v1::CloseSessionRequest&) override {
    const int n = hosts();
    std::vector<absl::Status> closed(n);
    ForEachInParallel(n, [&](int i) {
      if (Gone(i)) return;
      v1::CloseSessionRequest req;
      req.set_session_id(hosts_[i].session);
      closed[i] = hosts_[i].transport->CloseSession(req).status();
    });
    for (int i = 0; i < n; ++i) {
      if (!closed[i].ok()) return Named(i, closed[i]);
    }
    return v1::CloseSessionResponse();
  }

  absl::StatusOr<v1::TransferToDeviceResponse> TransferToDevice(const v1::TransferHeader& header,
                                                                absl::string_view data,
                                                                int64_t chunk_bytes) override {
    ASSIGN_OR_RETURN(auto local, OnItsHost(header));
    ASSIGN_OR_RETURN(v1::TransferToDeviceResponse resp,
                     Named(local.first, hosts_[local.first].transport->TransferToDevice(
                                            local.second, data, chunk_bytes)));
    resp.set_buffer_handle(Prefixed(local.first, resp.buffer_handle()));
    return resp;
  }

  absl::Status TransferFromDevice(
      const v1::TransferFromDeviceRequest& r,
      const std::function<absl::Status(v1::TransferFromDeviceChunk&)>& on_chunk) override {
    ASSIGN_OR_RETURN(auto where, SplitName(r.buffer_handle(), hosts(), "buffer handle"));
    v1::TransferFromDeviceRequest local = r;
    local.set_session_id(hosts_[where.first].session);
    local.set_buffer_handle(where.second);
    return Named(where.first, hosts_[where.first].transport->TransferFromDevice(local, on_chunk));
  }

  absl::StatusOr<v1::ReleaseResponse> Release(const v1::ReleaseRequest& r) override {
    std::vector<v1::ReleaseRequest> by_host(hosts_.size());
    for (const std::string& handle : r.buffer_handles()) {
      ASSIGN_OR_RETURN(auto where, SplitName(handle, hosts(), "buffer handle"));
      by_host[where.first].add_buffer_handles(where.second);
    }
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& handle : r.executable_handles()) {
        auto it = programs_.find(handle);
        if (it == programs_.end()) {
          return absl::NotFoundError(absl::StrCat("unknown executable handle ", handle));
        }
        for (const auto& [host, local] : it->second->handles) {
          by_host[host].add_executable_handles(local);
        }
        programs_.erase(it);
      }
    }
    v1::ReleaseResponse out;
    for (size_t i = 0; i < hosts_.size(); ++i) {
      if (by_host[i].buffer_handles_size() == 0 && by_host[i].executable_handles_size() == 0) {
        continue;
      }
      // A server found gone holds nothing of this session any more.
      if (Gone(static_cast<int>(i))) continue;
      by_host[i].set_session_id(hosts_[i].session);
      absl::StatusOr<v1::ReleaseResponse> r2 =
          Named(static_cast<int>(i), hosts_[i].transport->Release(by_host[i]));
      if (!r2.ok()) return r2.status();
      out.set_released(out.released() + r2->released());
    }
    return out;
  }

  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& r) override {
    ASSIGN_OR_RETURN(auto where, SplitName(r.device(), hosts(), "device"));
    const Host& host = hosts_[where.first];
    auto program = std::make_shared<Program>();
    program->request = r;
    for (const v1::DeviceInfo& d : host.devices) {
      if (d.name() == where.second) program->kind = d.kind();
    }
    v1::CompileRequest local = r;
    local.set_session_id(host.session);
    local.set_device(where.second);
    ASSIGN_OR_RETURN(v1::CompileResponse resp, Named(where.first, host.transport->Compile(local)));
    program->handles[where.first] = resp.executable_handle();
    resp.set_executable_handle(Prefixed(where.first, resp.executable_handle()));
    absl::MutexLock lock(&mu_);
    programs_[resp.executable_handle()] = std::move(program);
    return resp;
  }

  absl::StatusOr<v1::ExecuteResponse> Execute(const v1::ExecuteRequest& r,
                                              CallCanceller* cancel) override {
    ASSIGN_OR_RETURN(std::shared_ptr<Program> program, ProgramOf(r.executable_handle()));
    if (r.replicas_size() == 0) return ExecuteOnOneHost(r, *program, cancel);
    // Each server's replicas, which must come together, in order.
    std::vector<int> members;
    std::vector<v1::ExecuteRequest> requests;
    for (int k = 0; k < r.replicas_size(); ++k) {
      ASSIGN_OR_RETURN(auto where, SplitName(r.replicas(k).device(), hosts(), "device"));
      if (members.empty() || members.back() != where.first) {
        if (std::find(members.begin(), members.end(), where.first) != members.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "replica ", k, " on ", r.replicas(k).device(),
              ": list each server's replicas together (replica ids run server by server)"));
        }
        members.push_back(where.first);
        v1::ExecuteRequest local = r;
        local.clear_replicas();
        local.set_session_id(hosts_[where.first].session);
        requests.push_back(std::move(local));
      }
      v1::ReplicaArguments* replica = requests.back().add_replicas();
      replica->set_device(where.second);
      for (const std::string& handle : r.replicas(k).argument_handles()) {
        ASSIGN_OR_RETURN(auto arg, SplitName(handle, hosts(), "buffer handle"));
        if (arg.first != where.first) {
          return absl::InvalidArgumentError(absl::StrCat(
              "replica ", k, " runs on host", where.first, " but an argument lives on host",
              arg.first, "; copy it explicitly"));
        }
        replica->add_argument_handles(arg.second);
      }
    }
    for (size_t m = 0; m < members.size(); ++m) {
      ASSIGN_OR_RETURN(std::string handle, HandleOn(*program, members[m]));
      requests[m].set_executable_handle(handle);
    }
    std::vector<absl::StatusOr<v1::ExecuteResponse>> responses;
    // One execution across servers at a time: each member runs one
    // execution of a group at a time, and they must all run the same.
    std::optional<absl::MutexLock> one_at_a_time;
    if (members.size() == 1) {
      responses.push_back(Named(members[0], hosts_[members[0]].transport->Execute(requests[0], cancel)));
    } else {
      one_at_a_time.emplace(&run_mu_);
      ASSIGN_OR_RETURN(std::string group, GroupOf(members, cancel));
      for (v1::ExecuteRequest& req : requests) {
        req.set_group_id(group);
        for (const v1::ExecuteRequest& other : requests) req.add_group_replicas(other.replicas_size());
      }
      std::vector<bool> stalled;
      responses = FanOut<v1::ExecuteResponse>(
          static_cast<int>(members.size()), group_timeout_ + absl::Seconds(5), cancel,
          [&](int m, CallCanceller* canceller) {
            return hosts_[members[m]].transport->Execute(requests[m], canceller);
          },
          &stalled);
      std::vector<std::string> errors;
      absl::StatusCode code = absl::StatusCode::kOk;
      for (size_t m = 0; m < members.size(); ++m) {
        if (stalled[m]) {
          Lost(members[m]);
        } else {
          Saw(members[m], responses[m].status());
        }
        if (responses[m].ok()) continue;
        if (code == absl::StatusCode::kOk) code = responses[m].status().code();
        errors.push_back(absl::StrCat("host", members[m], " (", hosts_[members[m]].address,
                                      "): ", responses[m].status().message()));
      }
      if (!errors.empty()) {
        // The group is broken on its members: the next execution forms a
        // new one.
        DropGroup(members);
        return absl::Status(code, absl::StrCat("group ", group, ": ", absl::StrJoin(errors, "; ")));
      }
    }
    v1::ExecuteResponse out;
    for (size_t m = 0; m < members.size(); ++m) {
      if (!responses[m].ok()) return responses[m].status();
      v1::ExecuteResponse& resp = *responses[m];
      out.set_execute_micros(std::max(out.execute_micros(), resp.execute_micros()));
      if (resp.has_profile() && (!out.has_profile() || resp.profile().simulated_seconds() >
                                                           out.profile().simulated_seconds())) {
        *out.mutable_profile() = resp.profile();
      }
      for (v1::ReplicaOutputs& replica : *resp.mutable_replicas()) {
        replica.set_device(Prefixed(members[m], replica.device()));
        for (v1::ExecuteOutput& o : *replica.mutable_outputs()) {
          o.set_buffer_handle(Prefixed(members[m], o.buffer_handle()));
        }
        *out.add_replicas() = std::move(replica);
      }
    }
    return out;
  }

  absl::StatusOr<v1::MemoryInfoResponse> MemoryInfo(const v1::MemoryInfoRequest& r) override {
    ASSIGN_OR_RETURN(auto local, OnItsHost(r));
    ASSIGN_OR_RETURN(v1::MemoryInfoResponse resp,
                     Named(local.first, hosts_[local.first].transport->MemoryInfo(local.second)));
    resp.set_device(Prefixed(local.first, resp.device()));
    return resp;
  }

  // Every server's counters, summed by name; timers named per server.
  absl::StatusOr<v1::MetricsResponse> GetMetrics(const v1::MetricsRequest& r) override {
    v1::MetricsResponse out;
    absl::flat_hash_map<std::string, int> counter_at;
    for (size_t i = 0; i < hosts_.size(); ++i) {
      absl::StatusOr<v1::MetricsResponse> m = hosts_[i].transport->GetMetrics(r);
      if (!m.ok()) return Named(static_cast<int>(i), m.status());
      for (const v1::CounterProto& c : m->counters()) {
        auto [it, added] = counter_at.try_emplace(c.name(), out.counters_size());
        if (added) out.add_counters()->set_name(c.name());
        v1::CounterProto* sum = out.mutable_counters(it->second);
        sum->set_value(sum->value() + c.value());
      }
      for (const v1::TimerProto& t : m->timers()) {
        v1::TimerProto* mine = out.add_timers();
        *mine = t;
        mine->set_name(Prefixed(static_cast<int>(i), t.name()));
      }
    }
    return out;
  }

  absl::StatusOr<v1::JoinGroupResponse> JoinGroup(const v1::JoinGroupRequest&,
                                                  CallCanceller*) override {
    return absl::UnimplementedError("a mesh forms the groups of its servers itself");
  }
  absl::StatusOr<v1::LeaveGroupResponse> LeaveGroup(const v1::LeaveGroupRequest&) override {
    return absl::UnimplementedError("a mesh forms the groups of its servers itself");
  }

  absl::StatusOr<v1::CreateFeedTokenResponse> CreateFeedToken(
      const v1::CreateFeedTokenRequest& r) override {
    ASSIGN_OR_RETURN(auto local, OnItsHost(r));
    ASSIGN_OR_RETURN(v1::CreateFeedTokenResponse resp,
                     Named(local.first, hosts_[local.first].transport->CreateFeedToken(local.second)));
    resp.set_feed_token(Prefixed(local.first, resp.feed_token()));
    return resp;
  }

  absl::StatusOr<std::unique_ptr<InfeedStream>> OpenInfeed(const v1::FeedTarget& target,
                                                           int64_t chunk_bytes) override {
    ASSIGN_OR_RETURN(auto local, LocalTarget(target));
    return Named(local.first, hosts_[local.first].transport->OpenInfeed(local.second, chunk_bytes));
  }

  absl::StatusOr<std::unique_ptr<OutfeedStream>> OpenOutfeed(const v1::OutfeedRequest& r) override {
    ASSIGN_OR_RETURN(auto local, LocalTarget(r.target()));
    v1::OutfeedRequest req = r;
    *req.mutable_target() = local.second;
    return Named(local.first, hosts_[local.first].transport->OpenOutfeed(req));
  }

 private:
  struct Host {
    std::unique_ptr<Transport> transport;
    std::string address;
    std::string session;
    std::vector<v1::DeviceInfo> devices;
  };
  // A compiled program and its handle on each server it was compiled on.
  struct Program {
    v1::CompileRequest request;
    std::string kind;
    absl::flat_hash_map<int, std::string> handles;
  };
  struct Group {
    std::string id;
    std::vector<int> members;
  };

  int hosts() const { return static_cast<int>(hosts_.size()); }

  // A request naming a mesh device, as its server takes it: that server's
  // session and its own name of the device. Returns the server too.
  template <typename Request>
  absl::StatusOr<std::pair<int, Request>> OnItsHost(const Request& r) const {
    ASSIGN_OR_RETURN(auto where, SplitName(r.device(), hosts(), "device"));
    Request local = r;
    local.set_session_id(hosts_[where.first].session);
    local.set_device(where.second);
    return std::make_pair(where.first, std::move(local));
  }

  // A call's error names the server it went to. Every call routed to a
  // server comes back through here, so each one tells whether the server
  // is gone: UNAVAILABLE means its connection broke under the call or did
  // not come back within the reconnect timeout, and from then on the
  // calls that only tidy up (Release, CloseSession, LeaveGroup,
  // KeepAlive) skip it instead of waiting on it. A call it answers marks
  // it back.
  absl::Status Named(int host, absl::Status status) {
    Saw(host, status);
    if (status.ok()) return status;
    return OnHost(host, hosts_[host].address, status);
  }
  template <typename T>
  absl::StatusOr<T> Named(int host, absl::StatusOr<T> result) {
    Saw(host, result.status());
    if (result.ok()) return result;
    return OnHost(host, hosts_[host].address, result.status());
  }
  void Saw(int host, const absl::Status& status) {
    if (status.code() == absl::StatusCode::kUnavailable) {
      Lost(host);
    } else if (status.ok()) {
      absl::MutexLock lock(&mu_);
      gone_.erase(host);
    }
  }
  void Lost(int host) {
    absl::MutexLock lock(&mu_);
    gone_.insert(host);
  }

  absl::StatusOr<std::shared_ptr<Program>> ProgramOf(const std::string& handle) {
    absl::MutexLock lock(&mu_);
    auto it = programs_.find(handle);
    if (it == programs_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown executable handle ", handle));
    }
    return it->second;
  }

  // The program's handle on server `host`, compiling it there first for
  // the first device of its kind.
  absl::StatusOr<std::string> HandleOn(Program& program, int host) {
    {
      absl::MutexLock lock(&mu_);
      auto it = program.handles.find(host);
      if (it != program.handles.end()) return it->second;
    }
    const Host& h = hosts_[host];
    const v1::DeviceInfo* device = nullptr;
    for (const v1::DeviceInfo& d : h.devices) {
      if (d.kind() == program.kind) {
        device = &d;
        break;
      }
    }
    if (device == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("host", host, " (", h.address, ") has no ", program.kind, " device"));
    }
    v1::CompileRequest local = program.request;
    local.set_session_id(h.session);
    local.set_device(device->name());
    absl::StatusOr<v1::CompileResponse> resp = Named(host, h.transport->Compile(local));
    if (!resp.ok()) return resp.status();
    absl::MutexLock lock(&mu_);
    program.handles[host] = resp->executable_handle();
    return resp->executable_handle();
  }

  absl::StatusOr<v1::ExecuteResponse> ExecuteOnOneHost(const v1::ExecuteRequest& r,
                                                       Program& program, CallCanceller* cancel) {
    // On the server it was compiled for.
    ASSIGN_OR_RETURN(auto where, SplitName(r.executable_handle(), hosts(), "executable handle"));
    const int host = where.first;
    v1::ExecuteRequest local = r;
    local.set_session_id(hosts_[host].session);
    ASSIGN_OR_RETURN(std::string handle, HandleOn(program, host));
    local.set_executable_handle(handle);
    local.clear_argument_handles();
    for (int k = 0; k < r.argument_handles_size(); ++k) {
      if (r.argument_handles(k).empty()) {  // an inline argument
        local.add_argument_handles("");
        continue;
      }
      ASSIGN_OR_RETURN(auto arg, SplitName(r.argument_handles(k), hosts(), "buffer handle"));
      if (arg.first != host) {
        return absl::InvalidArgumentError(absl::StrCat("argument ", k, " lives on host", arg.first,
                                                       " but the program runs on host", host,
                                                       "; copy it explicitly"));
      }
      local.add_argument_handles(arg.second);
    }
    ASSIGN_OR_RETURN(v1::ExecuteResponse resp,
                     Named(host, hosts_[host].transport->Execute(local, cancel)));
    for (v1::ExecuteOutput& o : *resp.mutable_outputs()) {
      o.set_buffer_handle(Prefixed(host, o.buffer_handle()));
    }
    for (std::string& h : *resp.mutable_inline_argument_handles()) {
      if (!h.empty()) h = Prefixed(host, h);
    }
    return resp;
  }

  // The group of servers `members` (in this order), formed when there is
  // none. A member found gone is not waited for: forming fails at once,
  // naming it. Once one member's join fails the others' are cancelled
  // instead of waiting for it until the timeout, and so is every join when
  // `cancel` (may be null) is.
  absl::StatusOr<std::string> GroupOf(const std::vector<int>& members, CallCanceller* cancel) {
    const std::string key = absl::StrJoin(members, ",");
    {
      absl::MutexLock lock(&mu_);
      auto it = groups_.find(key);
      if (it != groups_.end()) return it->second.id;
    }
    for (int h : members) {
      if (Gone(h)) {
        return absl::UnavailableError(absl::StrCat(
            "host", h, " (", hosts_[h].address,
            ") was found unreachable, and a group needs every member: it can join again once "
            "a call to it goes through"));
      }
    }
    Group group{"g-" + RandomHex(8), members};
    const std::string secret = RandomHex(24);
    std::vector<std::string> addresses;
    for (int h : members) addresses.push_back(hosts_[h].address);
    const int n = static_cast<int>(members.size());
    const absl::Status joined = JoinAll(
        n, cancel,
        [&](int m, CallCanceller* canceller) {
          v1::JoinGroupRequest req;
          req.set_session_id(hosts_[members[m]].session);
          req.set_group_id(group.id);
          req.set_secret(secret);
          req.set_rank(m);
          for (const std::string& a : addresses) req.add_members(a);
          req.set_timeout_millis(absl::ToInt64Milliseconds(group_timeout_));
          absl::Status status = hosts_[members[m]].transport->JoinGroup(req, canceller).status();
          Saw(members[m], status);
          return status;
        },
        [&](int m) { return absl::StrCat("host", members[m], " (", addresses[m], ")"); }, group.id);
    if (!joined.ok()) {
      LeaveQuietly(group);
      return joined;
    }
    absl::MutexLock lock(&mu_);
    groups_[key] = group;
    return group.id;
  }

  void DropGroup(const std::vector<int>& members) {
    Group gone;
    {
      absl::MutexLock lock(&mu_);
      auto it = groups_.find(absl::StrJoin(members, ","));
      if (it == groups_.end()) return;
      gone = std::move(it->second);
      groups_.erase(it);
    }
    LeaveQuietly(gone);
  }

  // Best effort, every member at once: a member that is gone has dropped
  // the group already (and is not waited for).
  void LeaveQuietly(const Group& group) {
    ForEachInParallel(static_cast<int>(group.members.size()), [&](int m) {
      const int h = group.members[m];
      if (Gone(h)) return;
      v1::LeaveGroupRequest req;
      req.set_session_id(hosts_[h].session);
      req.set_group_id(group.id);
      (void)hosts_[h].transport->LeaveGroup(req);
    });
  }

  // Whether a call found server `host` unreachable, or an execution found
  // it stalled, and no call has reached it since.
  bool Gone(int host) {
    absl::MutexLock lock(&mu_);
    return gone_.contains(host);
  }

  absl::StatusOr<std::pair<int, v1::FeedTarget>> LocalTarget(const v1::FeedTarget& target) {
    v1::FeedTarget local = target;
    int host = -1;
    if (!target.feed_token().empty()) {
      ASSIGN_OR_RETURN(auto token, SplitName(target.feed_token(), hosts(), "feed token"));
      host = token.first;
      local.set_feed_token(token.second);
    }
    if (!target.device().empty()) {
      ASSIGN_OR_RETURN(auto device, SplitName(target.device(), hosts(), "device"));
      if (host >= 0 && device.first != host) {
        return absl::InvalidArgumentError("the feed token and the device are on different hosts");
      }
      host = device.first;
      local.set_device(device.second);
    }
    if (host < 0) return absl::InvalidArgumentError("a feed names a device or a feed token");
    if (target.feed_token().empty()) local.set_session_id(hosts_[host].session);
    return std::make_pair(host, local);
  }

  const absl::Duration group_timeout_;
  std::vector<Host> hosts_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Program>> programs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int> gone_ ABSL_GUARDED_BY(mu_);
  // Held by an execution across servers (forming its group, running,
  // dropping the group when it failed).
  absl::Mutex run_mu_;
};

}  // namespace

std::unique_ptr<Transport> MakeMeshTransport(std::vector<std::unique_ptr<Transport>> hosts,
                                             std::vector<std::string> addresses,
                                             absl::Duration group_timeout) {
  return std::make_unique<MeshTransport>(std::move(hosts), std::move(addresses), group_timeout);
}

}  // namespace kiln::client
