#include "client/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace kiln::client {
namespace {

using ir::ElementType;

struct Descr {
  const char* code;  // without the byte-order character
  ElementType type;
};
constexpr Descr kDescrs[] = {
    {"b1", ElementType::kPred}, {"i1", ElementType::kS8},
    {"i2", ElementType::kS16},  {"i4", ElementType::kS32},
    {"i8", ElementType::kS64},  {"u1", ElementType::kU8},
    {"u2", ElementType::kU16},  {"u4", ElementType::kU32},
    {"u8", ElementType::kU64},  {"f2", ElementType::kF16},
    {"f4", ElementType::kF32},  {"f8", ElementType::kF64},
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid .npy: ", what));
}

// Value of `key` in the header dict, as raw text.
absl::StatusOr<std::string> DictValue(absl::string_view header,
                                      absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t pos = header.find(quoted);
  if (pos == absl::string_view::npos) return Bad(absl::StrCat("header has no ", key));
  pos = header.find(':', pos);
  if (pos == absl::string_view::npos) return Bad("malformed header");
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  size_t end = pos;
  if (end < header.size() && header[end] == '(') {
    end = header.find(')', end);
    if (end == absl::string_view::npos) return Bad("malformed shape");
    ++end;
  } else if (end < header.size() && header[end] == '\'') {
    end = header.find('\'', end + 1);
    if (end == absl::string_view::npos) return Bad("malformed descr");
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  return std::string(header.substr(pos, end - pos));
}

}  // namespace

absl::StatusOr<ir::Literal> ParseNpy(const std::string& bytes) {
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    return Bad("missing magic string");
  }
  const uint8_t major = static_cast<uint8_t>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) {
      header_len |= size_t(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    }
    header_start = 12;
  } else {
    return Bad(absl::StrCat("unsupported format version ", int(major)));
  }
  if (header_start + header_len > bytes.size()) return Bad("truncated header");
  const absl::string_view header(bytes.data() + header_start, header_len);
  ASSIGN_OR_RETURN(std::string descr, DictValue(header, "descr"));
  ASSIGN_OR_RETURN(std::string fortran, DictValue(header, "fortran_order"));
  ASSIGN_OR_RETURN(std::string shape_text, DictValue(header, "shape"));
  descr = std::string(absl::StripSuffix(absl::StripPrefix(descr, "'"), "'"));
  if (descr.size() != 3) return Bad(absl::StrCat("unsupported dtype '", descr, "'"));
  if (descr[0] == '>' && descr.substr(1) != "b1" && descr.substr(1) != "i1" &&
      descr.substr(1) != "u1") {
    return Bad(absl::StrCat("big-endian dtype '", descr, "' is not supported"));
  }
  std::optional<ElementType> type;
  for (const Descr& d : kDescrs) {
    if (descr.substr(1) == d.code) type = d.type;
  }
  if (!type) return Bad(absl::StrCat("unsupported dtype '", descr, "'"));
  const absl::string_view order = absl::StripAsciiWhitespace(fortran);
  if (order != "False" && order != "True") {
    return Bad(absl::StrCat("fortran_order '", order, "' is neither True nor False"));
  }
  std::vector<int64_t> dims;
  absl::string_view inner = absl::StripAsciiWhitespace(shape_text);
  inner = absl::StripSuffix(absl::StripPrefix(inner, "("), ")");
  for (absl::string_view part : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &v) || v < 0) {
      return Bad(absl::StrCat("bad shape '", shape_text, "'"));
    }
    dims.push_back(v);
  }
  ir::Shape shape(*type, dims);
  RETURN_IF_ERROR(ir::ValidateShape(shape));
  const size_t data_start = header_start + header_len;
  if (bytes.size() - data_start != static_cast<size_t>(shape.ByteSize())) {
    return Bad(absl::StrCat("data has ", bytes.size() - data_start,
                            " bytes, shape ", shape.ToString(), " needs ",
                            shape.ByteSize()));
  }
  ir::Literal lit(shape);
  if (shape.ByteSize() > 0 && order == "False") {
    std::memcpy(lit.mutable_bytes().data(), bytes.data() + data_start, shape.ByteSize());
  } else if (shape.ByteSize() > 0) {
    // Fortran order (the first index varies fastest, as numpy saves a
    // transposed view): each element moves to its row-major place.
    const size_t width = static_cast<size_t>(ElementTypeSize(*type));
    const int rank = static_cast<int>(dims.size());
    std::vector<int64_t> index(rank, 0);
    uint8_t* out = lit.mutable_bytes().data();
    const char* in = bytes.data() + data_start;
    for (int64_t f = 0; f < shape.ElementCount(); ++f) {
      int64_t row_major = 0;
      for (int d = 0; d < rank; ++d) row_major = row_major * dims[d] + index[d];
      std::memcpy(out + row_major * width, in + f * width, width);
      for (int d = 0; d < rank && ++index[d] == dims[d]; ++d) index[d] = 0;
    }
  }
  if (*type == ElementType::kPred) {
    ir::NormalizePredBytes(lit.mutable_bytes().data(), static_cast<int64_t>(lit.bytes().size()));
  }
  return lit;
}

