// The lazy tracing context: records ops as nodes, cuts traces into modules at
// barriers, keeps compiled programs by fingerprint, executes them through the
// client, and explains every recompile.
#ifndef KILN_CLIENT_LAZY_H_
#define KILN_CLIENT_LAZY_H_

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "client/tensor.h"
#include "client/trace_key.h"

namespace kiln::client {

struct LazyMetrics {
  int64_t traced_ops = 0;
  int64_t barriers = 0;
  int64_t executions = 0;
  // Compiles that ran on the server / that were served from a cache.
  int64_t uncached_compiles = 0;
  int64_t cached_compiles = 0;
  // Server time spent compiling (uncached compiles only), and the round
  // trip of every Compile call this context made (cache hits included).
  double compile_seconds = 0;
  double compile_call_seconds = 0;
  int64_t bytes_to_device = 0;
  int64_t bytes_from_device = 0;
  // Seconds spent keying traces, and cutting into modules and
  // fingerprinting those whose key was new; how many were cut.
  double lowering_seconds = 0;
  int64_t lowerings = 0;
  // Round trip of each execution (seconds), most recent last (bounded).
  std::deque<double> step_seconds;
  // Executions that ran as replicas, and values copied to replicas because
  // a replicated program read them from the lead device only.
  int64_t replicated_executions = 0;
  int64_t broadcasts_to_replicas = 0;
  // Arguments given to their execution because nothing could read them
  // afterwards (the server may reuse their memory for results).
  int64_t donated_arguments = 0;
  // Pipelined barriers: executions sent without waiting, and how long the
  // tracing thread then waited for one to finish (seconds, in all).
  int64_t pipelined_executions = 0;
  double pipeline_wait_seconds = 0;
  // Executions of a CompiledFunction's program on new values, with no
  // trace (counted in executions or pipelined_executions as well).
  int64_t replays = 0;
  // On tpu devices: the simulated cost of the latest execution and the sum
  // of all simulated times.
  std::optional<v1::ExecutionProfileProto> last_profile;
  double simulated_seconds = 0;
};

// Not thread-safe: one thread traces at a time. The client is borrowed and
// must outlive the context and its tensors' use.
// The largest value LazyContext::FromLiteral keeps on the host until an
// execution carries it along.
inline constexpr int64_t kInlineArgumentMaxBytes = int64_t{4} << 20;

class LazyContext : public std::enable_shared_from_this<LazyContext> {
 public:
  static std::shared_ptr<LazyContext> Create(Client* client);

  Client* client() const { return client_; }

  // Device data (a parameter of traces) holding `value`. A value of at most
  // kInlineArgumentMaxBytes stays on the host until the first execution
  // that reads it carries it along (saving the round trip of an upload,
  // once per batch; protocol version 4), and is then kept on the device;
  // larger ones, and any on an older server, are uploaded now.
  Tensor FromLiteral(const ir::Literal& value, const std::string& device);
  Tensor FromLiteral(ir::Literal&& value, const std::string& device);
  template <typename T>
  Tensor FromVector(ir::ElementType type, std::vector<int64_t> dims, const std::vector<T>& v,
                    const std::string& device) {
    return FromLiteral(ir::Literal::FromVector<T>(type, std::move(dims), v), device);
  }
  // Uploads `values[i]` to `devices[i]`: one replicated tensor whose
  // replica 0 lives on devices[0]. The values must have one shape.
  Tensor FromReplicaLiterals(const std::vector<ir::Literal>& values,
                             const std::vector<std::string>& devices);
  // A value baked into traces as a constant (use for small fixed values).
  Tensor Constant(const ir::Literal& value, const std::string& device);
  // Random values generated from `seed` and uploaded.
  Tensor RandomNormal(const ir::Shape& shape, double mean, double stddev, uint64_t seed,
                      const std::string& device);
  Tensor RandomUniform(const ir::Shape& shape, double low, double high, uint64_t seed,
                       const std::string& device);

  // Executes every pending tensor on `device` that is still referenced and
  // leaves the results on the device. The first barrier at a call site with
  // a given graph compiles; later ones with the same graph are cache hits.
  absl::Status Barrier(const std::string& device,
                       std::source_location where = std::source_location::current());
  // What computing `tensors` (all on one device) would cost on that device
  // over `replicas` replicas, priced by its cost model without running
  // anything: the dry run of Realize. The tensors stay pending.
  absl::StatusOr<v1::ExecutionProfileProto> Estimate(const std::vector<Tensor>& tensors,
                                                     int replicas = 1);
  // Executes what `tensors` need (and only that). `cancel` (borrowed) can
  // stop the program from another thread, e.g. a device loop.
  absl::Status Realize(const std::vector<Tensor>& tensors,
                       std::source_location where = std::source_location::current(),
                       CallCanceller* cancel = nullptr);

