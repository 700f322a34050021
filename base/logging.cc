#include "base/logging.h"

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"
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

namespace {

void Append(spdlog::memory_buf_t& dest, const char* text) {
  dest.append(text, text + std::strlen(text));
}

// The message as the inside of a JSON string.
class JsonMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (char c : msg.payload) {
      switch (c) {
        case '"': Append(dest, "\\\""); break;
        case '\\': Append(dest, "\\\\"); break;
        case '\n': Append(dest, "\\n"); break;
        case '\r': Append(dest, "\\r"); break;
        case '\t': Append(dest, "\\t"); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            Append(dest, buf);
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessage>();
  }
};

}  // namespace

absl::Status SetFormat(const std::string& format) {
  if (format == "text") {
    Logger().set_formatter(std::make_unique<spdlog::pattern_formatter>());
    return absl::OkStatus();
  }
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","thread":%t,"message":"%*"})");
    Logger().set_formatter(std::move(formatter));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log format '", format, "' (text or json)"));
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