absl::StatusOr<ir::Literal> ReadNpyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<ir::Literal> lit = ParseNpy(ss.str());
  if (!lit.ok()) return WithContext(lit.status(), path);
  return lit;
}

absl::StatusOr<std::string> EncodeNpy(const ir::Literal& literal) {
  const ir::Shape& shape = literal.shape();
  if (!shape.IsArray()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", shape.ToString(), " as .npy"));
  }
  ir::Literal data = literal;
  if (shape.type() == ElementType::kBF16) {
    data = ir::Literal(ir::Shape(ElementType::kF32, shape.dims()));
    for (int64_t i = 0; i < shape.ElementCount(); ++i) {
      data.data<float>()[i] = static_cast<float>(literal.data<bf16>()[i]);
    }
  }
  const char* code = nullptr;
  for (const Descr& d : kDescrs) {
    if (d.type == data.shape().type()) code = d.code;
  }
  const char order = (code[1] == '1') ? '|' : '<';
  std::string dims = absl::StrJoin(shape.dims(), ", ");
  if (shape.rank() == 1) dims += ",";
  std::string header = absl::StrCat("{'descr': '", std::string(1, order), code,
                                    "', 'fortran_order': False, 'shape': (",
                                    dims, "), }");
  // Pad so that the data starts on a 64-byte boundary, ending with '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char*>(data.bytes().data()), data.bytes().size());
  return out;
}

absl::Status WriteNpyFile(const std::string& path, const ir::Literal& literal) {
  ASSIGN_OR_RETURN(std::string bytes, EncodeNpy(literal));
  std::ofstream out(path, std::ios::binary);
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) return absl::DataLossError(absl::StrCat("short write to ", path));
  return absl::OkStatus();
}

absl::StatusOr<ir::Literal> AdaptToParameter(const ir::Literal& value,
                                             const ir::Shape& expected) {
  const ir::Shape& got = value.shape();
  if (got.dims() != expected.dims()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "has shape ", got.ToString(), ", the parameter is ", expected.ToString()));
  }
  if (got.type() == expected.type()) return value;
  if (expected.type() == ElementType::kBF16) {
    ir::Literal out(expected);
    if (got.type() == ElementType::kF32) {
      for (int64_t i = 0; i < got.ElementCount(); ++i) {
        out.data<bf16>()[i] = bf16(value.data<float>()[i]);
      }
      return out;
    }
    if (got.type() == ElementType::kU16) {
      if (!value.bytes().empty()) {
        std::memcpy(out.mutable_bytes().data(), value.bytes().data(), value.bytes().size());
      }
      return out;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "has element type ", ir::ElementTypeName(got.type()), ", the parameter is ",
      expected.ToString()));
}

}  // namespace kiln::client
