#include "client/mesh.h"

#include <algorithm>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "client/fan_out.h"

namespace kiln::client {

absl::StatusOr<std::unique_ptr<Mesh>> Mesh::Connect(const std::vector<std::string>& addresses,
                                                    const ConnectOptions& options) {
  if (addresses.empty()) return absl::InvalidArgumentError("a mesh needs a server");
  const int n = static_cast<int>(addresses.size());
  std::vector<absl::StatusOr<std::unique_ptr<Client>>> clients(n);
  ForEachInParallel(n, [&](int i) { clients[i] = Client::Connect(addresses[i], options); });
  auto mesh = std::unique_ptr<Mesh>(new Mesh());
  for (int i = 0; i < n; ++i) {
    if (!clients[i].ok()) {
      return absl::Status(clients[i].status().code(),
                          absl::StrCat("host", i, " (", addresses[i],
                                       "): ", clients[i].status().message()));
    }
    mesh->addresses_.push_back(addresses[i]);
    mesh->clients_.push_back(*std::move(clients[i]));
  }
  return mesh;
}

std::vector<std::string> Mesh::devices() const {
  std::vector<std::string> names;
  for (int i = 0; i < hosts(); ++i) {
    for (const DeviceDescription& d : clients_[i]->devices()) {
      names.push_back(absl::StrCat("host", i, "/", d.name));
    }
  }
  return names;
}

absl::StatusOr<std::pair<int, std::string>> Mesh::Locate(const std::string& device) const {
  absl::string_view rest = device;
  const size_t slash = rest.find('/');
  int host = -1;
  if (slash == absl::string_view::npos || !absl::ConsumePrefix(&rest, "host") ||
      !absl::SimpleAtoi(rest.substr(0, slash - 4), &host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a mesh device is host<i>/<device> (host1/tpu:3), got \"", device, "\""));
  }
  if (host < 0 || host >= hosts()) {
    return absl::InvalidArgumentError(
        absl::StrCat(device, ": the mesh has hosts 0 to ", hosts() - 1));
  }
  return std::make_pair(host, device.substr(slash + 1));
}

absl::StatusOr<std::unique_ptr<MeshGroup>> Mesh::FormGroup(std::vector<int> hosts,
                                                           absl::Duration timeout) {
  if (hosts.empty()) {
    for (int i = 0; i < this->hosts(); ++i) hosts.push_back(i);
  }
  std::vector<std::string> members;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const int h = hosts[i];
    if (h < 0 || h >= this->hosts()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", h, " is not in the mesh (hosts 0 to ", this->hosts() - 1, ")"));
    }
    if (std::find(hosts.begin(), hosts.begin() + i, h) != hosts.begin() + i) {
      return absl::InvalidArgumentError(absl::StrCat("host ", h, " is named twice"));
    }
    members.push_back(addresses_[h]);
  }
  auto group =
      std::unique_ptr<MeshGroup>(new MeshGroup(this, "g-" + RandomHex(8), hosts, timeout));
  const std::string secret = RandomHex(24);
  const int n = static_cast<int>(hosts.size());
  const absl::Status joined = JoinAll(
      n, nullptr,
      [&](int m, CallCanceller* canceller) {
        GroupMembership membership;
        membership.id = group->id_;
        membership.secret = secret;
        membership.rank = m;
        membership.members = members;
        membership.timeout = timeout;
        return clients_[hosts[m]]->JoinGroup(membership, canceller);
      },
      [&](int m) { return group->Describe(m); }, group->id_);
  if (!joined.ok()) {
    (void)group->Leave();
    return joined;
  }
  return group;
}

MeshGroup::~MeshGroup() {
  if (!left_) (void)Leave();
}

std::string MeshGroup::Describe(int member) const {
  const int h = hosts_[member];
  return absl::StrCat("member ", member, " (host", h, ", ", mesh_->address(h), ")");
}

