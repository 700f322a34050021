#include "runtime/host/tuning.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/logging.h"
#include "runtime/host/cancel.h"
#include "runtime/host/compute_workers.h"

namespace kiln::host {
namespace {

thread_local TuningRecord* current_record = nullptr;

std::string KeyOf(const ir::Instruction& instr) {
  return absl::StrCat(instr.parent() != nullptr ? instr.parent()->name() : "", "/", instr.name());
}

// Made-up operands of `instr`'s shapes, shared by every candidate timed
// (empty when one cannot be allocated).
std::vector<BufferPtr> TimingOperands(const ir::Instruction& instr) {
  std::vector<BufferPtr> ops;
  for (const ir::Instruction* operand : instr.operands()) {
    absl::StatusOr<BufferPtr> b = Buffer::Allocate(operand->shape(), nullptr);
    if (!b.ok()) return {};
    uint8_t* bytes = (*b)->data();
    const int64_t size = (*b)->size_bytes();
    if (operand->shape().type() == ir::ElementType::kF32) {
      float* v = (*b)->as<float>();
      for (int64_t i = 0; i < size / 4; ++i) v[i] = 0.125f * (i % 7);
    } else {
      std::fill(bytes, bytes + size, uint8_t{0});
    }
    ops.push_back(*std::move(b));
  }
  return ops;
}

// Seconds of one run of `kernel` on `ops`, or infinity when it fails or
// runs past `limit` seconds: a kernel that polls for cancellation (ours
// do, once per image) is stopped there, as it can no longer win.
double RunOnce(const Kernel& kernel, const std::vector<BufferPtr>& ops,
               double limit = std::numeric_limits<double>::infinity()) {
  ExecState st;
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const runtime::CancelCheck over = [&] { return seconds() > limit; };
  CancelScope scope(&over);
  if (!kernel(st, ops).ok()) return std::numeric_limits<double>::infinity();
  const double took = seconds();
  return took > limit ? std::numeric_limits<double>::infinity() : took;
}

bool Disabled(const char* variable) {
  const char* value = std::getenv(variable);
  return value != nullptr && std::string(value) == "0";
}

}  // namespace

bool KernelTuningEnabled() {
  return !Disabled("KILN_KERNEL_TUNING") && !Disabled("KILN_CONV_TUNING");
}

NamedKernel ChooseKernel(const ir::Instruction& instr, std::vector<NamedKernel> candidates,
                         bool measure, bool* timed) {
  if (timed != nullptr) *timed = false;
  if (candidates.size() == 1 || !KernelTuningEnabled()) return std::move(candidates[0]);
  // A program loaded from a persistent cache builds what its first compile
  // chose, where that kernel is still offered (the same library on the
  // same CPU offers the same ones).
  TuningRecord* record = TuningRecord::Current();
  if (record != nullptr) {
    if (std::optional<std::string> chosen = record->Find(instr)) {
      for (NamedKernel& c : candidates) {
        if (c.name == *chosen) return std::move(c);
      }
    }
  }
  if (!measure) return std::move(candidates[0]);
  std::vector<BufferPtr> ops = TimingOperands(instr);
  if (ops.empty()) return std::move(candidates[0]);
  if (timed != nullptr) *timed = true;
  // Each candidate runs once to warm up (its scratch and output pages, its
  // caches) and once timed; one whose warm-up alone took over twice the
  // best time so far is out (and one of ours is stopped once it takes four
  // times that). Then the candidates within 1.3x of the best run two more
  // rounds, taking turns, so that a burst of other work on the machine
  // slows all of them alike; each keeps its best time. (The warm-ups of
  // slow candidates are most of what tuning costs: one run each.)
  // Timed on a compute worker, where programs run: on its OpenMP team.
  // Run here (a compile's thread), the libraries would start a second team,
  // and with more libgomp threads than cores every team's idle workers stop
  // spinning almost at once and sleep between parallel regions, for the
  // rest of the process.
  const double kInfinity = std::numeric_limits<double>::infinity();
  std::vector<double> times(candidates.size(), kInfinity);
  RunOnComputeWorker([&] {
    double best = kInfinity;
    for (size_t i = 0; i < candidates.size(); ++i) {
      // A warm-up may take longer than a timed run, but not four times the
      // best time so far (plus a millisecond for its first touch of memory).
      const double warm = RunOnce(candidates[i].kernel, ops, 4 * best + 1e-3);
      times[i] = (warm > 0.25 || warm > 2 * best) ? warm : RunOnce(candidates[i].kernel, ops);
      best = std::min(best, times[i]);
    }
    std::vector<size_t> close;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (times[i] <= 1.3 * best) close.push_back(i);
    }
    for (int round = 0; round < 2 && close.size() > 1; ++round) {
      for (size_t i : close) times[i] = std::min(times[i], RunOnce(candidates[i].kernel, ops));
    }
  });
  size_t fastest = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    logging::Debug("{}: {} takes {:.3f} ms", instr.name(), candidates[i].name, times[i] * 1e3);
    if (times[i] < times[fastest]) fastest = i;
  }
  logging::Debug("{}: runs {}", instr.name(), candidates[fastest].name);
  if (record != nullptr) record->Set(instr, candidates[fastest].name);
  return std::move(candidates[fastest]);
}

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
