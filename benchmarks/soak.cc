// Soak: many training clients, each its own process, against one
// kiln-server; a quarter of them are killed with SIGKILL mid-run, and the
// server must give back what they held once their leases run out.
//
//   soak_benchmark [--clients=64] [--steps=1000] [--lease_seconds=3]
//                  [--time_limit_seconds=300] [--rounds=1] [--warmup_steps=20]
//
// The driver starts kiln-server and runs this same binary once per client
// in worker mode (--worker, benchmarks/soak_worker.h). Each worker trains a
// small MLP on random batches: every step uploads a batch, executes the
// cached step program and reads the loss back. A warm-up round of the same
// clients (a few steps each, none killed) comes first. The driver reports
// errors (goal 0), the server's RSS before the warm-up (cold), after it
// (start), at its peak and at the end (goal: end within 10% of start), and
// what the server still holds after the killed clients' leases, buffers
// and host memory (goal: nothing). With --rounds=N the same server serves N such
// rounds, and its RSS after each shows whether memory keeps growing. The
// program exits 1 when a client saw an error, the server did not stop
// cleanly, or memory or sessions stayed behind.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "benchmarks/soak_worker.h"
#include "client/client.h"

ABSL_FLAG(int, clients, 64, "client processes, each with its own session");
ABSL_FLAG(int, steps, 1000, "training steps per client");
ABSL_FLAG(int, kill, -1,
          "clients killed with SIGKILL mid-run; -1: a quarter of --clients");
ABSL_FLAG(int64_t, lease_seconds, 3,
          "the server's lease (--lease_seconds of kiln-server)");
ABSL_FLAG(int64_t, time_limit_seconds, 300,
          "clients stop after this long even if their steps are not done");
ABSL_FLAG(int, rounds, 1,
          "runs of all the clients against the same server; RSS after each "
          "round shows whether memory grows with use or stays at a plateau");
ABSL_FLAG(int64_t, progress_seconds, 5, "print a progress line this often");
ABSL_FLAG(int, warmup_steps, 20,
          "steps of every client, none killed, before the start RSS is taken: "
          "the start then counts what a server has paged in and set up to "
          "serve that many clients at once (code, threads, arenas), and the "
          "run shows whether anything grows past it (the RSS before the "
          "warm-up is printed too); 0: none");
ABSL_FLAG(std::string, server_binary, "",
          "kiln-server to start; empty: the one beside this program");
ABSL_FLAG(std::string, server_log, "",
          "write kiln-server's log here at level info (sessions opened and "
          "reaped); empty: warnings and errors to this program's stderr");
ABSL_FLAG(bool, worker, false, "run as one client (the driver starts these)");
ABSL_FLAG(std::string, server, "", "worker: the server's address");
ABSL_FLAG(uint64_t, seed, 1, "worker: seed of its weights and batches");

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A child process whose stdout the driver reads line by line.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string pending;  // bytes after the last full line
};

// Starts `argv` with stdout on a non-blocking pipe and stderr to
// `stderr_path` (empty: inherited); the child dies with the driver.
// Everything the child needs is prepared before the fork: the driver has
// gRPC threads, and the child may only make system calls until it execs.
absl::StatusOr<Child> Spawn(const std::vector<std::string>& argv,
                            const std::string& stderr_path = "") {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log = -1;
  if (!stderr_path.empty()) {
    log = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
               0644);
    if (log < 0)
      return absl::InternalError(absl::StrCat("cannot open ", stderr_path));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    if (log >= 0) dup2(log, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  if (log >= 0) close(log);
  if (pid < 0) {
    close(fds[0]);
    return absl::InternalError("fork failed");
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return Child{pid, fds[0], ""};
}

// Appends the complete lines `child` has written so far to `lines`;
// returns false at end of file.
bool ReadLines(Child& child, std::vector<std::string>* lines) {
  char buf[4096];
  while (true) {
    const ssize_t n = read(child.fd, buf, sizeof(buf));
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    child.pending.append(buf, n);
    size_t newline;
    while ((newline = child.pending.find('\n')) != std::string::npos) {
      lines->push_back(child.pending.substr(0, newline));
      child.pending.erase(0, newline + 1);
    }
  }
}

// The resident set of `pid` (VmRSS), or another field of its
// /proc/PID/status counted in kB (VmHWM: the peak), in bytes; -1 when the
// process is gone.
int64_t ReadRss(pid_t pid, const char* field = "VmRSS:") {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, field)) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    int64_t kib = 0;
    if (absl::SimpleAtoi(digits, &kib)) return kib * 1024;
  }
  return -1;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string WaitStatus(int status) {
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return absl::StrCat("exit ", WEXITSTATUS(status));
}

