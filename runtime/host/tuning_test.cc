// Kernels chosen by measurement: the choice, its record, and f32 dots on
// either GEMM library.
#include "runtime/host/tuning.h"

#include <chrono>
#include <cstdlib>
#include <limits>
#include <thread>

#include "compiler/ir/hlo_parser.h"
#include "gtest/gtest.h"
#include "runtime/host/gemm.h"
#include "runtime/host/kernel.h"

namespace kiln::host {
namespace {

std::unique_ptr<ir::Module> Parse(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

// A kernel that returns its operand after `delay`, and counts its runs.
NamedKernel Sleeper(const std::string& name, std::chrono::milliseconds delay,
                    int* runs) {
  return {name,
          [delay, runs](ExecState&, const std::vector<BufferPtr>& ops)
              -> absl::StatusOr<BufferPtr> {
            ++*runs;
            std::this_thread::sleep_for(delay);
            return ops[0];
          }};
}

// The name of the kernel ChooseKernel returned, found by running it.
std::string RunAndName(const Kernel& kernel,
                       const std::vector<std::string>& names,
                       const std::vector<int*>& runs) {
  std::vector<int> before;
  for (int* r : runs) before.push_back(*r);
  auto b = Buffer::Allocate(ir::Shape(ir::ElementType::kF32, {4}), nullptr);
  ExecState st;
  EXPECT_TRUE(kernel(st, {*b}).ok());
  for (size_t i = 0; i < runs.size(); ++i) {
    if (*runs[i] != before[i]) return names[i];
  }
  return "";
}

class TuningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("KILN_KERNEL_TUNING");
    unsetenv("KILN_CONV_TUNING");
    module_ = Parse(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}
)");
    ASSERT_NE(module_, nullptr);
    instr_ = module_->entry()->root();
  }
  void TearDown() override {
    unsetenv("KILN_KERNEL_TUNING");
    unsetenv("KILN_CONV_TUNING");
  }
  std::vector<NamedKernel> Candidates() {
    return {Sleeper("slow", std::chrono::milliseconds(20), &slow_runs_),
            Sleeper("fast", std::chrono::milliseconds(0), &fast_runs_)};
  }
  std::string Chosen(NamedKernel k) {
    return RunAndName(k.kernel, {"slow", "fast"}, {&slow_runs_, &fast_runs_});
  }

  std::unique_ptr<ir::Module> module_;
  const ir::Instruction* instr_ = nullptr;
  int slow_runs_ = 0, fast_runs_ = 0;
};

TEST_F(TuningTest, MeasuringKeepsTheFastestAndRecordsIt) {
  TuningRecord record;
  TuningScope scope(&record);
  NamedKernel chosen = ChooseKernel(*instr_, Candidates(), /*measure=*/true);
  EXPECT_EQ(chosen.name, "fast");
  // Each warmed up and ran once timed; the slow one, far from the best,
  // took no part in the further rounds, nor did the fast one alone.
  EXPECT_EQ(slow_runs_, 2);
  EXPECT_EQ(fast_runs_, 2);
  EXPECT_EQ(Chosen(std::move(chosen)), "fast");
  EXPECT_EQ(record.Find(*instr_), "fast");
}

// Candidates are timed on a compute worker, where programs run, so that
// the compile's thread never starts an OpenMP team of its own.
TEST_F(TuningTest, CandidatesAreTimedOnAComputeWorker) {
  std::vector<std::thread::id> ran_on;
  auto recorder = [&ran_on](const std::string& name) {
    return NamedKernel{name,
                       [&ran_on](ExecState&, const std::vector<BufferPtr>& ops)
                           -> absl::StatusOr<BufferPtr> {
                         ran_on.push_back(std::this_thread::get_id());
                         return ops[0];
                       }};
  };
  TuningRecord record;
  TuningScope scope(&record);
  ChooseKernel(*instr_, {recorder("a"), recorder("b")}, /*measure=*/true);
  ASSERT_FALSE(ran_on.empty());
  for (const std::thread::id& id : ran_on)
    EXPECT_NE(id, std::this_thread::get_id());
  EXPECT_TRUE(record.Find(*instr_).has_value());
}

TEST_F(TuningTest, WithoutMeasuringTheFirstIsKeptAndNothingRuns) {
  TuningRecord record;
  TuningScope scope(&record);
  EXPECT_EQ(ChooseKernel(*instr_, Candidates(), /*measure=*/false).name,
            "slow");
  EXPECT_EQ(slow_runs_ + fast_runs_, 0);
  EXPECT_EQ(record.size(), 0u);
}

TEST_F(TuningTest, EitherVariableTurnsTuningOff) {
  for (const char* variable : {"KILN_KERNEL_TUNING", "KILN_CONV_TUNING"}) {
    setenv(variable, "0", 1);
    EXPECT_FALSE(KernelTuningEnabled()) << variable;
    EXPECT_EQ(ChooseKernel(*instr_, Candidates(), /*measure=*/true).name,
              "slow")
        << variable;
    unsetenv(variable);
  }
  EXPECT_EQ(slow_runs_ + fast_runs_, 0);
  setenv("KILN_KERNEL_TUNING", "1", 1);
  EXPECT_TRUE(KernelTuningEnabled());
}

