// Test-only: table cases of modules the verifier must reject, shared by the
// shape-inference tests. Each case is the body of an entry computation whose
// instruction `bad` is at fault; the check is that the verifier (not the
// parser) rejects it with InvalidArgument, naming `bad` and the problem.
#ifndef KILN_COMPILER_IR_REJECTION_TEST_UTIL_H_
#define KILN_COMPILER_IR_REJECTION_TEST_UTIL_H_

#include <functional>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"

namespace kiln::ir::testing_util {

// Scalar computations the cases call by name.
inline constexpr absl::string_view kHelperComputations = R"(
add { x = f32[] parameter(0) y = f32[] parameter(1) ROOT r = f32[] add(x, y) }
addi { x = s32[] parameter(0) y = s32[] parameter(1) ROOT r = s32[] add(x, y) }
lt { x = f32[] parameter(0) y = f32[] parameter(1) ROOT r = pred[] compare(x, y), direction=LT }
id { x = f32[] parameter(0) ROOT r = f32[] copy(x) }
idi { x = s32[] parameter(0) ROOT r = s32[] copy(x) }
isneg { x = f32[] parameter(0) z = f32[] constant(0) ROOT r = pred[] compare(x, z), direction=LT }
pair { a = f32[] parameter(0) b = s32[] parameter(1) c = f32[] parameter(2) d = s32[] parameter(3) ROOT r = f32[] add(a, c) }
)";

struct RejectionCase {
  std::string label;    // the test's name
  std::string entry;    // body of ENTRY e; the faulty instruction is `bad`
  std::string problem;  // the part of the message naming the rejection
  // Applied to `bad` after parsing, for what the text cannot express.
  std::function<void(Instruction&)> mutate = nullptr;
};

// Failure output names the case instead of dumping its bytes.
inline void PrintTo(const RejectionCase& c, std::ostream* os) { *os << c.label; }

inline std::string CaseName(const ::testing::TestParamInfo<RejectionCase>& info) {
  return info.param.label;
}

inline void ExpectRejection(const RejectionCase& c) {
  const std::string text =
      absl::StrCat(kHelperComputations, "ENTRY e {\n", c.entry, "\n}\n");
  auto m = ParseModule(text);
  // A case the parser stops would prove nothing about the verifier.
  ASSERT_TRUE(m.ok()) << m.status() << "\n" << text;
  Instruction* bad = nullptr;
  for (const auto& instr : (*m)->entry()->instructions()) {
    if (instr->name() == "bad") bad = instr.get();
  }
  ASSERT_NE(bad, nullptr) << text;
  if (c.mutate) c.mutate(*bad);
  absl::Status st = Verify(**m);
  ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st << "\n" << text;
  const std::string msg(st.message());
  EXPECT_NE(msg.find("computation e, instruction bad ("), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(c.problem), std::string::npos)
      << "want: " << c.problem << "\ngot:  " << msg;
}

}  // namespace kiln::ir::testing_util

#endif  // KILN_COMPILER_IR_REJECTION_TEST_UTIL_H_
