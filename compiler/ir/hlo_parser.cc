#include "compiler/ir/hlo_parser.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace kiln::ir {
namespace {

// Attributes that carry nothing we execute; accepted and dropped.
const absl::flat_hash_set<absl::string_view>& IgnoredAttributes() {
  static const auto* const kSet = new absl::flat_hash_set<absl::string_view>{
      "metadata", "sharding", "frontend_attributes", "backend_config",
      "precision_config", "channel_id",
      "use_global_device_ids", "constrain_layout", "indices_are_sorted",
      "unique_indices", "outfeed_shape", "api_version",
      "custom_call_has_side_effect", "output_to_operand_aliasing",
      "operand_layout_constraints", "custom_call_schedule", "type",
      "statistics_viz", "algorithm", "origin", "result_accuracy",
      "control-predecessors", "schedule", "execution_thread"};
  return *kSet;
}

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
         c == '-';
}

struct PendingInstr {
  Instruction* instr;
  std::vector<std::string> operand_names;
  // (attribute, computation name) to resolve once all computations exist.
  std::vector<std::pair<std::string, std::string>> called_names;
  int line;
};

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::unique_ptr<Module>> Parse();
  absl::StatusOr<Shape> ParseShapeOnly() {
    ASSIGN_OR_RETURN(Shape s, ParseShapeText());
    SkipWs();
    if (pos_ != text_.size()) return Error("trailing text after shape");
    return s;
  }

 private:
  absl::Status Error(absl::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", LineAt(pos_), ": ", msg));
  }
  absl::Status ErrorAt(int line, absl::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", msg));
  }
  int LineAt(size_t pos) const {
    int line = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line;
    }
    return line;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  void SkipWs() {
    while (!AtEnd()) {
      char c = text_[pos_];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//" || c == '#') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else if (text_.substr(pos_, 2) == "/*") {
        size_t end = text_.find("*/", pos_ + 2);
        pos_ = end == absl::string_view::npos ? text_.size() : end + 2;
      } else {
        break;
      }
    }
  }
  bool Consume(absl::string_view s) {
    SkipWs();
    if (text_.substr(pos_, s.size()) == s) {
      pos_ += s.size();
      return true;
    }
    return false;
  }
  absl::Status Expect(absl::string_view s) {
    if (!Consume(s)) {
      return Error(absl::StrCat("expected '", s, "' but found '",
                                text_.substr(pos_, 12), "'"));
    }
    return absl::OkStatus();
  }
  // A keyword only if followed by a non-name character.
  bool ConsumeKeyword(absl::string_view kw) {
    SkipWs();
    if (text_.substr(pos_, kw.size()) == kw &&
        (pos_ + kw.size() >= text_.size() || !IsNameChar(text_[pos_ + kw.size()]))) {
      pos_ += kw.size();
      return true;
    }
    return false;
  }
  absl::string_view ReadName() {
    SkipWs();
    if (Peek() == '%') ++pos_;
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }
  // Text up to the matching close of the bracket at pos_ (exclusive of the
  // outer brackets); pos_ ends after the close.
  absl::StatusOr<absl::string_view> ReadBalanced(char open, char close) {
    SkipWs();
    if (Peek() != open) return Error(absl::StrCat("expected '", std::string(1, open), "'"));
    size_t start = ++pos_;
    int depth = 1;
    bool in_string = false;
    while (!AtEnd()) {
      char c = text_[pos_];
      if (in_string) {
        if (c == '\\') ++pos_;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == open) {
        ++depth;
      } else if (c == close) {
        if (--depth == 0) {
          ++pos_;
          return text_.substr(start, pos_ - 1 - start);
        }
      }
      ++pos_;
    }
    return Error(absl::StrCat("unbalanced '", std::string(1, open), "'"));
  }

  bool LooksLikeShape() {
    SkipWs();
    if (Peek() == '(') return true;
    size_t p = pos_;
    while (p < text_.size() && std::isalnum(static_cast<unsigned char>(text_[p]))) ++p;
    return p < text_.size() && text_[p] == '[' &&
           ElementTypeFromName(text_.substr(pos_, p - pos_)).has_value();
  }

  absl::StatusOr<Shape> ParseShapeText();
  absl::Status ParseComputation(Module* module);
  absl::Status ParseInstruction(Computation* comp, bool* is_root);
  absl::Status ParseAttribute(PendingInstr& pending, absl::string_view key,
                              absl::string_view value);
  absl::Status ResolveAll(Module* module);

  absl::string_view text_;
  size_t pos_ = 0;
  int shape_depth_ = 0;  // tuple shapes being parsed, nested
  std::vector<PendingInstr> pending_;
  std::vector<std::pair<Computation*, std::string>> roots_;
};

