#include "base/logging.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace kiln::logging {

spdlog::logger& Logger() {
  static spdlog::logger* const logger = [] {
    auto l = spdlog::stderr_color_mt("kiln");
    const char* env = std::getenv("KILN_LOG_LEVEL");
    spdlog::level::level_enum level = spdlog::level::info;
    if (env != nullptr) {
      spdlog::level::level_enum parsed = spdlog::level::from_str(env);
      if (parsed != spdlog::level::off || std::string(env) == "off") level = parsed;
    }
    l->set_level(level);
    return l.get();
  }();
  return *logger;
}

absl::Status SetLevel(const std::string& level) {
  spdlog::level::level_enum l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat("unknown log level '", level, "'"));
  }
  Logger().set_level(l);
  return absl::OkStatus();
}

}  // namespace kiln::logging
