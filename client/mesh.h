// Several kiln-servers driven as one (DESIGN.md, "Several hosts"): one
// device list over all of them, programs compiled on each, and replicated
// executions that span them, their collectives exchanged between the
// servers through Gloo.
//
//   auto mesh = Mesh::Connect({"hostA:7000", "hostB:7000"}).value();
//   auto group = mesh->FormGroup().value();            // every server
//   auto program = group->Compile(module, "tpu").value();
//   // One replica per device, listed server by server in member order:
//   // "host0/tpu:0".."host0/tpu:7", "host1/tpu:0".."host1/tpu:7".
//   auto results = group->Run(*program, replicas).value();
//
// When a server dies or stalls, Run fails on every other member within the
// group's timeout, naming the server and its replicas; the group is then
// broken, and FormGroup over the survivors makes a new one.
#ifndef KILN_CLIENT_MESH_H_
#define KILN_CLIENT_MESH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "compiler/ir/instruction.h"

namespace kiln::client {

class MeshGroup;

// Not thread-safe.
class Mesh {
 public:
  // Connects to every server (in parallel); fails naming the first that
  // does not answer.
  static absl::StatusOr<std::unique_ptr<Mesh>> Connect(const std::vector<std::string>& addresses,
                                                       const ConnectOptions& options = {});

  int hosts() const { return static_cast<int>(clients_.size()); }
  Client& host(int i) { return *clients_[i]; }
  const std::string& address(int i) const { return addresses_[i]; }
  // Every device of every server, as "host<i>/<device>" ("host1/tpu:3").
  std::vector<std::string> devices() const;
  // The server and its own device name of "host<i>/<device>".
  absl::StatusOr<std::pair<int, std::string>> Locate(const std::string& device) const;

  // Forms a group of the servers `hosts` (indices into this mesh; empty:
  // all of them, in order) under a new id; the first is member 0, which
  // keeps the group's store. `timeout` bounds forming the group and each
  // exchange between the servers.
  absl::StatusOr<std::unique_ptr<MeshGroup>> FormGroup(std::vector<int> hosts = {},
                                                       absl::Duration timeout = absl::Seconds(30));

 private:
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Client>> clients_;
};

// One replica of a mesh execution: a device of the mesh ("host1/tpu:3")
// and its arguments, which live on that device.
struct MeshReplica {
  std::string device;
  std::vector<std::shared_ptr<DeviceBuffer>> args;
};

// A program compiled on every member of a group.
struct MeshProgram {
  std::vector<std::shared_ptr<Executable>> members;  // by member
};

// A group of a mesh's servers. The mesh must outlive it. Not thread-safe.
class MeshGroup {
 public:
  ~MeshGroup();
  const std::string& id() const { return id_; }
  // The mesh's server index of each member, by member.
  const std::vector<int>& hosts() const { return hosts_; }

  // Compiles `module` on every member, for its devices of `kind`.
  absl::StatusOr<MeshProgram> Compile(const ir::Module& module, const std::string& kind);

  // Runs `program` once per replica, all at once: replica i (its global
  // id) on replicas[i].device. The replicas are listed server by server in
  // member order, every member running at least one. Results by replica.
  // Errors name the member(s) that failed; the group is broken afterwards,
  // and later runs fail at once (FAILED_PRECONDITION) without calling the
  // servers. A member that has not returned the group's timeout plus 5 s
  // after another failed (a stalled server) is cancelled and named.
  // options.cancel, when set, cancels every member's call.
  absl::StatusOr<std::vector<ExecuteResult>> Run(const MeshProgram& program,
                                                 const std::vector<MeshReplica>& replicas,
                                                 const ExecuteOptions& options = {});

  // Leaves the group on every member, except those a failed run found
  // unreachable.
  absl::Status Leave();
  // OK, or why a run broke the group.
  const absl::Status& broken() const { return broken_; }

 private:
  friend class Mesh;
  MeshGroup(Mesh* mesh, std::string id, std::vector<int> hosts, absl::Duration timeout)
      : mesh_(mesh), id_(std::move(id)), hosts_(std::move(hosts)), timeout_(timeout) {}
  std::string Describe(int member) const;

  Mesh* mesh_;
  std::string id_;
  std::vector<int> hosts_;
  absl::Duration timeout_;
  bool left_ = false;
  absl::Status broken_;
  std::vector<bool> unreachable_;  // by member
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_MESH_H_