  // Pipelined barriers: Barrier sends the program and returns at once, so
  // the caller traces its next step while the device runs this one. The
  // tensors it realizes are in flight until their execution's reply is in;
  // reading one, and the next execution, wait for it. An execution that
  // fails leaves its error on its outputs as a synchronous one does (every
  // use of them reports it; a cancelled call or a server out of reach
  // leaves them to be computed again unless the step donated arguments),
  // and the next call that waits (Realize, a Barrier that sends a program,
  // a read of an output, Sync) returns it. Replicated programs and Realize
  // always run synchronously. Off by default.
  void set_pipelined(bool pipelined) { pipelined_ = pipelined; }
  bool pipelined() const { return pipelined_; }
  // Waits for the executions in flight, if any, settles their outputs, and
  // returns the first error (each error is returned once). Where the server
  // numbers executions (protocol 6), a barrier sends its program while the
  // one before is still in flight, naming that one's outputs as arguments,
  // so the device goes from one step to the next without waiting for the
  // client; at most kPipelineDepth executions are in flight.
  absl::Status Sync();
  // Waits for the executions in flight up to the one that computes `node`
  // (all of them if none does), as Sync does.
  absl::Status SyncFor(const Node* node);
  static constexpr size_t kPipelineDepth = 2;

  // Eager mode executes every op as soon as it is recorded. Its values keep
  // the graph that made them until the next barrier on their device, as a
  // lazy step's nodes do until they are computed there: gradients (Grad)
  // reach back through the ops of the step.
  void set_eager(bool eager) { eager_ = eager; }
  bool eager() const { return eager_; }
  // Whether ops are recorded for Grad (on by default). Off, as in an
  // evaluation pass, Grad takes every value recorded meanwhile for a
  // constant (torch.no_grad's contract), in either mode; in eager mode the
  // value also drops its graph once computed, so the op holds none. See
  // NoGradients for a scope.
  void set_record_gradients(bool on) { record_gradients_ = on; }
  bool record_gradients() const { return record_gradients_; }

  const LazyMetrics& metrics() const { return metrics_; }
  // Why each compile after the first at a call site happened, e.g.
  // "input 0 shape f32[128,784] -> f32[96,784]".
  const std::vector<std::string>& recompile_explanations() const { return explanations_; }
  // Counters, timers with percentiles and the recompile explanations.
  std::string Report() const;

  // Records a node built by an op (used by the op functions).
  Tensor Record(std::shared_ptr<Node> node);

  // Device loops (client/loop.h): while a body is traced, recorded nodes
  // belong to it, are never pending and never run eagerly. The body keeps
  // them alive, so that no node made later (a value uploaded while the
  // body is traced) can take the address of one that went, and pass for a
  // node of the body.
  struct LoopBodyNodes {
    absl::flat_hash_set<const Node*> nodes;
    std::vector<std::shared_ptr<Node>> alive;
  };
  void BeginLoopBody();
  // A node that is not recorded itself (a loop's or a conditional's own
  // node, whose elements are) joins the innermost body being traced, if any.
  void JoinLoopBody(std::shared_ptr<Node> node);
  // Ends the innermost body; returns the nodes recorded in it.
  LoopBodyNodes EndLoopBody();
  bool in_loop_body() const { return !loop_bodies_.empty(); }

 private:
  // Whether FromLiteral may keep `value` on the host for now.
  bool Inlinable(const ir::Literal& value) const;
  // A tensor uploaded now.
  Tensor Upload(const ir::Literal& value, const std::string& device);
  // Uploads a host-only value (for uses that cannot send it along).
  absl::Status UploadHostValue(Node& node);