absl::StatusOr<Shape> Parser::ParseShapeText() {
  SkipWs();
  if (Peek() == '(') {
    // The nesting is the text's choice: bounded before recursing.
    ++shape_depth_;
    absl::Cleanup leave = [this] { --shape_depth_; };
    if (shape_depth_ > kMaxTupleDepth) {
      return Error(absl::StrCat("tuples nested more than ", kMaxTupleDepth, " deep"));
    }
    ++pos_;
    std::vector<Shape> elements;
    SkipWs();
    if (Peek() != ')') {
      while (true) {
        ASSIGN_OR_RETURN(Shape s, ParseShapeText());
        elements.push_back(std::move(s));
        if (Consume(",")) continue;
        break;
      }
    }
    RETURN_IF_ERROR(Expect(")"));
    return Shape::Tuple(std::move(elements));
  }
  size_t start = pos_;
  while (!AtEnd() && std::isalnum(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  absl::string_view type_name = text_.substr(start, pos_ - start);
  std::optional<ElementType> type = ElementTypeFromName(type_name);
  if (!type.has_value() || *type == ElementType::kTuple) {
    pos_ = start;
    return Error(absl::StrCat("unknown element type '", type_name, "'"));
  }
  ASSIGN_OR_RETURN(absl::string_view dims_text, ReadBalanced('[', ']'));
  std::vector<int64_t> dims;
  if (!absl::StripAsciiWhitespace(dims_text).empty()) {
    for (absl::string_view d : absl::StrSplit(dims_text, ',')) {
      d = absl::StripAsciiWhitespace(d);
      int64_t v;
      if (!absl::SimpleAtoi(d, &v)) {
        return Error(absl::StrCat("unsupported dimension '", d,
                                  "' (only static sizes are supported)"));
      }
      dims.push_back(v);
    }
  }
  // Layouts ({1,0} or {1,0:T(8,128)}) are accepted and dropped: Kiln arrays
  // are row-major.
  if (!AtEnd() && text_[pos_] == '{') {
    RETURN_IF_ERROR(ReadBalanced('{', '}').status());
  }
  Shape shape(*type, std::move(dims));
  if (shape.IsToken() && shape.rank() != 0) return Error("token has no dims");
  if (absl::Status st = ValidateShape(shape); !st.ok()) return Error(st.message());
  return shape;
}

// The values of an array literal: number tokens, in order, ignoring
// braces. They are counted before the literal is allocated, so a declared
// shape far larger than the text allocates nothing.
absl::StatusOr<Literal> ParseLiteralValues(absl::string_view text, const Shape& shape,
                                           int line) {
  const int64_t n = shape.ElementCount();
  auto err = [&](absl::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", msg));
  };
  std::vector<absl::string_view> tokens;
  size_t p = 0;
  while (p < text.size()) {
    char c = text[p];
    if (c == '{' || c == '}' || c == ',' ||
        std::isspace(static_cast<unsigned char>(c))) {
      ++p;
      continue;
    }
    size_t start = p;
    while (p < text.size() && text[p] != ',' && text[p] != '}' &&
           text[p] != '{' && !std::isspace(static_cast<unsigned char>(text[p]))) {
      ++p;
    }
    if (static_cast<int64_t>(tokens.size()) >= n) {
      return err(absl::StrCat("constant has more than ", n, " values for ",
                              shape.ToString()));
    }
    tokens.push_back(text.substr(start, p - start));
  }
  if (static_cast<int64_t>(tokens.size()) != n) {
    return err(absl::StrCat("constant has ", tokens.size(), " values, ", shape.ToString(),
                            " needs ", n));
  }
  Literal literal(shape);
  Literal* lit = &literal;
  for (int64_t i = 0; i < n; ++i) {
    const absl::string_view tok = tokens[i];
    if (shape.type() == ElementType::kPred) {
      if (tok == "true" || tok == "1") lit->data<bool>()[i] = true;
      else if (tok == "false" || tok == "0") lit->data<bool>()[i] = false;
      else return err(absl::StrCat("bad pred value '", tok, "'"));
    } else if (IsFloatType(shape.type())) {
      double v;
      std::string s(tok);
      if (s == "inf" || s == "+inf") v = INFINITY;
      else if (s == "-inf") v = -INFINITY;
      else if (s == "nan" || s == "-nan" || s == "+nan") v = NAN;
      else {
        char* end = nullptr;
        v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0') {
          return err(absl::StrCat("bad number '", tok, "'"));
        }
      }
      lit->SetFromDouble(i, v);
    } else if (IsUnsignedIntType(shape.type())) {
      uint64_t v;
      if (!absl::SimpleAtoi(tok, &v)) return err(absl::StrCat("bad integer '", tok, "'"));
      DispatchType(shape.type(), [&](auto tag) {
        using T = decltype(tag);
        lit->data<T>()[i] = ConvertValue<T>(v);
      });
    } else {
      int64_t v;
      if (!absl::SimpleAtoi(tok, &v)) return err(absl::StrCat("bad integer '", tok, "'"));
      DispatchType(shape.type(), [&](auto tag) {
        using T = decltype(tag);
        lit->data<T>()[i] = ConvertValue<T>(v);
      });
    }
  }
  return literal;
}

absl::StatusOr<Literal> ParseLiteral(absl::string_view text, const Shape& shape,
                                     int line) {
  text = absl::StripAsciiWhitespace(text);
  if (shape.IsTuple()) {
    // "(a, b)" with each element a literal of the element shape.
    if (!absl::ConsumePrefix(&text, "(") || !absl::ConsumeSuffix(&text, ")")) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": tuple constant needs parentheses"));
    }
    std::vector<absl::string_view> parts;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
      if (i == text.size() || (text[i] == ',' && depth == 0)) {
        parts.push_back(text.substr(start, i - start));
        start = i + 1;
      } else if (text[i] == '{' || text[i] == '(') {
        ++depth;
      } else if (text[i] == '}' || text[i] == ')') {
        --depth;
      }
    }
    if (parts.size() != shape.tuple_shapes().size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line, ": tuple constant has ", parts.size(),
          " elements, shape has ", shape.tuple_shapes().size()));
    }
    std::vector<Literal> elements;
    for (size_t i = 0; i < parts.size(); ++i) {
      ASSIGN_OR_RETURN(Literal e, ParseLiteral(parts[i], shape.tuple_shape(i), line));
      elements.push_back(std::move(e));
    }
    return Literal::Tuple(std::move(elements));
  }
  // Old style repeats the shape (and maybe a layout) before the values:
  // "f32[2]{0} {1, 2}".
  size_t type_end = 0;
  while (type_end < text.size() &&
         std::isalnum(static_cast<unsigned char>(text[type_end]))) {
    ++type_end;
  }
  if (type_end > 0 && type_end < text.size() && text[type_end] == '[' &&
      ElementTypeFromName(text.substr(0, type_end)).has_value()) {
    size_t close = text.find(']', type_end);
    text = absl::StripAsciiWhitespace(
        text.substr(close == absl::string_view::npos ? text.size() : close + 1));
    if (!text.empty() && text[0] == '{') {
      int depth = 0;
      size_t i = 0;
      for (; i < text.size(); ++i) {
        if (text[i] == '{') ++depth;
        if (text[i] == '}' && --depth == 0) break;
      }
      if (i < text.size()) {
        absl::string_view rest = absl::StripAsciiWhitespace(text.substr(i + 1));
        if (!rest.empty()) text = rest;  // the first group was a layout
      }
    }
  }
  return ParseLiteralValues(text, shape, line);
}