absl::StatusOr<MeshProgram> MeshGroup::Compile(const ir::Module& module, const std::string& kind) {
  const int n = static_cast<int>(hosts_.size());
  MeshProgram program;
  program.members.resize(n);
  std::vector<absl::Status> errors(n);
  ForEachInParallel(n, [&](int m) {
    Client& client = mesh_->host(hosts_[m]);
    const DeviceDescription* device = nullptr;
    for (const DeviceDescription& d : client.devices()) {
      if (d.kind == kind) {
        device = &d;
        break;
      }
    }
    if (device == nullptr) {
      errors[m] = absl::InvalidArgumentError(absl::StrCat("no ", kind, " device"));
      return;
    }
    absl::StatusOr<std::shared_ptr<Executable>> exe = client.Compile(module, device->name);
    if (exe.ok()) {
      program.members[m] = *std::move(exe);
    } else {
      errors[m] = exe.status();
    }
  });
  for (int m = 0; m < n; ++m) {
    if (!errors[m].ok()) {
      return absl::Status(errors[m].code(), absl::StrCat(Describe(m), ": ", errors[m].message()));
    }
  }
  return program;
}

absl::StatusOr<std::vector<ExecuteResult>> MeshGroup::Run(const MeshProgram& program,
                                                          const std::vector<MeshReplica>& replicas,
                                                          const ExecuteOptions& options) {
  const int n = static_cast<int>(hosts_.size());
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", id_, " broke in an earlier run (form a new group): ", broken_.message()));
  }
  if (static_cast<int>(program.members.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("the program was compiled for ",
                                                   program.members.size(), " members, the group has ", n));
  }
  // Each member's replicas, which must come in member order.
  std::vector<std::vector<ReplicaArguments>> mine(n);
  int member = 0;
  for (size_t r = 0; r < replicas.size(); ++r) {
    ASSIGN_OR_RETURN(auto where, mesh_->Locate(replicas[r].device));
    while (member < n && hosts_[member] != where.first) ++member;
    if (member == n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replica ", r, " on ", replicas[r].device,
          ": list the replicas server by server, in the group's member order (its servers: host",
          absl::StrJoin(hosts_, ", host"), ")"));
    }
    mine[member].push_back({where.second, replicas[r].args});
  }
  std::vector<int> counts(n);
  for (int m = 0; m < n; ++m) {
    counts[m] = static_cast<int>(mine[m].size());
    if (counts[m] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe(m), " runs no replica; every member runs at least one"));
    }
  }
  // Every member's call at once; a stalled member is cancelled.
  std::vector<bool> stalled;
  std::vector<absl::StatusOr<ReplicatedResult>> results = FanOut<ReplicatedResult>(
      n, timeout_ + absl::Seconds(5), options.cancel,
      [&](int m, CallCanceller* canceller) {
        ExecuteOptions o = options;
        o.group_id = id_;
        o.group_replicas = counts;
        o.cancel = canceller;
        return mesh_->host(hosts_[m]).ExecuteReplicated(*program.members[m], mine[m], o);
      },
      &stalled);
  std::vector<std::string> errors;
  absl::StatusCode code = absl::StatusCode::kOk;
  int first = 0;
  unreachable_.assign(n, false);
  for (int m = 0; m < n; ++m) {
    if (!results[m].ok()) {
      unreachable_[m] = results[m].status().code() == absl::StatusCode::kUnavailable || stalled[m];
      if (code == absl::StatusCode::kOk) code = results[m].status().code();
      errors.push_back(absl::StrCat(Describe(m), ", replicas ", first, " to ",
                                    first + counts[m] - 1, ": ", results[m].status().message()));
    }
    first += counts[m];
  }
  if (!errors.empty()) {
    broken_ = absl::Status(code, absl::StrCat("group ", id_, ": ", absl::StrJoin(errors, "; ")));
    return broken_;
  }
  std::vector<ExecuteResult> out;
  for (int m = 0; m < n; ++m) {
    for (ExecuteResult& r : results[m]->replicas) out.push_back(std::move(r));
  }
  return out;
}

absl::Status MeshGroup::Leave() {
  left_ = true;
  const int n = static_cast<int>(hosts_.size());
  std::vector<absl::Status> left(n);
  ForEachInParallel(n, [&](int m) {
    if (m < static_cast<int>(unreachable_.size()) && unreachable_[m]) return;
    left[m] = mesh_->host(hosts_[m]).LeaveGroup(id_);
  });
  for (int m = 0; m < n; ++m) {
    if (!left[m].ok() && left[m].code() != absl::StatusCode::kNotFound) {
      return absl::Status(left[m].code(), absl::StrCat(Describe(m), ": ", left[m].message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::client
