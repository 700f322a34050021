// Kernels chosen by measurement at compile time (convolutions, f32 dots),
// and which one a compile chose, by instruction, so that a program loaded
// from a persistent compile cache builds the same kernels without timing
// them again.
#ifndef KILN_RUNTIME_HOST_TUNING_H_
#define KILN_RUNTIME_HOST_TUNING_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/instruction.h"
#include "runtime/host/kernel.h"

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

// A candidate kernel for an instruction, and the name a TuningRecord keeps
// for it.
struct NamedKernel {
  std::string name;  // e.g. "onednn forward brgconv:avx512_core", "openblas"
  Kernel kernel;
};

// False when KILN_KERNEL_TUNING=0 (or its older name KILN_CONV_TUNING=0)
// asks every compile for the first candidate: timing may choose differently
// from one compile to the next, and the candidates sum in different
// orders, so that setting makes runs repeat bit for bit.
bool KernelTuningEnabled();

// The kernel `instr` runs, of `candidates` (not empty, the library's
// default first): the first when tuning is disabled; else the one this
// thread's TuningRecord names where it is still offered; else, when
// `measure`, the fastest on made-up operands of `instr`'s shapes, which is
// recorded; else the first. `*timed` (when given) tells whether it timed
// them. A kernel that updates an operand in place updates the made-up one
// from run to run: the values drift, the shapes and the work do not.
NamedKernel ChooseKernel(const ir::Instruction& instr, std::vector<NamedKernel> candidates,
                         bool measure, bool* timed = nullptr);

}  // namespace kiln::host

#endif  // KILN_RUNTIME_HOST_TUNING_H_
