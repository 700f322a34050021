// Checkpoints: named tensors (a model's parameters and buffers, an
// optimizer's state) saved as one .npy file each with a manifest, in a
// directory per step:
//
//   DIR/step-120/manifest.txt     "step 120", "meta KEY VALUE" lines, and
//                                 "tensor NAME FILE" lines
//   DIR/step-120/t0.npy ...
//   DIR/LATEST                    the name of the newest complete one
//
// A checkpoint is written into a temporary directory and renamed into
// place, and LATEST is replaced by a rename after it, so a program killed
// while saving leaves the previous checkpoint in force. The newest `keep`
// are kept.
#ifndef KILN_CLIENT_CHECKPOINT_H_
#define KILN_CLIENT_CHECKPOINT_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/lazy.h"
#include "client/tensor.h"
#include "compiler/ir/literal.h"

namespace kiln::client {

struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, std::string> meta;      // small values: where a run was
  std::map<std::string, ir::Literal> tensors;   // by name
};

// Reads each tensor (running what it needs) and saves them with `meta`.
// Names and meta keys are [A-Za-z0-9_.:-]+; meta values one line.
// FAILED_PRECONDITION when the directory cannot be written.
absl::Status SaveCheckpoint(const std::string& dir, int64_t step,
                            const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                            const std::map<std::string, std::string>& meta = {}, int keep = 2);

// The newest checkpoint in `dir`; nullopt when there is none (or no
// directory). INVALID_ARGUMENT when LATEST names a damaged one.
absl::StatusOr<std::optional<Checkpoint>> LoadLatestCheckpoint(const std::string& dir);

// Sets each target to the checkpoint's tensor of its name, on `device`.
// INVALID_ARGUMENT naming the tensor when one is missing or of another
// shape; nothing is set then.
absl::Status RestoreTensors(const Checkpoint& checkpoint,
                            const std::vector<std::pair<std::string, Tensor*>>& targets,
                            LazyContext* ctx, const std::string& device);

}  // namespace kiln::client

#endif  // KILN_CLIENT_CHECKPOINT_H_
