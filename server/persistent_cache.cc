#include "server/persistent_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/file_io.h"
#include "compiler/ir/fingerprint.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "kiln-compile-cache 1";
constexpr char kSuffix[] = ".kca";

// The parts in the order a miss is explained: the first that differs
// names the miss.
struct Part {
  const char* field;   // in the entry's header
  const char* reason;  // the miss reason
  const char* what;    // in the explanation
  std::string PersistentKey::*member;
};
const Part kParts[] = {
    {"backend", "backend", "the backend kind", &PersistentKey::backend},
    {"config", "config", "the backend config", &PersistentKey::config},
    {"options", "options", "the compile options", &PersistentKey::options},
    {"kiln", "kiln_version", "Kiln's version", &PersistentKey::kiln_version},
    {"dependencies", "dependencies", "the backend's libraries or processor",
     &PersistentKey::dependencies},
};

std::string OneLine(const std::string& s) { return absl::StrReplaceAll(s, {{"\n", " "}}); }

std::string Header(const PersistentKey& key, const std::string& artifact) {
  std::string h = absl::StrCat(kMagic, "\nmodule ", key.module, "\n");
  for (const Part& p : kParts) absl::StrAppend(&h, p.field, " ", OneLine(key.*p.member), "\n");
  absl::StrAppend(&h, "artifact ", artifact.size(), " ", ir::Sha256Hex(artifact), "\n");
  return h;
}

struct Entry {
  PersistentKey key;
  size_t artifact_size = 0;
  std::string artifact_hash;
  size_t header_size = 0;
};

// An entry's header is a few short lines: anything longer is not one.
constexpr size_t kMaxHeaderBytes = 64 << 10;

// The header at the start of `bytes`; nullopt when it is not one.
std::optional<Entry> ParseHeader(const std::string& bytes) {
  Entry e;
  size_t pos = 0;
  auto next_line = [&](std::string* line) {
    const size_t end = bytes.find('\n', pos);
    if (end == std::string::npos) return false;
    *line = bytes.substr(pos, end - pos);
    pos = end + 1;
    return true;
  };
  std::string line;
  if (!next_line(&line) || line != kMagic) return std::nullopt;
  auto field = [&](const std::string& name, std::string* value) {
    if (!next_line(&line) || !absl::StartsWith(line, name + " ")) return false;
    *value = line.substr(name.size() + 1);
    return true;
  };
  if (!field("module", &e.key.module)) return std::nullopt;
  for (const Part& p : kParts) {
    if (!field(p.field, &(e.key.*p.member))) return std::nullopt;
  }
  std::string artifact;
  if (!field("artifact", &artifact)) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(artifact, ' ');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &e.artifact_size)) return std::nullopt;
  e.artifact_hash = parts[1];
  e.header_size = pos;
  return e;
}

// The first `max_bytes` of the regular file at `path` (all of it when
// `whole`, nullopt if it is longer): nothing else (a link, a FIFO, a
// device) is read. nullopt when it is absent or not such a file.
std::optional<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes,
                                           bool whole) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  std::optional<std::string> out;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (!whole || st.st_size <= max_bytes)) {
    const size_t size = static_cast<size_t>(std::min<int64_t>(st.st_size, max_bytes));
    out = ReadUpTo(fd, size);
    if (out.has_value() && out->size() != size) out.reset();
  }
  close(fd);
  return out;
}

// The header of the entry file at `path`, reading at most its first
// kMaxHeaderBytes.
std::optional<Entry> ReadHeaderOf(const std::string& path) {
  std::optional<std::string> start = ReadRegularFile(path, kMaxHeaderBytes, /*whole=*/false);
  if (!start.has_value()) return std::nullopt;
  return ParseHeader(*start);
}

std::string Shorten(const std::string& s) {
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

}  // namespace

std::string PersistentKey::Digest() const {
  std::string all = module;
  for (const Part& p : kParts) absl::StrAppend(&all, "\n", p.field, "=", OneLine(this->*p.member));
  return ir::Sha256Hex(all);
}

absl::StatusOr<std::unique_ptr<PersistentCache>> PersistentCache::Open(const std::string& dir,
                                                                       int64_t max_bytes) {
  std::error_code ec;
  const bool existed = fs::is_directory(dir, ec);
  fs::create_directories(dir, ec);
  if (!existed && !ec) fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--compile_cache_dir ", dir, ": cannot create it (", ec.message(), ")"));
  }
  if (access(dir.c_str(), W_OK | R_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--compile_cache_dir ", dir, ": not readable and writable by this user"));
  }
  std::unique_ptr<PersistentCache> cache(new PersistentCache(dir, max_bytes));
  cache->Evict();
  return cache;
}

