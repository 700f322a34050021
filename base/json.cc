#include "base/json.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {

std::optional<bool> JsonValue::AsBool() const {
  if (kind_ != Kind::kBool) return std::nullopt;
  return bool_;
}

std::optional<double> JsonValue::AsNumber() const {
  if (kind_ == Kind::kString) {
    if (string_ == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (string_ == "Infinity") return std::numeric_limits<double>::infinity();
    if (string_ == "-Infinity") return -std::numeric_limits<double>::infinity();
    double v = 0;
    if (absl::SimpleAtod(string_, &v)) return v;
    return std::nullopt;
  }
  if (kind_ != Kind::kNumber) return std::nullopt;
  return number_;
}

std::optional<int64_t> JsonValue::AsInt() const {
  if (kind_ == Kind::kString) {
    int64_t v = 0;
    if (absl::SimpleAtoi(string_, &v)) return v;
    return std::nullopt;
  }
  if (kind_ != Kind::kNumber || std::floor(number_) != number_ || std::fabs(number_) > 9.0e15) {
    return std::nullopt;
  }
  return static_cast<int64_t>(number_);
}

const std::string* JsonValue::AsString() const {
  return kind_ == Kind::kString ? &string_ : nullptr;
}

const std::vector<JsonValue>* JsonValue::AsArray() const {
  return kind_ == Kind::kArray ? &array_ : nullptr;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  if (kind_ != Kind::kObject) return nullptr;
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &it->second;
}

const std::map<std::string, JsonValue, std::less<>>* JsonValue::AsObject() const {
  return kind_ == Kind::kObject ? &object_ : nullptr;
}

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseAll() {
    JsonValue v;
    if (absl::Status st = Value(v, 0); !st.ok()) return st;
    SkipSpace();
    if (pos_ != text_.size()) return Error("text after the value");
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON at offset ", pos_, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status Value(JsonValue& out, int depth) {
    if (depth > kMaxJsonDepth) return Error("nested too deep");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("a value is missing");
    const char c = text_[pos_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out.kind_ = JsonValue::Kind::kString;
      return String(out.string_);
    }
    if (Consume("true") || Consume("false")) {
      out.kind_ = JsonValue::Kind::kBool;
      out.bool_ = text_[pos_ - 1] == 'e' && text_[pos_ - 2] == 'u';
      return absl::OkStatus();
    }
    if (Consume("null")) {
      out.kind_ = JsonValue::Kind::kNull;
      return absl::OkStatus();
    }
    return Number(out);
  }

  absl::Status Number(JsonValue& out) {
    const size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && absl::ascii_isdigit(text_[pos_])) ++pos_;
      return pos_ > from;
    };
    if (!digits()) return Error("not a value");
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Error("a number without digits after its point");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) return Error("a number without digits in its exponent");
    }
    const std::string number(text_.substr(start, pos_ - start));
    out.kind_ = JsonValue::Kind::kNumber;
    out.number_ = std::strtod(number.c_str(), nullptr);
    return absl::OkStatus();
  }

  absl::Status String(std::string& out) {
    ++pos_;  // the opening quote
    while (true) {
      if (pos_ >= text_.size()) return Error("an unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) return Error("a control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return Error("an unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out.push_back(e); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return Error("a short \\u escape");
          uint32_t code = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = text_[pos_++];
            code <<= 4;
            if (h >= '0' && h <= '9') code |= h - '0';
            else if (h >= 'a' && h <= 'f') code |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F') code |= h - 'A' + 10;
            else return Error("a bad \\u escape");
          }
          // UTF-8 of the code unit (surrogates kept as they are).
          if (code < 0x80) {
            out.push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (code >> 6)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out.push_back(static_cast<char>(0xE0 | (code >> 12)));
            out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default:
          return Error("an unknown escape in a string");
      }
    }
  }

  absl::Status Array(JsonValue& out, int depth) {
    ++pos_;  // [
    out.kind_ = JsonValue::Kind::kArray;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      JsonValue element;
      if (absl::Status st = Value(element, depth + 1); !st.ok()) return st;
      out.array_.push_back(std::move(element));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or ']' in an array");
    }
  }

  absl::Status Object(JsonValue& out, int depth) {
    ++pos_;  // {
    out.kind_ = JsonValue::Kind::kObject;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a member name");
      std::string key;
      if (absl::Status st = String(key); !st.ok()) return st;
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Error("expected ':' after a name");
      ++pos_;
      JsonValue member;
      if (absl::Status st = Value(member, depth + 1); !st.ok()) return st;
      out.object_[key] = std::move(member);
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return absl::OkStatus();
      }
      return Error("expected ',' or '}' in an object");
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  if (text.size() > kMaxJsonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON of ", text.size(), " bytes is over the limit of ", kMaxJsonBytes));
  }
  return JsonParser(text).ParseAll();
}

}  // namespace kiln
