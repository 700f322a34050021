// Keeping a device's infeed full from a host dataset while a device loop
// trains: a background loader in the spirit of PyTorch/XLA's
// MpDeviceLoader.
#ifndef KILN_CLIENT_FEEDS_H_
#define KILN_CLIENT_FEEDS_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/transport.h"
#include "compiler/ir/literal.h"

namespace kiln::client {

// Two background threads: one calls `next` to prepare batches (each batch
// is the values one loop iteration reads, in infeed order) and keeps up to
// `prefetch` of them ready; the other writes them into the infeed stream,
// which blocks while the device queue is full. `next` returns nullopt at
// the end of the data, or an error that stops the loader.
class InfeedLoader {
 public:
  using BatchSource = std::function<absl::StatusOr<std::optional<std::vector<ir::Literal>>>()>;

  InfeedLoader(std::unique_ptr<InfeedStream> stream, BatchSource next, int prefetch);
  ~InfeedLoader();  // stops and joins
  InfeedLoader(const InfeedLoader&) = delete;
  InfeedLoader& operator=(const InfeedLoader&) = delete;

  // Waits until every batch was written (or the first error) and finishes
  // the stream; returns the loader's or the server's error.
  absl::Status Wait();
  // Stops early: no more batches are prepared or written.
  void Stop();
  int64_t batches_written() const;

 private:
  void Prepare();
  void Send();

  std::unique_ptr<InfeedStream> stream_;
  BatchSource next_;
  const size_t prefetch_;
  mutable absl::Mutex mu_;
  std::deque<std::vector<ir::Literal>> ready_ ABSL_GUARDED_BY(mu_);
  bool source_done_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::thread preparer_, sender_;
};

}  // namespace kiln::client

#endif  // KILN_CLIENT_FEEDS_H_