absl::StatusOr<std::vector<int64_t>> ParseIntList(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
    return absl::InvalidArgumentError(absl::StrCat("expected {list}, got '", v, "'"));
  }
  std::vector<int64_t> out;
  if (absl::StripAsciiWhitespace(v).empty()) return out;
  for (absl::string_view part : absl::StrSplit(v, ',')) {
    int64_t x;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &x)) {
      return absl::InvalidArgumentError(absl::StrCat("bad integer '", part, "'"));
    }
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<int64_t> ParseInt(absl::string_view v) {
  int64_t x;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &x)) {
    return absl::InvalidArgumentError(absl::StrCat("bad integer '", v, "'"));
  }
  return x;
}

// "2x2" style lists of `per`-parsed fields.
absl::StatusOr<std::vector<std::vector<int64_t>>> ParseXList(absl::string_view v,
                                                             char sep) {
  std::vector<std::vector<int64_t>> out;
  for (absl::string_view dim : absl::StrSplit(v, 'x')) {
    std::vector<int64_t> fields;
    for (absl::string_view f : absl::StrSplit(dim, sep)) {
      ASSIGN_OR_RETURN(int64_t x, ParseInt(f));
      fields.push_back(x);
    }
    out.push_back(fields);
  }
  return out;
}

absl::StatusOr<std::vector<WindowDim>> ParseWindow(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
    return absl::InvalidArgumentError("window must be {size=...}");
  }
  std::vector<WindowDim> dims;
  std::vector<std::pair<absl::string_view, absl::string_view>> fields;
  for (absl::string_view f : absl::StrSplit(v, ' ', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(f, absl::MaxSplits('=', 1));
    fields.push_back(kv);
    if (kv.first == "size") {
      ASSIGN_OR_RETURN(auto sizes, ParseXList(kv.second, '_'));
      dims.resize(sizes.size());
      for (size_t i = 0; i < sizes.size(); ++i) dims[i].size = sizes[i][0];
    }
  }
  if (dims.empty()) return absl::InvalidArgumentError("window without size");
  for (auto [key, val] : fields) {
    if (key == "size") continue;
    ASSIGN_OR_RETURN(auto parts, ParseXList(val, '_'));
    if (parts.size() != dims.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("window field ", key, " has ", parts.size(),
                       " dims, size has ", dims.size()));
    }
    for (size_t i = 0; i < dims.size(); ++i) {
      const auto& p = parts[i];
      if (key == "stride") dims[i].stride = p[0];
      else if (key == "pad") {
        if (p.size() != 2) return absl::InvalidArgumentError("pad needs lo_hi");
        dims[i].pad_lo = p[0];
        dims[i].pad_hi = p[1];
      } else if (key == "lhs_dilate") dims[i].base_dilation = p[0];
      else if (key == "rhs_dilate") dims[i].window_dilation = p[0];
      else {
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported window field '", key, "'"));
      }
    }
  }
  return dims;
}

