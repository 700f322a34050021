#include "runtime/host/tuning.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::host {
namespace {

thread_local TuningRecord* current_record = nullptr;

std::string KeyOf(const ir::Instruction& instr) {
  return absl::StrCat(instr.parent() != nullptr ? instr.parent()->name() : "", "/", instr.name());
}

}  // namespace

std::optional<std::string> TuningRecord::Find(const ir::Instruction& instr) const {
  auto it = choices_.find(KeyOf(instr));
  if (it == choices_.end()) return std::nullopt;
  return it->second;
}

void TuningRecord::Set(const ir::Instruction& instr, const std::string& choice) {
  choices_[KeyOf(instr)] = choice;
}

std::string TuningRecord::Serialize() const {
  std::string out;
  for (const auto& [key, choice] : choices_) absl::StrAppend(&out, key, "\t", choice, "\n");
  return out;
}

absl::StatusOr<TuningRecord> TuningRecord::Parse(const std::string& text) {
  TuningRecord record;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t tab = line.find('\t');
    if (tab == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("tuning record line without a tab: ", line));
    }
    record.choices_[std::string(line.substr(0, tab))] = std::string(line.substr(tab + 1));
  }
  return record;
}

TuningRecord* TuningRecord::Current() { return current_record; }

TuningScope::TuningScope(TuningRecord* record) : previous_(current_record) {
  current_record = record;
}
TuningScope::~TuningScope() { current_record = previous_; }

}  // namespace kiln::host
