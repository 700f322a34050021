// Data-parallel training over several devices: the model and optimizer
// state are copied to every replica, each batch is split among them, and
// the gradients are all-reduced (summed and scaled by 1/N) inside the step
// program, so every replica applies the same update and they stay in step.
//
//   DataParallel dp(ctx, {"tpu:0", ..., "tpu:7"});
//   RETURN_IF_ERROR(dp.ReplicateAll(&model.params()));
//   Tensor x = dp.Shard(images).value();          // [batch/N, ...] each
//   Tensor loss = Loss(model.Forward(x), ...);
//   auto grads = dp.AllReduceMean(Grad(loss, model.params()).value());
//   model.params() = sgd.Step(model.params(), grads).value();
//   ctx->Barrier(dp.lead_device());                // one replicated program
#ifndef KILN_CLIENT_DATA_PARALLEL_H_
#define KILN_CLIENT_DATA_PARALLEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/lazy.h"
#include "client/tensor.h"

namespace kiln::client {

// Part `shard` of `shards` equal parts of `batch` along its first
// dimension (what DataParallel::Shard gives replica `shard`).
// INVALID_ARGUMENT when the dimension is not a multiple of `shards`.
absl::StatusOr<ir::Literal> BatchShard(const ir::Literal& batch, int shard, int shards);

// Not thread-safe (it traces on the context's thread). The context is
// borrowed and must outlive the helper.
class DataParallel {
 public:
  // One replica per device; the step is traced on the first (the lead).
  DataParallel(LazyContext* ctx, std::vector<std::string> devices)
      : ctx_(ctx), devices_(std::move(devices)) {}

  int replicas() const { return static_cast<int>(devices_.size()); }
  const std::string& lead_device() const { return devices_[0]; }
  const std::vector<std::string>& devices() const { return devices_; }

  // The value of `t` on every replica (reads it once).
  absl::StatusOr<Tensor> Replicate(const Tensor& t) const;
  // Replaces each tensor by its replicated copy.
  absl::Status ReplicateAll(std::vector<Tensor>* tensors) const;
  // Splits `batch` along its first dimension into N equal shards, shard r
  // on replica r. INVALID_ARGUMENT when the dimension is not a multiple of N.
  absl::StatusOr<Tensor> Shard(const ir::Literal& batch) const;
  // Each gradient summed over the replicas and scaled by 1/N: with equal
  // shards, the gradient of the mean loss over the whole batch.
  std::vector<Tensor> AllReduceMean(const std::vector<Tensor>& grads) const;
  // Replica 0 of `t` alone (its buffer, not a copy): a program that reads
  // it runs once, on the lead device (an evaluation between replicated
  // steps). `t` itself when it is not replicated.
  Tensor Lead(const Tensor& t) const;
  // The value every replica holds, or FAILED_PRECONDITION naming the first
  // replica that differs from replica 0 (bitwise).
  absl::StatusOr<ir::Literal> CheckInStep(const Tensor& t) const;

 private:
  LazyContext* ctx_;
  std::vector<std::string> devices_;
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_DATA_PARALLEL_H_
