// kiln-server --trace_file: what the server does, as a Chrome trace-event
// JSON file that Perfetto (ui.perfetto.dev) and chrome://tracing open.
// Compiles, transfers and executions are complete events ("ph":"X") on the
// thread that ran them, with their device, sizes and outcome as args.
// Events are appended one per line as they end; the array is closed when
// the writer is destroyed, and a file cut short by a crash still opens
// (the format allows the closing bracket to be missing).
#ifndef KILN_SERVER_TRACE_WRITER_H_
#define KILN_SERVER_TRACE_WRITER_H_

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kiln::server {

// Thread-safe.
class TraceWriter {
 public:
  // Creates or truncates `path`; FAILED_PRECONDITION when it cannot.
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path);
  ~TraceWriter();

  using Args = std::vector<std::pair<std::string, std::string>>;
  // One complete event: `name` in `category`, from `start` for `duration`,
  // on the calling thread.
  void Complete(const std::string& name, const std::string& category, absl::Time start,
                absl::Duration duration, const Args& args = {});
  int64_t events() const;

 private:
  explicit TraceWriter(std::FILE* file) : file_(file) {}
  mutable absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::server

#endif  // KILN_SERVER_TRACE_WRITER_H_
