#include "base/element_type.h"

namespace kiln {

absl::string_view ElementTypeName(ElementType type) {
  switch (type) {
#define KILN_CASE(e, name, size) \
  case ElementType::e:           \
    return name;
    KILN_ELEMENT_TYPE_LIST(KILN_CASE)
#undef KILN_CASE
  }
  return "invalid";
}

std::optional<ElementType> ElementTypeFromName(absl::string_view name) {
#define KILN_CASE(e, n, size) \
  if (name == n) return ElementType::e;
  KILN_ELEMENT_TYPE_LIST(KILN_CASE)
#undef KILN_CASE
  return std::nullopt;
}

int ElementTypeSize(ElementType type) {
  switch (type) {
#define KILN_CASE(e, name, size) \
  case ElementType::e:           \
    return size;
    KILN_ELEMENT_TYPE_LIST(KILN_CASE)
#undef KILN_CASE
  }
  return 0;
}

bool IsFloatType(ElementType t) {
  return t == ElementType::kBF16 || t == ElementType::kF16 ||
         t == ElementType::kF32 || t == ElementType::kF64;
}
bool IsSignedIntType(ElementType t) {
  return t == ElementType::kS8 || t == ElementType::kS16 ||
         t == ElementType::kS32 || t == ElementType::kS64;
}
bool IsUnsignedIntType(ElementType t) {
  return t == ElementType::kU8 || t == ElementType::kU16 ||
         t == ElementType::kU32 || t == ElementType::kU64;
}

}  // namespace kiln
