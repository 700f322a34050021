#include "server/trace_writer.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::server {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("--trace_file ", path, ": ", std::strerror(errno)));
  }
  std::fputs("[\n", f);
  std::fflush(f);
  return std::unique_ptr<TraceWriter>(new TraceWriter(f));
}

TraceWriter::~TraceWriter() {
  absl::MutexLock lock(&mu_);
  // A last event without a comma closes the array.
  std::fprintf(file_, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"kiln-server\"}}\n]\n",
               static_cast<int>(getpid()));
  std::fclose(file_);
}

void TraceWriter::Complete(const std::string& name, const std::string& category,
                           absl::Time start, absl::Duration duration, const Args& args) {
  std::string line = absl::StrCat(
      "{\"name\":", JsonString(name), ",\"cat\":", JsonString(category),
      ",\"ph\":\"X\",\"ts\":", absl::ToUnixMicros(start),
      ",\"dur\":", std::max<int64_t>(0, absl::ToInt64Microseconds(duration)),
      ",\"pid\":", getpid(), ",\"tid\":", static_cast<int64_t>(syscall(SYS_gettid)), ",\"args\":{");
  for (size_t i = 0; i < args.size(); ++i) {
    absl::StrAppend(&line, i ? "," : "", JsonString(args[i].first), ":", JsonString(args[i].second));
  }
  line += "}},\n";
  absl::MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
  ++events_;
}

int64_t TraceWriter::events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

}  // namespace kiln::server
