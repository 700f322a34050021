// A small JSON reader for the configuration strings other systems put in
// the modules Kiln reads (XLA's backend_config). Input may come from
// clients: nesting and size are bounded, and every error says where.
#ifndef KILN_BASE_JSON_H_
#define KILN_BASE_JSON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool is_object() const { return kind_ == Kind::kObject; }

  // The value as that kind; nullopt (or null) when it is another.
  std::optional<bool> AsBool() const;
  // A number, or a string protobuf's JSON writes for one ("NaN",
  // "Infinity", "-Infinity", "1.5").
  std::optional<double> AsNumber() const;
  // A number, or a string holding one ("1": protobuf's JSON writes 64-bit
  // integers as strings), that is a whole number.
  std::optional<int64_t> AsInt() const;
  const std::string* AsString() const;
  const std::vector<JsonValue>* AsArray() const;
  // An object's member `key`; null when absent or not an object.
  const JsonValue* Find(absl::string_view key) const;
  const std::map<std::string, JsonValue, std::less<>>* AsObject() const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::map<std::string, JsonValue, std::less<>> object_;
};

// Reads one JSON value (RFC 8259) filling all of `text` but whitespace.
// InvalidArgument naming the offset of the first error; nesting deeper than
// kMaxJsonDepth and texts over kMaxJsonBytes are refused.
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonBytes = size_t{256} << 10;
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace kiln

#endif  // KILN_BASE_JSON_H_