absl::StatusOr<ConvDims> ParseDimLabels(absl::string_view v) {
  std::pair<absl::string_view, absl::string_view> io =
      absl::StrSplit(v, absl::MaxSplits("->", 1));
  std::pair<absl::string_view, absl::string_view> ik =
      absl::StrSplit(io.first, absl::MaxSplits('_', 1));
  absl::string_view in = ik.first, k = ik.second, out = io.second;
  if (in.empty() || in.size() != k.size() || in.size() != out.size() ||
      in.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("bad dim_labels '", v, "'"));
  }
  const size_t n = in.size() - 2;
  ConvDims c;
  c.input_spatial.assign(n, -1);
  c.kernel_spatial.assign(n, -1);
  c.output_spatial.assign(n, -1);
  int seen_b = 0, seen_f = 0, seen_i = 0, seen_o = 0, seen_b2 = 0, seen_f2 = 0;
  auto spatial = [&](char ch, std::vector<int64_t>& dst, size_t pos) -> bool {
    if (ch < '0' || ch > '9' || size_t(ch - '0') >= n || dst[ch - '0'] != -1) {
      return false;
    }
    dst[ch - '0'] = static_cast<int64_t>(pos);
    return true;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    bool ok = true;
    if (in[i] == 'b') { c.input_batch = i; ++seen_b; }
    else if (in[i] == 'f') { c.input_feature = i; ++seen_f; }
    else ok = spatial(in[i], c.input_spatial, i);
    if (k[i] == 'i') { c.kernel_input_feature = i; ++seen_i; }
    else if (k[i] == 'o') { c.kernel_output_feature = i; ++seen_o; }
    else ok = ok && spatial(k[i], c.kernel_spatial, i);
    if (out[i] == 'b') { c.output_batch = i; ++seen_b2; }
    else if (out[i] == 'f') { c.output_feature = i; ++seen_f2; }
    else ok = ok && spatial(out[i], c.output_spatial, i);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("bad dim_labels '", v, "'"));
    }
  }
  if (seen_b != 1 || seen_f != 1 || seen_i != 1 || seen_o != 1 ||
      seen_b2 != 1 || seen_f2 != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad dim_labels '", v, "'"));
  }
  return c;
}