// The kiln-server under test. Not thread-safe.
class ServerUnderTest {
 public:
  // Starts `binary` on a free loopback port and waits for its address.
  static absl::StatusOr<std::unique_ptr<ServerUnderTest>> Start(
      const std::string& binary, int64_t lease_seconds,
      const std::string& log_path) {
    ASSIGN_OR_RETURN(
        Child child,
        Spawn({binary, "--listen=127.0.0.1:0",
               absl::StrCat("--lease_seconds=", lease_seconds),
               log_path.empty() ? "--log_level=warn" : "--log_level=info"},
              log_path));
    auto server =
        std::unique_ptr<ServerUnderTest>(new ServerUnderTest(std::move(child)));
    std::vector<std::string> lines;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (lines.empty() && Clock::now() < deadline) {
      pollfd p{server->child_.fd, POLLIN, 0};
      poll(&p, 1, 100);
      if (!ReadLines(server->child_, &lines)) break;
    }
    if (lines.empty() || !absl::StartsWith(lines.front(), "listening on ")) {
      return absl::UnavailableError(absl::StrCat(binary, " did not start"));
    }
    server->address_ = lines.front().substr(13);
    return server;
  }
  ~ServerUnderTest() { Stop(); }

  const std::string& address() const { return address_; }
  pid_t pid() const { return child_.pid; }
  int64_t Rss() const { return ReadRss(child_.pid); }
  // The part of the RSS that no file backs (heap, stacks).
  int64_t AnonymousRss() const { return ReadRss(child_.pid, "RssAnon:"); }
  int64_t PeakRss() const { return ReadRss(child_.pid, "VmHWM:"); }
  int64_t Threads() const { return ReadRss(child_.pid, "Threads:") / 1024; }
  // The wait status if the server has ended (before Stop), else nullopt.
  std::optional<int> Ended() {
    int status = 0;
    if (!ended_ && waitpid(child_.pid, &status, WNOHANG) == child_.pid)
      ended_ = status;
    return ended_;
  }
  // SIGTERM, then SIGKILL after 15 s; returns the wait status, or the one
  // it ended with by itself.
  int Stop() {
    if (stopped_) return *ended_;
    stopped_ = true;
    if (!Ended()) {
      kill(child_.pid, SIGTERM);
      for (int waited = 0; waited < 15000 && !Ended(); waited += 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!Ended()) {
        kill(child_.pid, SIGKILL);
        int status = 0;
        waitpid(child_.pid, &status, 0);
        ended_ = status;
      }
    }
    close(child_.fd);
    return *ended_;
  }

 private:
  explicit ServerUnderTest(Child child) : child_(std::move(child)) {}
  Child child_;
  std::string address_;
  std::optional<int> ended_;
  bool stopped_ = false;
};

// What the server holds, as a client of its own sees it.
struct Holdings {
  int64_t bytes = 0;       // charged to buffers, all devices
  int64_t buffers = 0;     // live buffers, all devices
  int64_t host_bytes = 0;  // host memory charged to sessions (feeds, replies)
  int64_t sessions = 0;    // open sessions, the observer's own excluded

  bool Empty() const { return bytes == 0 && host_bytes == 0 && sessions == 0; }
};

absl::StatusOr<Holdings> ReadHoldings(kiln::client::Client& observer) {
  Holdings h;
  for (const kiln::client::DeviceDescription& d : observer.devices()) {
    ASSIGN_OR_RETURN(kiln::v1::MemoryInfoResponse info,
                     observer.MemoryInfo(d.name));
    h.bytes += info.bytes_in_use();
    h.buffers += info.live_buffers();
  }
  ASSIGN_OR_RETURN(kiln::v1::MetricsResponse metrics, observer.Metrics());
  for (const kiln::v1::CounterProto& c : metrics.counters()) {
    if (c.name() == "sessions_live") h.sessions = c.value() - 1;
    if (c.name() == "sessions_host_bytes") h.host_bytes = c.value();
  }
  return h;
}

struct Worker {
  Child child;
  int steps = 0;
  bool connected = false;
  bool exited = false;
  bool killed = false;
  bool reported_done = false;
  int exit_status = 0;
  std::vector<std::string> errors;
};

