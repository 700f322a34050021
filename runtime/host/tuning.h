// Which kernel a compile chose where it measured candidates (convolutions),
// by instruction, so that a program loaded from a persistent compile cache
// builds the same kernels without timing them again.
#ifndef KILN_RUNTIME_HOST_TUNING_H_
#define KILN_RUNTIME_HOST_TUNING_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"

namespace kiln::host {

// Not thread-safe: one compile fills or reads it on one thread, through
// TuningScope.
class TuningRecord {
 public:
  // The choice for `instr` ("computation/instruction" names it), if any.
  std::optional<std::string> Find(const ir::Instruction& instr) const;
  void Set(const ir::Instruction& instr, const std::string& choice);
  size_t size() const { return choices_.size(); }

  // Lines of "key<TAB>choice"; Parse is its inverse (INVALID_ARGUMENT for
  // a line without a tab).
  std::string Serialize() const;
  static absl::StatusOr<TuningRecord> Parse(const std::string& text);

  // The record of the compile running on this thread; null outside a
  // TuningScope.
  static TuningRecord* Current();

 private:
  std::map<std::string, std::string> choices_;
};

// Makes `record` (borrowed) current on this thread for its lifetime.
class TuningScope {
 public:
  explicit TuningScope(TuningRecord* record);
  ~TuningScope();
  TuningScope(const TuningScope&) = delete;
  TuningScope& operator=(const TuningScope&) = delete;

 private:
  TuningRecord* previous_;
};

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_TUNING_H_