absl::StatusOr<std::vector<SliceDim>> ParseSlice(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
    return absl::InvalidArgumentError("slice must be {[a:b], ...}");
  }
  std::vector<SliceDim> out;
  for (absl::string_view part : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    if (!absl::ConsumePrefix(&part, "[") || !absl::ConsumeSuffix(&part, "]")) {
      return absl::InvalidArgumentError(absl::StrCat("bad slice '", part, "'"));
    }
    std::vector<absl::string_view> f = absl::StrSplit(part, ':');
    if (f.size() < 2 || f.size() > 3) {
      return absl::InvalidArgumentError(absl::StrCat("bad slice '", part, "'"));
    }
    SliceDim s;
    ASSIGN_OR_RETURN(s.start, ParseInt(f[0]));
    ASSIGN_OR_RETURN(s.limit, ParseInt(f[1]));
    if (f.size() == 3) {
      ASSIGN_OR_RETURN(s.stride, ParseInt(f[2]));
    }
    out.push_back(s);
  }
  return out;
}

absl::StatusOr<std::vector<PadDim>> ParsePadding(absl::string_view v) {
  std::vector<PadDim> out;
  ASSIGN_OR_RETURN(auto parts, ParseXList(v, '_'));
  for (const auto& p : parts) {
    if (p.size() < 2 || p.size() > 3) {
      return absl::InvalidArgumentError(absl::StrCat("bad padding '", v, "'"));
    }
    out.push_back({p[0], p[1], p.size() == 3 ? p[2] : 0});
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> ParseReplicaGroups(
    absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported replica_groups form '", v, "'"));
  }
  std::vector<std::vector<int64_t>> groups;
  size_t p = 0;
  while (true) {
    size_t open = v.find('{', p);
    if (open == absl::string_view::npos) break;
    size_t close = v.find('}', open);
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError("unbalanced replica_groups");
    }
    ASSIGN_OR_RETURN(auto g, ParseIntList(v.substr(open, close - open + 1)));
    groups.push_back(g);
    p = close + 1;
  }
  return groups;
}