struct RoundOptions {
  std::string self;  // this program, started in worker mode
  int clients = 0;
  int steps = 0;
  int to_kill = 0;
  int64_t lease_seconds = 0;
  int64_t time_limit_seconds = 0;
  int64_t progress_seconds = 0;
};

struct RoundResult {
  int64_t steps = 0;          // all clients
  int64_t steps_at_kill = 0;  // all clients, when the victims were killed
  int64_t survivor_steps = 0;
  int survivors = 0;
  int killed = 0;
  int64_t errors = 0;
  int failed_clients = 0;
  int hung = 0;
  std::string first_error;
  double clients_seconds = 0;  // first start to last exit
  double kill_at_seconds = 0;  // from the first start
  // From the kill until the victims' sessions were gone; -1: not seen.
  double reaped_seconds = -1;
  int64_t rss_peak = 0;                         // sampled
  int64_t charged_peak = 0;                     // sampled
  absl::StatusOr<Holdings> after = Holdings{};  // after the leases
  int64_t rss_end = 0;
  int64_t anonymous_end = 0;
};

// Reads what `w` wrote; reaps it at end of file.
void Drain(Worker& w) {
  std::vector<std::string> lines;
  const bool open = ReadLines(w.child, &lines);
  for (const std::string& line : lines) {
    int n = 0;
    if (absl::StartsWith(line, "session ")) {
      w.connected = true;
    } else if (absl::StartsWith(line, "progress ") &&
               absl::SimpleAtoi(line.substr(9), &n)) {
      w.steps = n;
    } else if (absl::StartsWith(line, "done ") &&
               absl::SimpleAtoi(line.substr(5), &n)) {
      w.steps = n;
      w.reported_done = true;
    } else if (absl::StartsWith(line, "error ")) {
      w.errors.push_back(line.substr(6));
    }
  }
  if (!open) {
    waitpid(w.child.pid, &w.exit_status, 0);
    close(w.child.fd);
    w.exited = true;
  }
}

