// What the loop-mode examples (infeed_training, resnet) share: the batches a
// producer streams into the infeed, and an epoch run as one device loop
// whose losses are read from the outfeed while it trains.
#ifndef KILN_EXAMPLES_FASHION_MNIST_FEEDING_H_
#define KILN_EXAMPLES_FASHION_MNIST_FEEDING_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/feeds.h"
#include "client/lazy.h"
#include "examples/fashion_mnist/mnist.h"

namespace kiln::examples {

// Seconds since `since`.
double SecondsSince(std::chrono::steady_clock::time_point since);

// The batches of epochs `first_epoch` to `last_epoch` (1-based), each
// one infeed value: the tuple (images f32[batch, 784], labels s32[batch]).
// Each epoch has its own shuffled order drawn from (seed, epoch) alone, so
// a run resumed at epoch e streams what an uninterrupted run streams
// there. With `augment`, each image is shifted by up to two pixels in each
// direction (the uncovered border takes the background value) and
// mirrored left to right with probability 1/2.
client::InfeedLoader::BatchSource ShuffledBatches(const Dataset* data, int batch,
                                                  int first_epoch, int last_epoch, uint64_t seed,
                                                  bool augment = false);

// Part `shard` of `shards` of every value `source` yields: each array (and
// each array of a tuple) split into `shards` equal parts along its first
// dimension. A data-parallel replica's infeed takes its part of each batch.
client::InfeedLoader::BatchSource ShardOf(client::InfeedLoader::BatchSource source, int shard,
                                          int shards);

struct LoopEpochOptions {
  int epoch = 1;
  int64_t steps = 0;    // device-loop iterations, one f32[] loss outfed by each
  int log_every = 100;  // a progress line every this many steps
  // The other replicas of a data-parallel loop: each outfeeds its own copy
  // of the loss, read and dropped here so that no queue fills up.
  std::vector<std::string> other_devices;
};

// Runs `run_loop` (which traces and runs the epoch's device loop, and stops
// when the canceller is cancelled) on a thread while this thread reads the
// losses from `device`'s outfeed (and the other replicas') and prints
// progress. Returns the mean loss; the loop's error comes first when both
// fail.
absl::StatusOr<double> RunLoopEpoch(
    client::Client& client, const std::string& device, const LoopEpochOptions& options,
    const std::function<absl::Status(client::CallCanceller* cancel)>& run_loop);

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_FASHION_MNIST_FEEDING_H_
