// Checkpoints of a training run: the model's parameters and SGD's momentum
// buffers as .npy files, and where the run was, in a directory per step:
//
//   DIR/step-000120/param_0.npy ... velocity_0.npy ... manifest.txt
//   DIR/LATEST        (the name of the newest complete checkpoint)
//
// A checkpoint is written into a temporary directory and renamed into
// place, and LATEST is replaced by a rename after it, so a run killed while
// saving leaves the previous checkpoint in force. The two newest are kept.
#ifndef KILN_EXAMPLES_FASHION_MNIST_CHECKPOINT_H_
#define KILN_EXAMPLES_FASHION_MNIST_CHECKPOINT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/literal.h"

namespace kiln::examples {

// Where a run was when it saved: the next step to run is `step` of
// `epoch` (1-based epochs, 0-based steps), with the epoch's sums so far.
struct RunPoint {
  std::string model;
  int epoch = 1;
  int64_t step = 0;
  int64_t global_step = 0;  // steps run since the start of training
  double loss_sum = 0, correct = 0;
};

struct Checkpoint {
  RunPoint point;
  std::vector<ir::Literal> params, velocity;
};

// FAILED_PRECONDITION when the directory cannot be written.
absl::Status SaveCheckpoint(const std::string& dir, const Checkpoint& checkpoint);
// The newest checkpoint in `dir`; nullopt when it holds none (or does not
// exist). INVALID_ARGUMENT when LATEST names a damaged checkpoint.
absl::StatusOr<std::optional<Checkpoint>> LoadLatestCheckpoint(const std::string& dir);

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_FASHION_MNIST_CHECKPOINT_H_