  explicit LazyContext(Client* client) : client_(client) {}
  friend class CompiledFunction;
  // The program a realize ran, for CompiledFunction to run again.
  struct RealizedProgram {
    std::shared_ptr<Executable> executable;  // null when none ran
    NodeList params;                         // its parameters, in order
    NodeList outputs;                        // the nodes it computed, in order
  };
  // Realize; with `dispatch`, a program that may run without waiting is
  // sent and left in flight. With `program`, says which program ran.
  absl::Status RealizeNodes(absl::Span<const Tensor> tensors, std::source_location where,
                            CallCanceller* cancel, bool dispatch,
                            RealizedProgram* program = nullptr);
  // Before a program runs: waits for the executions in flight as far as it
  // must. Returns whether the program may name outputs still in flight.
  absl::StatusOr<bool> PrepareToRun(bool dispatch, CallCanceller* cancel);
  // Runs `exe` on `params` and settles `outputs` (at once, or when its
  // reply is in if sent without waiting). A replayed program's outputs
  // have no graph: a failure is kept on them, whatever it was.
  absl::Status RunProgram(const std::shared_ptr<Executable>& exe, NodeSpan params,
                          NodeSpan outputs, CallCanceller* cancel, bool dispatch,
                          bool named_outputs, std::chrono::steady_clock::time_point keyed_at,
                          bool replay);
  // Runs a program that ran before on new `params`, computing `outputs`
  // (nodes with no graph), sent as a barrier's would be.
  absl::Status Replay(const std::shared_ptr<Executable>& exe, NodeSpan params, NodeSpan outputs);
  // Programs sent (synchronously or not), and values read to the host or
  // priced (Tensor::ReadStorage, Estimate), by any context on the calling
  // thread so far: what a compiled function's body must not do to be
  // replayed (whichever context it uses).
  static int64_t ThreadActivity();
  // Counts for ThreadActivity.
  static void NoteActivity();
  friend class Tensor;
  // Adds an execution's round trip to metrics_.step_seconds (bounded).
  void RecordStep(double seconds);
  // Gives `outputs` (and the parameters that went inline, which become
  // device buffers) the values of a successful execution. Null entries
  // (nodes gone meanwhile) are skipped.
  void Settle(ExecuteResult& result, NodeSpan outputs, NodeSpan params,
              const std::vector<ExecuteResult>& replica_results);
  // The execution sent by a pipelined barrier; nodes by weak reference, so
  // that nothing here keeps a trace (or this context) alive.
  struct InFlight {
    std::shared_ptr<PendingExecution> pending;
    std::vector<std::weak_ptr<Node>> outputs;
    std::vector<std::weak_ptr<Node>> params;
    // Whether it donated arguments, or a later execution was sent after
    // it (SupersedeInFlight): then no failure can be retried.
    bool donated = false;
    bool superseded = false;
    // A replayed program's: its outputs have no graph to run again.
    bool replayed = false;
  };
  // The buffers of replicated program inputs, per replica; empty when no
  // parameter is replicated. Copies lead-device values to the replicas.
  absl::StatusOr<std::vector<ReplicaArguments>> ReplicaInputs(NodeSpan params);
  struct GraphSummary {
    std::vector<std::string> inputs;  // parameter shapes
    std::vector<std::string> ops;     // "add f32[128,10]"
    std::string fingerprint;
  };
  std::string Explain(const GraphSummary& before, const GraphSummary& after) const;

  Client* client_;
  bool eager_ = false;
  bool record_gradients_ = true;
  bool pipelined_ = false;
  // Oldest first.
  std::deque<InFlight> in_flight_;
  // Settles the oldest execution in flight.
  absl::Status SettleOldest();
  // Before an execution is sent while others are in flight (protocol 6):
  // they give up being computed again after a failure, and drop their
  // outputs' graphs, so that the new one may take over (donate) the values
  // they replace when nothing else refers to them.
  void SupersedeInFlight();
  std::vector<std::weak_ptr<Node>> pending_;
  size_t prune_pending_at_ = 1024;
  // Values computed in eager mode that keep their graph until a barrier.
  std::vector<std::weak_ptr<Node>> eager_graphs_;
  size_t prune_eager_graphs_at_ = 1024;
  std::vector<LoopBodyNodes> loop_bodies_;
  absl::flat_hash_map<std::string, std::shared_ptr<Executable>> executables_;
  // The same programs by trace key (the device's length and name, then the
  // key's bytes).
  absl::flat_hash_map<std::string, std::shared_ptr<Executable>> by_structure_;
  std::map<std::string, GraphSummary> last_graph_at_;
  // The last trace's key, kept for its bytes' capacity.
  TraceKey trace_key_;
  std::vector<std::string> explanations_;
  LazyMetrics metrics_;
};

// Gradients not recorded while it lives (LazyContext::set_record_gradients);
// the setting before it comes back when it ends.
class NoGradients {
 public:
  explicit NoGradients(LazyContext& context)
      : context_(context), before_(context.record_gradients()) {
    context_.set_record_gradients(false);
  }
  ~NoGradients() { context_.set_record_gradients(before_); }
  NoGradients(const NoGradients&) = delete;
  NoGradients& operator=(const NoGradients&) = delete;

 private:
  LazyContext& context_;
  bool before_;
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_LAZY_H_