absl::string_view Unquote(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

absl::Status Parser::ParseAttribute(PendingInstr& pending, absl::string_view key,
                                    absl::string_view value) {
  Instruction* instr = pending.instr;
  Attributes& a = instr->mutable_attrs();
  const Opcode op = instr->opcode();
  auto computation_ref = [&](absl::string_view v) {
    pending.called_names.push_back(
        {std::string(key), std::string(absl::StripPrefix(
                               absl::StripAsciiWhitespace(v), "%"))});
  };
  if (key == "dimensions") {
    ASSIGN_OR_RETURN(a.dimensions, ParseIntList(value));
  } else if (key == "dynamic_slice_sizes" || key == "slice_sizes") {
    ASSIGN_OR_RETURN(a.slice_sizes, ParseIntList(value));
  } else if (key == "slice") {
    ASSIGN_OR_RETURN(a.slice, ParseSlice(value));
  } else if (key == "padding") {
    ASSIGN_OR_RETURN(a.padding, ParsePadding(value));
  } else if (key == "window") {
    ASSIGN_OR_RETURN(a.window, ParseWindow(value));
  } else if (key == "dim_labels") {
    ASSIGN_OR_RETURN(a.conv, ParseDimLabels(value));
  } else if (key == "feature_group_count") {
    ASSIGN_OR_RETURN(a.feature_group_count, ParseInt(value));
  } else if (key == "batch_group_count") {
    ASSIGN_OR_RETURN(a.batch_group_count, ParseInt(value));
  } else if (key == "lhs_batch_dims") {
    ASSIGN_OR_RETURN(a.dot.lhs_batch, ParseIntList(value));
  } else if (key == "rhs_batch_dims") {
    ASSIGN_OR_RETURN(a.dot.rhs_batch, ParseIntList(value));
  } else if (key == "lhs_contracting_dims") {
    ASSIGN_OR_RETURN(a.dot.lhs_contracting, ParseIntList(value));
  } else if (key == "rhs_contracting_dims") {
    ASSIGN_OR_RETURN(a.dot.rhs_contracting, ParseIntList(value));
  } else if (key == "direction" || key == "comparison_direction") {
    auto d = ComparisonDirectionFromName(absl::StripAsciiWhitespace(value));
    if (!d) return absl::InvalidArgumentError(absl::StrCat("bad direction '", value, "'"));
    a.direction = *d;
  } else if (key == "offset_dims") {
    ASSIGN_OR_RETURN(a.gather.offset_dims, ParseIntList(value));
  } else if (key == "collapsed_slice_dims") {
    ASSIGN_OR_RETURN(a.gather.collapsed_slice_dims, ParseIntList(value));
  } else if (key == "start_index_map") {
    ASSIGN_OR_RETURN(a.gather.start_index_map, ParseIntList(value));
  } else if (key == "index_vector_dim") {
    ASSIGN_OR_RETURN(int64_t d, ParseInt(value));
    a.gather.index_vector_dim = d;
    a.scatter.index_vector_dim = d;
  } else if (key == "update_window_dims") {
    ASSIGN_OR_RETURN(a.scatter.update_window_dims, ParseIntList(value));
  } else if (key == "inserted_window_dims") {
    ASSIGN_OR_RETURN(a.scatter.inserted_window_dims, ParseIntList(value));
  } else if (key == "scatter_dims_to_operand_dims") {
    ASSIGN_OR_RETURN(a.scatter.scatter_dims_to_operand_dims, ParseIntList(value));
  } else if (key == "iota_dimension") {
    ASSIGN_OR_RETURN(a.iota_dimension, ParseInt(value));
  } else if (key == "index") {
    ASSIGN_OR_RETURN(a.tuple_index, ParseInt(value));
  } else if (key == "replica_groups") {
    ASSIGN_OR_RETURN(a.replica_groups, ParseReplicaGroups(value));
  } else if (key == "distribution") {
    absl::string_view d = absl::StripAsciiWhitespace(value);
    if (d == "rng_uniform") a.distribution = RngDistribution::kUniform;
    else if (d == "rng_normal") a.distribution = RngDistribution::kNormal;
    else return absl::InvalidArgumentError(absl::StrCat("unsupported distribution '", d, "'"));
  } else if (key == "operand_precision") {
    absl::string_view v = absl::StripAsciiWhitespace(value);
    if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
      return absl::InvalidArgumentError("operand_precision must be {...}");
    }
    for (absl::string_view name : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      std::optional<Precision> p = PrecisionFromName(absl::StripAsciiWhitespace(name));
      if (!p) return absl::InvalidArgumentError(absl::StrCat("bad precision '", name, "'"));
      a.operand_precision.push_back(*p);
    }
  } else if (key == "is_stable") {
    a.is_stable = absl::StripAsciiWhitespace(value) == "true";
  } else if (key == "custom_call_target") {
    a.custom_call_target = std::string(Unquote(value));
  } else if (key == "infeed_config" || key == "outfeed_config") {
    a.config = std::string(Unquote(value));
  } else if (key == "to_apply" || key == "select" || key == "scatter" ||
             key == "condition" || key == "body" || key == "true_computation" ||
             key == "false_computation" || key == "calls") {
    computation_ref(value);
  } else if (key == "branch_computations") {
    absl::string_view v = absl::StripAsciiWhitespace(value);
    if (!absl::ConsumePrefix(&v, "{") || !absl::ConsumeSuffix(&v, "}")) {
      return absl::InvalidArgumentError("branch_computations must be {...}");
    }
    for (absl::string_view name : absl::StrSplit(v, ',', absl::SkipWhitespace())) {
      computation_ref(name);
    }
  } else if (IgnoredAttributes().contains(key)) {
    // Carries nothing the IR needs.
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported attribute '", key, "' on ", OpcodeName(op)));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseInstruction(Computation* comp, bool* is_root) {
  const int line = LineAt(pos_);
  *is_root = ConsumeKeyword("ROOT");
  absl::string_view name = ReadName();
  if (name.empty()) return Error("expected an instruction name");
  RETURN_IF_ERROR(Expect("="));
  ASSIGN_OR_RETURN(Shape shape, ParseShapeText());
  SkipWs();
  size_t op_start = pos_;
  while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
  absl::string_view op_name = text_.substr(op_start, pos_ - op_start);
  std::optional<Opcode> op = OpcodeFromName(op_name);
  if (!op.has_value()) {
    return ErrorAt(line, absl::StrCat("unknown or unsupported opcode '", op_name, "'"));
  }
  ASSIGN_OR_RETURN(absl::string_view args, ReadBalanced('(', ')'));
  auto instr = std::make_unique<Instruction>(*op, shape, std::string(name));
  PendingInstr pending{nullptr, {}, {}, line};
  if (*op == Opcode::kConstant) {
    absl::StatusOr<Literal> lit = ParseLiteral(args, shape, line);
    if (!lit.ok()) return lit.status();
    instr->mutable_attrs().literal = *std::move(lit);
  } else if (*op == Opcode::kParameter) {
    absl::StatusOr<int64_t> n = ParseInt(args);
    if (!n.ok()) return ErrorAt(line, n.status().message());
    instr->mutable_attrs().parameter_number = *n;
  } else {
    // Operands, each optionally preceded by its shape.
    Parser sub(args);
    while (true) {
      sub.SkipWs();
      if (sub.AtEnd()) break;
      if (sub.LooksLikeShape()) {
        absl::StatusOr<Shape> s = sub.ParseShapeText();
        if (!s.ok()) return ErrorAt(line, s.status().message());
      }
      absl::string_view operand = sub.ReadName();
      if (operand.empty()) {
        return ErrorAt(line, absl::StrCat("bad operand list '", args, "'"));
      }
      pending.operand_names.emplace_back(operand);
      if (!sub.Consume(",")) {
        sub.SkipWs();
        if (!sub.AtEnd()) {
          return ErrorAt(line, absl::StrCat("bad operand list '", args, "'"));
        }
        break;
      }
    }
  }
  pending.instr = comp->AddInstruction(std::move(instr));
  // Attributes: ", key=value" repeated.
  while (true) {
    size_t save = pos_;
    if (!Consume(",")) break;
    SkipWs();
    size_t key_start = pos_;
    while (!AtEnd() && (IsNameChar(text_[pos_]))) ++pos_;
    absl::string_view key = text_.substr(key_start, pos_ - key_start);
    if (key.empty() || !Consume("=")) {
      pos_ = save;
      return ErrorAt(line, "expected attribute 'name=value'");
    }
    SkipWs();
    absl::string_view value;
    if (Peek() == '{') {
      size_t vstart = pos_;
      RETURN_IF_ERROR(ReadBalanced('{', '}').status());
      value = text_.substr(vstart, pos_ - vstart);
    } else if (Peek() == '"') {
      size_t vstart = pos_++;
      while (!AtEnd() && text_[pos_] != '"') {
        if (text_[pos_] == '\\') ++pos_;
        ++pos_;
      }
      if (AtEnd()) return ErrorAt(line, "unterminated string");
      ++pos_;
      value = text_.substr(vstart, pos_ - vstart);
    } else {
      size_t vstart = pos_;
      while (!AtEnd() && text_[pos_] != ',' && text_[pos_] != '\n' &&
             !std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      }
      value = text_.substr(vstart, pos_ - vstart);
    }
    absl::Status st = ParseAttribute(pending, key, value);
    if (!st.ok()) return ErrorAt(line, st.message());
  }
  pending_.push_back(std::move(pending));
  if (*is_root) roots_.push_back({comp, std::string(name)});
  return absl::OkStatus();
}

absl::Status Parser::ParseComputation(Module* module) {
  const bool is_entry = ConsumeKeyword("ENTRY");
  absl::string_view name = ReadName();
  if (name.empty()) {
    return Error(absl::StrCat("expected a computation, found '",
                              text_.substr(pos_, 16), "'"));
  }
  SkipWs();
  if (Peek() == '(') RETURN_IF_ERROR(ReadBalanced('(', ')').status());
  if (Consume("->")) RETURN_IF_ERROR(ParseShapeText().status());
  RETURN_IF_ERROR(Expect("{"));
  Computation* comp =
      module->AddComputation(std::make_unique<Computation>(std::string(name)));
  if (is_entry) {
    if (module->entry() != nullptr) return Error("two ENTRY computations");
    module->set_entry(comp);
  }
  Instruction* root = nullptr;
  while (!Consume("}")) {
    if (AtEnd()) return Error(absl::StrCat("computation ", name, " is not closed"));
    bool is_root = false;
    RETURN_IF_ERROR(ParseInstruction(comp, &is_root));
    if (is_root) {
      if (root != nullptr) {
        return Error(absl::StrCat("computation ", name, " has two ROOTs"));
      }
      root = comp->instructions().back().get();
    }
  }
  if (comp->instructions().empty()) {
    return Error(absl::StrCat("computation ", name, " is empty"));
  }
  // Without ROOT the last instruction is the root.
  comp->set_root(root != nullptr ? root : comp->instructions().back().get());
  return absl::OkStatus();
}

absl::Status Parser::ResolveAll(Module* module) {
  absl::flat_hash_map<const Computation*,
                      absl::flat_hash_map<absl::string_view, Instruction*>>
      by_name;
  for (const auto& c : module->computations()) {
    auto& names = by_name[c.get()];
    for (const auto& instr : c->instructions()) {
      if (!names.emplace(instr->name(), instr.get()).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "duplicate instruction name %", instr->name(), " in ", c->name()));
      }
    }
  }
  for (PendingInstr& p : pending_) {
    const auto& names = by_name[p.instr->parent()];
    for (const std::string& operand : p.operand_names) {
      auto it = names.find(operand);
      if (it == names.end()) {
        return ErrorAt(p.line, absl::StrCat("unknown operand %", operand,
                                            " of %", p.instr->name()));
      }
      p.instr->AddOperand(it->second);
    }
    // Called computations in the order the op expects.
    static const char* const kOrder[] = {
        "condition", "body", "select", "scatter", "true_computation",
        "false_computation", "to_apply", "calls", "branch_computations"};
    for (const char* key : kOrder) {
      for (const auto& [k, cname] : p.called_names) {
        if (k != key) continue;
        Computation* c = module->FindComputation(cname);
        if (c == nullptr) {
          return ErrorAt(p.line, absl::StrCat("unknown computation %", cname));
        }
        p.instr->AddCalled(c);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Module>> Parser::Parse() {
  std::string module_name = "module";
  if (ConsumeKeyword("HloModule")) {
    // The name is on the header line: printed back, a missing one would let
    // the next line's name take its place.
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    module_name = std::string(text_.substr(start, pos_ - start));
    if (module_name.empty()) return Error("expected a module name after 'HloModule'");
    // Header attributes (entry_computation_layout={...}, ...) end the line.
    while (!AtEnd() && text_[pos_] != '\n') {
      if (text_[pos_] == '{') {
        RETURN_IF_ERROR(ReadBalanced('{', '}').status());
      } else {
        ++pos_;
      }
    }
  }
  auto module = std::make_unique<Module>(module_name);
  SkipWs();
  while (!AtEnd()) {
    RETURN_IF_ERROR(ParseComputation(module.get()));
    SkipWs();
  }
  if (module->computations().empty()) {
    return absl::InvalidArgumentError("line 1: no computations in module text");
  }
  if (module->entry() == nullptr) {
    module->set_entry(module->computations().back().get());
  }
  RETURN_IF_ERROR(ResolveAll(module.get()));
  for (const auto& c : module->computations()) {
    RETURN_IF_ERROR(c->Canonicalize());
  }
  return module;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Module>> ParseModule(absl::string_view text) {
  return Parser(text).Parse();
}

absl::StatusOr<Shape> ParseShape(absl::string_view text) {
  return Parser(text).ParseShapeOnly();
}

}  // namespace kiln::ir
