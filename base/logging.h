// Kiln's one logging header: spdlog behind a few functions. Logs go to
// stderr. The level comes from the KILN_LOG_LEVEL environment variable
// (default info) unless SetLevel is called.
#ifndef KILN_BASE_LOGGING_H_
#define KILN_BASE_LOGGING_H_

#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace kiln::logging {

// The process-wide logger, created on first use.
spdlog::logger& Logger();

// Levels: trace, debug, info, warn, error, off. Unknown names are an error.
absl::Status SetLevel(const std::string& level);
// "text" (the default) or "json": one JSON object per line with time (UTC),
// level, thread and message.
absl::Status SetFormat(const std::string& format);

template <typename... Args>
void Info(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  Logger().info(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void Warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  Logger().warn(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void Error(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  Logger().error(fmt, std::forward<Args>(args)...);
}
template <typename... Args>
void Debug(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  Logger().debug(fmt, std::forward<Args>(args)...);
}

}  // namespace kiln::logging

#endif  // KILN_BASE_LOGGING_H_