TEST_F(TuningTest, ARecordedChoiceIsBuiltWithoutTiming) {
  TuningRecord record;
  record.Set(*instr_, "slow");
  TuningScope scope(&record);
  EXPECT_EQ(ChooseKernel(*instr_, Candidates(), /*measure=*/true).name, "slow");
  EXPECT_EQ(slow_runs_ + fast_runs_, 0);
  // A recorded name no longer offered is measured again.
  TuningRecord stale;
  stale.Set(*instr_, "gone");
  TuningScope stale_scope(&stale);
  EXPECT_EQ(ChooseKernel(*instr_, Candidates(), /*measure=*/true).name, "fast");
  EXPECT_EQ(stale.Find(*instr_), "fast");
}

// Values of a small reference product, in double.
std::vector<double> Reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              const std::vector<float>& a,
                              const std::vector<float>& b) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) {
        c[i * n + j] += static_cast<double>(ta ? a[p * m + i] : a[i * k + p]) *
                        (tb ? b[j * k + p] : b[p * n + j]);
      }
    }
  }
  return c;
}

// Both libraries, every transpose, with C overwritten (beta 0: C is not
// read, NaN in it or not) and accumulated into (C = A B + beta C).
TEST(GemmTest, BothLibrariesComputeTheProductForEveryTransposeAndBeta) {
  const int64_t m = 37, n = 29, k = 53;
  std::vector<float> a(m * k), b(k * n), c0(m * n);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = 0.01f * static_cast<float>(i % 23) - 0.1f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = 0.02f * static_cast<float>(i % 19) - 0.15f;
  for (size_t i = 0; i < c0.size(); ++i)
    c0[i] = 0.5f * static_cast<float>(i % 5) - 1.0f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<double> product = Reference(ta, tb, m, n, k, a, b);
      for (GemmLibrary library :
           {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas}) {
        for (float beta : {0.0f, 1.0f, 0.9f, -2.0f}) {
          std::vector<float> c = c0;
          if (beta == 0)
            c.assign(m * n, std::numeric_limits<float>::quiet_NaN());
          Gemm(library, ta, tb, m, n, k, a.data(), b.data(), c.data(), beta);
          for (int64_t i = 0; i < m * n; ++i) {
            const double want = product[i] + (beta == 0 ? 0.0 : beta * c0[i]);
            ASSERT_NEAR(c[i], want, 1e-4)
                << "ta " << ta << " tb " << tb << " library "
                << static_cast<int>(library) << " beta " << beta << " at " << i;
          }
        }
      }
    }
  }
}

// An f32 dot large enough to time records which library it runs on, and a
// compile that names either one builds a kernel computing the product.
TEST(DotTuningTest, AnF32DotRecordsItsLibraryAndEitherComputesTheProduct) {
  unsetenv("KILN_KERNEL_TUNING");
  unsetenv("KILN_CONV_TUNING");
  // 128 x 96 x 160: about two million multiply-adds, within the timed range.
  std::unique_ptr<ir::Module> module = Parse(R"(
HloModule m
ENTRY main {
  a = f32[128,160] parameter(0)
  b = f32[96,160] parameter(1)
  ROOT d = f32[128,96] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Instruction& dot = *module->entry()->root();
  const int64_t m = 128, n = 96, k = 160;
  std::vector<float> a(m * k), b(n * k);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = 0.01f * static_cast<float>(i % 31) - 0.15f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = 0.02f * static_cast<float>(i % 13) - 0.12f;
  const std::vector<double> want = Reference(false, true, m, n, k, a, b);
  auto operand = [](const std::vector<float>& values,
                    std::vector<int64_t> dims) {
    auto buf = Buffer::Allocate(
        ir::Shape(ir::ElementType::kF32, std::move(dims)), nullptr);
    std::copy(values.begin(), values.end(), (*buf)->as<float>());
    return *buf;
  };
  const std::vector<BufferPtr> ops = {operand(a, {m, k}), operand(b, {n, k})};
  {
    TuningRecord record;
    TuningScope scope(&record);
    ASSERT_TRUE(MakeDotKernel(dot).ok());
    const std::optional<std::string> chosen = record.Find(dot);
    ASSERT_TRUE(chosen.has_value());
    EXPECT_TRUE(*chosen == "onednn" || *chosen == "openblas") << *chosen;
  }
  for (const std::string library : {"onednn", "openblas"}) {
    TuningRecord record;
    record.Set(dot, library);
    TuningScope scope(&record);
    absl::StatusOr<Kernel> kernel = MakeDotKernel(dot);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_EQ(record.Find(dot), library);
    ExecState st;
    absl::StatusOr<BufferPtr> out = (*kernel)(st, ops);
    ASSERT_TRUE(out.ok()) << out.status();
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_NEAR((*out)->as<float>()[i], want[i], 1e-4)
          << library << " at " << i;
    }
  }
  // Too small to time: nothing is recorded, and the default runs.
  std::unique_ptr<ir::Module> small = Parse(R"(
HloModule m
ENTRY main {
  a = f32[8,8] parameter(0)
  b = f32[8,8] parameter(1)
  ROOT d = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)");
  ASSERT_NE(small, nullptr);
  TuningRecord record;
  TuningScope scope(&record);
  ASSERT_TRUE(MakeDotKernel(*small->entry()->root()).ok());
  EXPECT_EQ(record.size(), 0u);
}

}  // namespace
}  // namespace kiln::host
