// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
// Debian's Abseil ships without them, so every part of Kiln uses these.
#ifndef KILN_BASE_STATUS_MACROS_H_
#define KILN_BASE_STATUS_MACROS_H_

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status kiln_status_ = (expr);      \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                           \
  if (!tmp.ok()) return tmp.status();           \
  lhs = std::move(*tmp)

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_statusor_, __LINE__), lhs, rexpr)

namespace kiln {

// Returns `status` with `context` prepended to its message ("context: msg"),
// keeping the code. OK stays OK.
inline absl::Status WithContext(const absl::Status& status,
                                absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      std::string(context) + ": " + std::string(status.message()));
}

}  // namespace kiln

#endif  // KILN_BASE_STATUS_MACROS_H_
