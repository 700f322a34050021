#include "client/data_parallel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kiln::client {

absl::StatusOr<Tensor> DataParallel::Replicate(const Tensor& t) const {
  ASSIGN_OR_RETURN(ir::Literal value, t.ReadStorage());
  Tensor out = ctx_->FromReplicaLiterals(std::vector<ir::Literal>(devices_.size(), value),
                                         devices_);
  RETURN_IF_ERROR(out.status());
  out.node()->reduced_precision = t.IsReducedPrecision();
  return out;
}

absl::Status DataParallel::ReplicateAll(std::vector<Tensor>* tensors) const {
  for (Tensor& t : *tensors) {
    ASSIGN_OR_RETURN(t, Replicate(t));
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Literal> BatchShard(const ir::Literal& batch, int shard, int shards) {
  const ir::Shape& shape = batch.shape();
  if (!shape.IsArray() || shape.rank() == 0 || shards < 1 || shape.dim(0) % shards != 0 ||
      shard < 0 || shard >= shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot split ", shape.ToString(), " into ", shards, " equal shards along dimension 0"));
  }
  ir::Shape shard_shape = shape;
  shard_shape.mutable_dims()[0] = shape.dim(0) / shards;
  const int64_t shard_bytes = shard_shape.ByteSize();
  ir::Literal out(shard_shape);
  if (shard_bytes > 0) {
    std::memcpy(out.mutable_bytes().data(), batch.bytes().data() + shard * shard_bytes,
                shard_bytes);
  }
  return out;
}

absl::StatusOr<Tensor> DataParallel::Shard(const ir::Literal& batch) const {
  std::vector<ir::Literal> shards;
  for (int r = 0; r < replicas(); ++r) {
    ASSIGN_OR_RETURN(ir::Literal shard, BatchShard(batch, r, replicas()));
    shards.push_back(std::move(shard));
  }
  Tensor out = ctx_->FromReplicaLiterals(shards, devices_);
  RETURN_IF_ERROR(out.status());
  return out;
}

std::vector<Tensor> DataParallel::AllReduceMean(const std::vector<Tensor>& grads) const {
  std::vector<Tensor> out;
  out.reserve(grads.size());
  const double scale = 1.0 / replicas();
  for (const Tensor& g : grads) out.push_back(CrossReplicaSum(g) * scale);
  return out;
}

Tensor DataParallel::Lead(const Tensor& t) const {
  if (!t.defined() || !t.status().ok() || t.node()->replicas.empty()) return t;
  auto node = std::make_shared<Node>();
  node->shape = t.shape();
  node->device = t.device();
  node->data = t.node()->replicas[0];
  node->reduced_precision = t.IsReducedPrecision();
  node->context = t.node()->context;
  return Tensor(std::move(node));
}

absl::StatusOr<ir::Literal> DataParallel::CheckInStep(const Tensor& t) const {
  ASSIGN_OR_RETURN(ir::Literal first, t.ReadStorage());
  const auto& replicas = t.node()->replicas;
  for (size_t r = 1; r < replicas.size(); ++r) {
    ASSIGN_OR_RETURN(ir::Literal value, ctx_->client()->TransferFromDevice(*replicas[r]));
    if (value.bytes() != first.bytes()) {
      return absl::FailedPreconditionError(
          absl::StrCat("replica ", r, " on ", replicas[r]->device(), " differs from replica 0"));
    }
  }
  if (t.IsReducedPrecision()) return t.ToHost();
  return first;
}

}  // namespace kiln::client