// One round: starts the clients, kills the victims when half the steps are
// done (or half the time limit has passed), waits for the rest and for the
// victims' leases, and reads what the server still holds.
RoundResult RunRound(const RoundOptions& o, ServerUnderTest& server,
                     kiln::client::Client& observer) {
  RoundResult r;
  r.rss_peak = server.Rss();
  const auto start = Clock::now();
  std::vector<Worker> workers(o.clients);
  for (int i = 0; i < o.clients; ++i) {
    absl::StatusOr<Child> child = Spawn(
        {o.self, "--worker", absl::StrCat("--server=", server.address()),
         absl::StrCat("--steps=", o.steps), absl::StrCat("--seed=", i + 1),
         absl::StrCat("--time_limit_seconds=", o.time_limit_seconds)});
    if (!child.ok()) {
      workers[i].exited = true;
      workers[i].errors.push_back(child.status().ToString());
      continue;
    }
    workers[i].child = *std::move(child);
  }
  // The last of every four clients, then the others from the end.
  std::vector<int> victims;
  for (int i = o.clients - 1;
       i >= 0 && static_cast<int>(victims.size()) < o.to_kill; i -= 4) {
    victims.push_back(i);
  }
  for (int i = o.clients - 1; static_cast<int>(victims.size()) < o.to_kill;
       --i) {
    if (std::find(victims.begin(), victims.end(), i) == victims.end())
      victims.push_back(i);
  }

  const int64_t planned = static_cast<int64_t>(o.clients) * o.steps;
  const double hard_limit = static_cast<double>(o.time_limit_seconds) + 60;
  bool kills_done = o.to_kill == 0;
  auto kill_time = Clock::now();
  auto last_progress = Clock::now();
  auto last_holdings = Clock::now() - std::chrono::seconds(10);
  auto count = [&](auto pred) {
    int n = 0;
    for (const Worker& w : workers) n += pred(w) ? 1 : 0;
    return n;
  };
  auto total_steps = [&]() {
    int64_t total = 0;
    for (const Worker& w : workers) total += w.steps;
    return total;
  };
  while (count([](const Worker& w) { return !w.exited; }) > 0) {
    std::vector<pollfd> fds;
    std::vector<int> index;
    for (int i = 0; i < o.clients; ++i) {
      if (workers[i].exited) continue;
      fds.push_back(pollfd{workers[i].child.fd, POLLIN, 0});
      index.push_back(i);
    }
    poll(fds.data(), fds.size(), 100);
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents != 0) Drain(workers[index[k]]);
    }
    if (std::optional<int> ended = server.Ended();
        ended && r.first_error.empty()) {
      r.first_error = absl::StrCat("kiln-server ended during the run (",
                                   WaitStatus(*ended), ")");
      std::printf("soak: %.1f s: %s\n", Since(start), r.first_error.c_str());
      std::fflush(stdout);
    }
    r.rss_peak = std::max(r.rss_peak, server.Rss());
    const int64_t done = total_steps();
    if (!kills_done &&
        (done * 2 >= planned || Since(start) * 2 >= o.time_limit_seconds)) {
      for (int i : victims) {
        if (workers[i].exited) continue;
        kill(workers[i].child.pid, SIGKILL);
        workers[i].killed = true;
        ++r.killed;
      }
      kills_done = true;
      kill_time = Clock::now();
      r.kill_at_seconds = Since(start);
      r.steps_at_kill = done;
      std::printf(
          "soak: %.1f s: killed %d clients with SIGKILL at %ld of %ld steps\n",
          r.kill_at_seconds, r.killed, static_cast<long>(done),
          static_cast<long>(planned));
      std::fflush(stdout);
    }
    // Every second; every 100 ms while the victims' sessions are awaited.
    const bool awaiting_reap = r.killed > 0 && r.reaped_seconds < 0;
    if (Since(last_holdings) >= (awaiting_reap ? 0.1 : 1.0)) {
      last_holdings = Clock::now();
      if (auto h = ReadHoldings(observer); h.ok()) {
        r.charged_peak = std::max(r.charged_peak, h->bytes);
        // A survivor's session is open from its "session" line to its
        // "done" line and may be closing from then to its exit. While none
        // is closing, any session beyond the open ones is a victim's.
        const int closing = count([](const Worker& w) {
          return !w.killed && w.reported_done && !w.exited;
        });
        const int open = count([](const Worker& w) {
          return !w.killed && w.connected && !w.reported_done && !w.exited;
        });
        if (awaiting_reap && closing == 0 && h->sessions <= open) {
          r.reaped_seconds = Since(kill_time);
        }
      }
    }
    if (Since(last_progress) >= o.progress_seconds) {
      std::printf(
          "soak: %.1f s: %ld steps, %d clients running, server RSS %.1f MiB\n",
          Since(start), static_cast<long>(done),
          count([](const Worker& w) { return !w.exited; }), MiB(server.Rss()));
      std::fflush(stdout);
      last_progress = Clock::now();
    }
    if (Since(start) > hard_limit) {
      for (Worker& w : workers) {
        if (w.exited) continue;
        kill(w.child.pid, SIGKILL);
        waitpid(w.child.pid, &w.exit_status, 0);
        close(w.child.fd);
        w.exited = true;
        w.errors.push_back("did not finish within the time limit and a minute");
        ++r.hung;
      }
    }
  }
  r.clients_seconds = Since(start);
  r.steps = total_steps();

  // Errors: what the survivors reported, and survivors that ended badly.
  for (const Worker& w : workers) {
    if (w.killed) continue;
    ++r.survivors;
    r.survivor_steps += w.steps;
    int64_t e = static_cast<int64_t>(w.errors.size());
    const bool clean =
        WIFEXITED(w.exit_status) && WEXITSTATUS(w.exit_status) == 0;
    if (e == 0 && (!clean || !w.reported_done)) e = 1;
    if (e == 0) continue;
    ++r.failed_clients;
    r.errors += e;
    if (r.first_error.empty()) {
      r.first_error = w.errors.empty() ? absl::StrCat("a client ended with ",
                                                      WaitStatus(w.exit_status))
                                       : w.errors.front();
    }
  }
  if (server.Ended()) ++r.errors;

  // Waits for the victims' leases (the reaper runs every quarter lease, at
  // most every second), then for the server to hold nothing, within two
  // leases and ten seconds of the kill.
  std::this_thread::sleep_until(std::max(
      Clock::now(), kill_time + std::chrono::seconds(o.lease_seconds)));
  const auto give_up =
      kill_time + std::chrono::seconds(2 * o.lease_seconds + 10);
  r.after = ReadHoldings(observer);
  while (r.after.ok() && !r.after->Empty() && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    r.after = ReadHoldings(observer);
  }
  // Every survivor has closed its session: what is left were the victims'.
  if (r.killed > 0 && r.reaped_seconds < 0 && r.after.ok() &&
      r.after->sessions == 0) {
    r.reaped_seconds = Since(kill_time);
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  r.rss_end = server.Rss();
  r.anonymous_end = server.AnonymousRss();
  if (r.after.ok()) r.after = ReadHoldings(observer);
  return r;
}

