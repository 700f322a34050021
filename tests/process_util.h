// Running a binary of build/bin and capturing what it prints.
#ifndef KILN_TESTS_PROCESS_UTIL_H_
#define KILN_TESTS_PROCESS_UTIL_H_

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kiln::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string output;  // stdout and stderr together
};

// Runs `command` (any shell command line: variables before a program,
// pipes, `&&`) with a time limit on the whole of it (the timeout tool ends a
// hang, which then reads as exit code 124).
inline ProcessResult RunCommand(const std::string& command, int timeout_seconds = 120) {
  ProcessResult result;
  std::string quoted;  // for sh -c '...'
  for (char c : command) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  std::string full = "timeout " + std::to_string(timeout_seconds) + " sh -c '" + quoted + "' 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  int status = pclose(pipe);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

inline std::string KilnBinary() { return std::string(KILN_BIN_DIR) + "/kiln"; }

}  // namespace kiln::testing

#endif  // KILN_TESTS_PROCESS_UTIL_H_
