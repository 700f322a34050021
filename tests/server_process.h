// Starts a real kiln-server on a free loopback port for a test and stops it
// (SIGTERM, then SIGKILL if it does not exit) when the object goes away.
#ifndef KILN_TESTS_SERVER_PROCESS_H_
#define KILN_TESTS_SERVER_PROCESS_H_

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace kiln::testing {

// Spawns `argv` with stdout on a pipe; returns the pid (or -1). The child
// is killed when the thread that spawned it ends, so that a test that dies
// abruptly (a crash, a sanitizer stopping it) leaves no server behind
// holding its output open.
inline pid_t SpawnWithStdout(const std::vector<std::string>& argv, int* stdout_fd) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent is already gone
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  *stdout_fd = fds[0];
  return pid;
}

// Reads one line from `fd`, waiting at most `timeout_ms`.
inline bool ReadLine(int fd, std::string* line, int timeout_ms) {
  line->clear();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char c;
    if (read(fd, &c, 1) != 1) return false;
    if (c == '\n') return true;
    *line += c;
  }
  return false;
}

// Sends `sig`, waits up to `timeout_ms` for exit; SIGKILL after that.
// Returns the exit status as waitpid reports it.
inline int StopProcess(pid_t pid, int sig, int timeout_ms) {
  kill(pid, sig);
  int status = 0;
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> flags = {}) {
    std::vector<std::string> argv = {std::string(KILN_BIN_DIR) + "/kiln-server",
                                     "--listen=127.0.0.1:0", "--log_level=warn"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    pid_ = SpawnWithStdout(argv, &stdout_fd_);
    std::string line;
    if (pid_ > 0 && ReadLine(stdout_fd_, &line, 30000) && line.rfind("listening on ", 0) == 0) {
      address_ = line.substr(13);
    }
  }
  ~ServerProcess() { Stop(); }

  // Empty when the server did not start.
  const std::string& address() const { return address_; }
  // The next line the server prints after "listening on" (empty if none
  // comes within `timeout_ms`).
  std::string NextLine(int timeout_ms = 10000) {
    std::string line;
    return ReadLine(stdout_fd_, &line, timeout_ms) ? line : std::string();
  }
  pid_t pid() const { return pid_; }

  // SIGTERM and wait; returns the exit code (-1 when it died by a signal).
  int Stop() {
    if (pid_ <= 0) return exit_code_;
    int status = StopProcess(pid_, SIGTERM, 10000);
    pid_ = -1;
    close(stdout_fd_);
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string address_;
  int exit_code_ = -1;
};

}  // namespace kiln::testing

#endif  // KILN_TESTS_SERVER_PROCESS_H_
