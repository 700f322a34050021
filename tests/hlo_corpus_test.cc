// Runs every module of tests/data/hlo through `kiln run` and compares each
// output with the NumPy-computed expectation stored beside it.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "client/npy.h"
#include "compiler/ir/fingerprint.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/hlo_printer.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"
#include "tests/hlo_corpus.h"

namespace kiln {
namespace {

class HloCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HloCorpusTest, MatchesNumpy) { CheckCorpusModule(GetParam(), ""); }

// Printing then parsing every corpus module gives the same text and the
// same fingerprint.
TEST_P(HloCorpusTest, TextRoundTripIsAFixedPoint) {
  std::ifstream in(kCorpus / (GetParam() + ".hlo"));
  const std::string text(std::istreambuf_iterator<char>(in), {});
  auto first = ir::ParseModule(text);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(ir::Verify(**first).ok());
  const std::string printed = ir::PrintModule(**first);
  auto second = ir::ParseModule(printed);
  ASSERT_TRUE(second.ok()) << second.status() << "\n" << printed;
  ASSERT_TRUE(ir::Verify(**second).ok());
  EXPECT_EQ(ir::PrintModule(**second), printed);
  EXPECT_EQ(ir::Fingerprint(**second), ir::Fingerprint(**first));
}

INSTANTIATE_TEST_SUITE_P(Corpus, HloCorpusTest, ::testing::ValuesIn(CaseNames()),
                         [](const auto& info) { return info.param; });

// The corpus must exercise every op of the core set.
TEST(HloCorpusCoverage, EveryCoreOpAppears) {
  std::string all;
  for (const std::string& name : CaseNames()) {
    std::ifstream in(kCorpus / (name + ".hlo"));
    all += std::string(std::istreambuf_iterator<char>(in), {});
  }
  for (const char* op :
       {"parameter(", "constant(", "iota(", "abs(", "convert(", "compare(", "select(",
        "clamp(", "broadcast(", "reshape(", "transpose(", "slice(", "dynamic-slice(",
        "dynamic-update-slice(", "concatenate(", "pad(", "reverse(", "reduce(",
        "reduce-window(", "select-and-scatter(", "dot(", "convolution(", "gather(",
        "scatter(", "sort(", "rng(", "tuple(", "get-tuple-element(", "call(", "while(",
        "conditional(", "outfeed(", "after-all(", "all-reduce(", "bitcast-convert(",
        "replica-id("}) {
    EXPECT_NE(all.find(std::string(" ") + op), std::string::npos) << op;
  }
}

}  // namespace
}  // namespace kiln