std::string PersistentCache::PathOf(const PersistentKey& key) const {
  return absl::StrCat(dir_, "/", key.module.substr(0, 32), "-", key.Digest().substr(0, 32),
                      kSuffix);
}

int64_t PersistentCache::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

PersistentCache::Lookup PersistentCache::Find(const PersistentKey& key) {
  Lookup out;
  const std::string path = PathOf(key);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    // Whatever is at the path, only a whole, intact entry of this key is
    // used; anything else is removed so that it is not met again.
    std::optional<std::string> bytes = ReadRegularFile(path, max_bytes_ + kMaxHeaderBytes, /*whole=*/true);
    std::optional<Entry> e;
    if (bytes.has_value()) e = ParseHeader(*bytes);
    const bool intact = e.has_value() && e->header_size <= bytes->size() &&
                        e->artifact_size == bytes->size() - e->header_size &&
                        ir::Sha256Hex(absl::string_view(*bytes).substr(e->header_size)) ==
                            e->artifact_hash;
    if (intact && e->key.Digest() == key.Digest()) {
      // A use: recently used entries are evicted last.
      utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
      out.artifact = bytes->substr(e->header_size);
      return out;
    }
    if (!intact) {
      unlink(path.c_str());
      out.reason = "corrupt";
      out.explanation = absl::StrCat("the entry ", path, " was damaged and is removed");
      return out;
    }
  }
  // The nearest entry: one for the same module, whose first differing part
  // names the miss.
  out.reason = "absent";
  out.explanation = "no entry for this module";
  std::error_code ec;
  const std::string prefix = key.module.substr(0, 32) + "-";
  fs::directory_iterator it(dir_, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, kSuffix)) continue;
    std::optional<Entry> e = ReadHeaderOf(it->path().string());
    if (!e.has_value() || e->key.module != key.module) continue;
    for (const Part& p : kParts) {
      if (e->key.*p.member != OneLine(key.*p.member)) {
        out.reason = p.reason;
        out.explanation = absl::StrCat(p.what, " differed: cached '", Shorten(e->key.*p.member),
                                       "', now '", Shorten(OneLine(key.*p.member)), "'");
        return out;
      }
    }
  }
  return out;
}

absl::Status PersistentCache::Store(const PersistentKey& key, const std::string& artifact) {
  const std::string header = Header(key, artifact);
  if (static_cast<int64_t>(header.size() + artifact.size()) > max_bytes_) return absl::OkStatus();
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(dir_, "/.tmp-", getpid(), "-", counter++, "-",
                                       key.Digest().substr(0, 8));
  // Entries hold programs with their constants (model weights): for this
  // user only.
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  const bool ok = WriteAll(fd, header) && WriteAll(fd, artifact) && fsync(fd) == 0;
  const int saved_errno = errno;
  close(fd);
  // rename() replaces atomically: a reader sees the old entry or the new.
  if (!ok || rename(tmp.c_str(), PathOf(key).c_str()) != 0) {
    const int e = ok ? errno : saved_errno;
    unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write the cache entry in ", dir_, ": ", std::strerror(e)));
  }
  Evict();
  return absl::OkStatus();
}

void PersistentCache::Evict() {
  struct File {
    fs::path path;
    int64_t bytes;
    fs::file_time_type used;
  };
  std::vector<File> files;
  int64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  fs::directory_iterator it(dir_, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& f = *it;
    std::error_code fe;
    const std::string name = f.path().filename().string();
    const auto used = f.last_write_time(fe);
    if (fe) continue;
    // A temporary file an hour old belongs to a writer that died.
    if (absl::StartsWith(name, ".tmp-")) {
      if (now - used > std::chrono::hours(1)) fs::remove(f.path(), fe);
      continue;
    }
    if (!absl::EndsWith(name, kSuffix)) continue;
    const auto size = f.file_size(fe);
    if (fe) continue;
    files.push_back({f.path(), static_cast<int64_t>(size), used});
    total += static_cast<int64_t>(size);
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.used < b.used; });
  for (const File& f : files) {
    if (total <= max_bytes_) break;
    std::error_code fe;
    fs::remove(f.path, fe);  // another server may have removed it first
    total -= f.bytes;
  }
  absl::MutexLock lock(&mu_);
  bytes_ = total;
}

}  // namespace kiln::server
