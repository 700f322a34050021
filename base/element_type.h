// The element types every layer speaks of (the IR's shapes, literals,
// kernels, the wire form): one list, with names and sizes.
#ifndef KILN_BASE_ELEMENT_TYPE_H_
#define KILN_BASE_ELEMENT_TYPE_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace kiln {

#define KILN_ELEMENT_TYPE_LIST(V) \
  V(kPred, "pred", 1)             \
  V(kS8, "s8", 1)                 \
  V(kS16, "s16", 2)               \
  V(kS32, "s32", 4)               \
  V(kS64, "s64", 8)               \
  V(kU8, "u8", 1)                 \
  V(kU16, "u16", 2)               \
  V(kU32, "u32", 4)               \
  V(kU64, "u64", 8)               \
  V(kBF16, "bf16", 2)             \
  V(kF16, "f16", 2)               \
  V(kF32, "f32", 4)               \
  V(kF64, "f64", 8)               \
  V(kTuple, "tuple", 0)           \
  V(kToken, "token", 0)

enum class ElementType : uint8_t {
#define KILN_DECLARE_ENUM(e, name, size) e,
  KILN_ELEMENT_TYPE_LIST(KILN_DECLARE_ENUM)
#undef KILN_DECLARE_ENUM
};

absl::string_view ElementTypeName(ElementType type);
std::optional<ElementType> ElementTypeFromName(absl::string_view name);
// Bytes per element; 0 for tuple and token.
int ElementTypeSize(ElementType type);
bool IsFloatType(ElementType type);
bool IsSignedIntType(ElementType type);
bool IsUnsignedIntType(ElementType type);
inline bool IsIntegralType(ElementType t) {
  return IsSignedIntType(t) || IsUnsignedIntType(t);
}
inline bool IsArrayType(ElementType t) {
  return t != ElementType::kTuple && t != ElementType::kToken;
}

}  // namespace kiln

#endif  // KILN_BASE_ELEMENT_TYPE_H_
