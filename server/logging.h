// Kiln's one logging header: spdlog behind a few functions, level set once at
// start-up from a flag or the KILN_LOG_LEVEL environment variable.
#ifndef KILN_SERVER_LOGGING_H_
#define KILN_SERVER_LOGGING_H_

#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace kiln::logging {

// Levels: trace, debug, info, warn, error, off. Unknown names are an error.
absl::Status SetLevel(const std::string& level);

template <typename... Args>
void Info(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  spdlog::info(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void Warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  spdlog::warn(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void Debug(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  spdlog::debug(fmt, std::forward<Args>(args)...);
}

}  // namespace kiln::logging

#endif  // KILN_SERVER_LOGGING_H_