std::string SelfPath() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

int RunDriver() {
  kiln::logging::SetLevel("warn").IgnoreError();
  RoundOptions o;
  o.self = SelfPath();
  o.clients = absl::GetFlag(FLAGS_clients);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.to_kill =
      absl::GetFlag(FLAGS_kill) < 0 ? o.clients / 4 : absl::GetFlag(FLAGS_kill);
  o.lease_seconds = absl::GetFlag(FLAGS_lease_seconds);
  o.time_limit_seconds = absl::GetFlag(FLAGS_time_limit_seconds);
  o.progress_seconds = absl::GetFlag(FLAGS_progress_seconds);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (o.clients < 1 || o.steps < 1 || o.to_kill > o.clients ||
      o.lease_seconds < 1 || rounds < 1) {
    std::fprintf(stderr,
                 "soak_benchmark: need --clients >= 1, --steps >= 1, --kill <= "
                 "--clients, --lease_seconds >= 1, --rounds >= 1\n");
    return 2;
  }
  std::string binary = absl::GetFlag(FLAGS_server_binary);
  if (binary.empty())
    binary =
        (std::filesystem::path(o.self).parent_path() / "kiln-server").string();
  const auto run_start = Clock::now();
  auto server = ServerUnderTest::Start(binary, o.lease_seconds,
                                       absl::GetFlag(FLAGS_server_log));
  if (!server.ok()) {
    std::fprintf(stderr, "soak_benchmark: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  auto observer = kiln::client::Client::Connect((*server)->address());
  if (!observer.ok()) {
    std::fprintf(stderr, "soak_benchmark: %s\n",
                 observer.status().ToString().c_str());
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t rss_cold = (*server)->Rss();
  std::printf(
      "soak: kiln-server %s (pid %d), lease %ld s, RSS %.1f MiB; %d round(s) "
      "of %d clients x %d steps, %d killed per round, time limit %ld s\n",
      (*server)->address().c_str(), (*server)->pid(),
      static_cast<long>(o.lease_seconds), MiB(rss_cold), rounds, o.clients,
      o.steps, o.to_kill, static_cast<long>(o.time_limit_seconds));
  std::fflush(stdout);
  // A short round of the same clients first: the start RSS then counts
  // what a server has paged in and set up to serve them at once (the
  // compiler and kernels, the serving threads, the allocator's arenas), and
  // the end is compared with a server that has served the same load.
  if (const int warmup = absl::GetFlag(FLAGS_warmup_steps); warmup > 0) {
    RoundOptions w = o;
    w.steps = warmup;
    w.to_kill = 0;
    const RoundResult r = RunRound(w, **server, **observer);
    if (r.errors != 0 || !r.after.ok() || !r.after->Empty()) {
      std::fprintf(stderr, "soak_benchmark: the warm-up round failed: %s\n",
                   r.first_error.c_str());
      return 1;
    }
    std::printf("soak: warm-up: %d clients x %d steps, none killed; server RSS %.1f MiB\n",
                w.clients, warmup, MiB((*server)->Rss()));
  }
  const int64_t rss_start = (*server)->Rss();
  const int64_t anonymous_start = (*server)->AnonymousRss();
  const int64_t threads_start = (*server)->Threads();

  int64_t errors = 0, rss_peak = rss_start, first_round_end = 0;
  bool holds_nothing = true;
  RoundResult last;
  for (int round = 1; round <= rounds; ++round) {
    RoundResult r = RunRound(o, **server, **observer);
    errors += r.errors;
    rss_peak = std::max(rss_peak, r.rss_peak);
    if (round == 1) first_round_end = r.rss_end;
    const std::string tag =
        rounds > 1 ? absl::StrCat("soak: round ", round, ": ") : "soak: ";
    std::printf(
        "%s%d clients, %d killed with SIGKILL at %.1f s (%ld of %ld steps); "
        "%ld steps in %.1f s; survivors %ld of %ld steps\n",
        tag.c_str(), o.clients, r.killed, r.kill_at_seconds,
        static_cast<long>(r.steps_at_kill),
        static_cast<long>(o.clients) * o.steps, static_cast<long>(r.steps),
        r.clients_seconds, static_cast<long>(r.survivor_steps),
        static_cast<long>(r.survivors) * o.steps);
    std::printf(
        "%serrors %ld (in %d clients%s)%s%s\n", tag.c_str(),
        static_cast<long>(r.errors), r.failed_clients,
        r.hung > 0 ? absl::StrCat(", ", r.hung, " hung").c_str() : "",
        r.first_error.empty() ? "" : "; first: ", r.first_error.c_str());
    if (r.after.ok()) {
      std::printf(
          "%safter the leases: %ld bytes charged in %ld buffers, %ld bytes of "
          "host memory, %ld sessions open (peak charged %.2f MiB%s)\n",
          tag.c_str(), static_cast<long>(r.after->bytes),
          static_cast<long>(r.after->buffers), static_cast<long>(r.after->host_bytes),
          static_cast<long>(r.after->sessions), MiB(r.charged_peak),
          r.reaped_seconds < 0
              ? ""
              : absl::StrFormat("; killed sessions gone %.1f s after the kill",
                                r.reaped_seconds)
                    .c_str());
    } else {
      std::printf("%safter the leases: cannot read the server: %s\n",
                  tag.c_str(), r.after.status().ToString().c_str());
    }
    std::printf(
        "%sserver RSS peak %.1f MiB, end %.1f MiB (anonymous %.1f MiB)\n",
        tag.c_str(), MiB(r.rss_peak), MiB(r.rss_end), MiB(r.anonymous_end));
    std::fflush(stdout);
    holds_nothing = holds_nothing && r.after.ok() && r.after->Empty();
    last = std::move(r);
    if ((*server)->Ended()) break;
  }
  rss_peak = std::max(rss_peak, (*server)->PeakRss());
  std::printf("soak: server threads at start %ld, at end %ld\n", static_cast<long>(threads_start),
              static_cast<long>((*server)->Threads()));
  observer->reset();
  const bool died = (*server)->Ended().has_value();
  const int server_status = (*server)->Stop();
  const bool clean =
      !died && WIFEXITED(server_status) && WEXITSTATUS(server_status) == 0;

  const double ratio =
      static_cast<double>(last.rss_end) / static_cast<double>(rss_start);
  std::printf(
      "soak: server RSS cold %.1f MiB, start %.1f MiB (anonymous %.1f), peak "
      "%.1f MiB, end %.1f MiB (anonymous %.1f), end/start %.3f, end/cold %.3f",
      MiB(rss_cold), MiB(rss_start), MiB(anonymous_start), MiB(rss_peak),
      MiB(last.rss_end), MiB(last.anonymous_end), ratio,
      static_cast<double>(last.rss_end) / static_cast<double>(rss_cold));
  if (rounds > 1) {
    std::printf(", end/end of round 1 %.3f",
                static_cast<double>(last.rss_end) /
                    static_cast<double>(first_round_end));
  }
  std::printf(
      "\nsoak: kiln-server %s; wall %.1f s\n",
      died ? "ended during the run"
      : clean
          ? "stopped cleanly (SIGTERM, exit 0)"
          : absl::StrCat("stopped with ", WaitStatus(server_status)).c_str(),
      Since(run_start));
  std::printf(
      "soak: goals: errors 0 %s; end RSS within 10%% of start %s; nothing "
      "charged after the leases %s\n",
      errors == 0 ? "met" : "NOT met",
      std::abs(ratio - 1) <= 0.10 ? "met" : "NOT met",
      holds_nothing ? "met" : "NOT met");
  return errors == 0 && holds_nothing && clean ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  kiln::ParseFlags(argc, argv,
                   "soak_benchmark: many client processes against one "
                   "kiln-server, a quarter of them killed mid-run; reports "
                   "errors, the server's RSS and what it still holds after the "
                   "leases. Usage: soak_benchmark [--flag=value ...]");
  if (absl::GetFlag(FLAGS_worker)) {
    kiln::bench::SoakWorkerOptions options;
    options.server = absl::GetFlag(FLAGS_server);
    options.steps = absl::GetFlag(FLAGS_steps);
    options.time_limit_seconds =
        static_cast<double>(absl::GetFlag(FLAGS_time_limit_seconds));
    options.seed = absl::GetFlag(FLAGS_seed);
    return kiln::bench::RunSoakWorker(options);
  }
  return RunDriver();
}
