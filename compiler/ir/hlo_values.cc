#include "compiler/ir/hlo_values.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace kiln::ir::hlo_text {
namespace {

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
    if (text.substr(p, 2) == "/*") {
      // XLA marks the indices of rank-3 and larger constants: /*i0=1*/.
      const size_t end = text.find("*/", p + 2);
      if (end == absl::string_view::npos) return err("unterminated comment in constant");
      p = end + 2;
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
    if (tokens.back() == "...") {
      // XLA prints large constants as {...} unless asked for their values.
      return err(absl::StrCat("the values of this ", shape.ToString(),
                              " constant are elided ({...}); dump the module with its large "
                              "constants printed"));
    }
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

}  // namespace

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

namespace {

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

// `reversed` receives the dimensions marked rhs_reversal=1.

}  // namespace

absl::StatusOr<std::vector<WindowDim>> ParseWindow(absl::string_view v,
                                                   std::vector<int64_t>* reversed) {
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
      else if (key == "rhs_reversal") {
        if (p[0] != 0 && p[0] != 1) return absl::InvalidArgumentError("rhs_reversal takes 0 or 1");
        if (p[0] == 1) reversed->push_back(static_cast<int64_t>(i));
      } else {
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

namespace {

// A bracketed list of integers, "[2,4]", consumed from the front of `v`.
absl::StatusOr<std::vector<int64_t>> ConsumeBracketList(absl::string_view* v,
                                                        absl::string_view whole) {
  const size_t close = v->find(']');
  if (!absl::ConsumePrefix(v, "[") || close == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad replica_groups '", whole, "'"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> list,
                   ParseIntList(absl::StrCat("{", v->substr(0, close - 1), "}")));
  v->remove_prefix(close);
  return list;
}

// XLA's iota form of replica groups, "[G,S]<=[d0,d1,...]" with an optional
// "T(p0,p1,...)": the ids 0..N-1 laid out as an array of dims d, transposed
// by p, read in order and cut into G groups of S.
absl::StatusOr<std::vector<std::vector<int64_t>>> ParseIotaReplicaGroups(
    absl::string_view v) {
  const absl::string_view whole = v;
  ASSIGN_OR_RETURN(std::vector<int64_t> groups, ConsumeBracketList(&v, whole));
  if (!absl::ConsumePrefix(&v, "<=")) {
    return absl::InvalidArgumentError(absl::StrCat("bad replica_groups '", whole, "'"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, ConsumeBracketList(&v, whole));
  std::vector<int64_t> perm(dims.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  if (absl::ConsumePrefix(&v, "T(")) {
    if (!absl::ConsumeSuffix(&v, ")")) {
      return absl::InvalidArgumentError(absl::StrCat("bad replica_groups '", whole, "'"));
    }
    ASSIGN_OR_RETURN(perm, ParseIntList(absl::StrCat("{", v, "}")));
    v = {};
  }
  if (!v.empty() || groups.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("bad replica_groups '", whole, "'"));
  }
  // At most a million devices: the list is built in memory.
  constexpr int64_t kMaxDevices = int64_t{1} << 20;
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 1 || d > kMaxDevices || count * d > kMaxDevices) {
      return absl::InvalidArgumentError(absl::StrCat("replica_groups '", whole,
                                                     "' names too many or no devices"));
    }
    count *= d;
  }
  std::vector<bool> seen(dims.size(), false);
  for (int64_t p : perm) {
    if (perm.size() != dims.size() || p < 0 || p >= static_cast<int64_t>(dims.size()) || seen[p]) {
      return absl::InvalidArgumentError(absl::StrCat("replica_groups '", whole,
                                                     "': the transpose is not a permutation"));
    }
    seen[p] = true;
  }
  if (groups[0] < 1 || groups[1] < 1 || groups[0] > count || groups[1] > count ||
      groups[0] * groups[1] != count) {
    return absl::InvalidArgumentError(absl::StrCat("replica_groups '", whole, "': ", groups[0],
                                                   " groups of ", groups[1], " are not ", count,
                                                   " devices"));
  }
  // Row-major strides of the untransposed array, visited in transposed order.
  std::vector<int64_t> stride(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) stride[i] = stride[i + 1] * dims[i + 1];
  std::vector<int64_t> index(dims.size(), 0);  // over the transposed dims
  std::vector<std::vector<int64_t>> out(groups[0]);
  for (int64_t k = 0; k < count; ++k) {
    int64_t id = 0;
    for (size_t j = 0; j < perm.size(); ++j) id += index[j] * stride[perm[j]];
    out[k / groups[1]].push_back(id);
    for (int j = static_cast<int>(perm.size()) - 1; j >= 0; --j) {
      if (++index[j] < dims[perm[j]]) break;
      index[j] = 0;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int64_t>>> ParseReplicaGroups(
    absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (absl::StartsWith(v, "[")) return ParseIotaReplicaGroups(v);
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

absl::StatusOr<std::string> ReadQuoted(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a quoted string, found '", absl::CHexEscape(v.substr(0, 40)), "'"));
  }
  std::string text;
  std::string error;
  if (!absl::CUnescape(v.substr(1, v.size() - 2), &text, &error)) {
    return absl::InvalidArgumentError(absl::StrCat("bad escape in a quoted string: ", error));
  }
  return text;
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CEscape(s), "\""); }

}  // namespace kiln::ir::hlo_text
