// Device loops: a step function traced once and run `trip_count` times on
// the device as one program (a while loop). Its inputs can come from the
// device's infeed and its results can go to the outfeed, so the host only
// streams data in and reads losses out while the loop trains.
//
//   auto final = client::While(steps, state, [&](client::DeviceLoop& loop,
//                                                const std::vector<Tensor>& s) {
//     Tensor x = loop.Infeed(Shape(kF32, {128, 784}));
//     ...
//     loop.Outfeed(loss);
//     return next_state;
//   });
#ifndef KILN_CLIENT_LOOP_H_
#define KILN_CLIENT_LOOP_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/tensor.h"

namespace kiln::client {

// What a loop body can do besides tensor math. Infeeds and outfeeds run in
// the order they were traced.
class DeviceLoop {
 public:
  DeviceLoop(LazyContext* ctx, std::string device) : ctx_(ctx), device_(std::move(device)) {}
  // The next value of the device's infeed; the program fails if the value
  // that arrives has another shape.
  Tensor Infeed(const ir::Shape& shape);
  // Pushes `value` to the device's outfeed.
  void Outfeed(const Tensor& value);
  const std::shared_ptr<Node>& last_token() const { return token_; }
  const absl::Status& status() const { return status_; }

 private:
  std::shared_ptr<Node> Token();

  LazyContext* ctx_;
  std::string device_;
  std::shared_ptr<Node> token_;
  absl::Status status_;
};

using LoopBody = std::function<absl::StatusOr<std::vector<Tensor>>(
    DeviceLoop& loop, const std::vector<Tensor>& state)>;

// Traces `body` once over stand-ins for `state` and returns lazy tensors for
// the state after `trip_count` iterations. `body` must return tensors of
// the same shapes as `state`. Nothing runs until a barrier or a read.
absl::StatusOr<std::vector<Tensor>> While(int64_t trip_count, const std::vector<Tensor>& state,
                                          const LoopBody& body);

}  // namespace kiln::client

#endif  // KILN_CLIENT_LOOP_H_
