#include "base/json.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(JsonTest, ReadsXlaBackendConfigs) {
  auto v = ParseJson(
      R"( {"gemm_backend_config":{"alpha_real":1,"beta":-0.5e1,"dot_dimension_numbers":)"
      R"({"lhs_contracting_dimensions":["1"],"rhs_batch_dimensions":[]},"grad_x":false,)"
      R"("epilogue":"BIAS_RELU","name":"a\"b\\c\u00e9\n"},"x":null} )");
  ASSERT_TRUE(v.ok()) << v.status();
  const JsonValue* gemm = v->Find("gemm_backend_config");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->Find("alpha_real")->AsInt(), 1);
  EXPECT_EQ(gemm->Find("beta")->AsNumber(), -5.0);
  EXPECT_EQ(gemm->Find("beta")->AsInt(), -5);
  EXPECT_EQ(gemm->Find("grad_x")->AsBool(), false);
  EXPECT_EQ(*gemm->Find("epilogue")->AsString(), "BIAS_RELU");
  EXPECT_EQ(*gemm->Find("name")->AsString(), "a\"b\\c\xc3\xa9\n");
  const JsonValue* dims = gemm->Find("dot_dimension_numbers");
  ASSERT_NE(dims, nullptr);
  const auto* contracting = dims->Find("lhs_contracting_dimensions")->AsArray();
  ASSERT_NE(contracting, nullptr);
  ASSERT_EQ(contracting->size(), 1u);
  EXPECT_EQ((*contracting)[0].AsInt(), 1);  // a number written as a string
  EXPECT_TRUE(dims->Find("rhs_batch_dimensions")->AsArray()->empty());
  EXPECT_EQ(v->Find("x")->kind(), JsonValue::Kind::kNull);
  EXPECT_EQ(v->Find("missing"), nullptr);
  EXPECT_EQ(gemm->Find("alpha_real")->AsString(), nullptr);
  EXPECT_EQ(JsonValue().AsInt(), std::nullopt);
  // protobuf writes non-finite and 64-bit numbers as strings.
  auto special = ParseJson(R"(["NaN", "Infinity", "-Infinity", "4194304", "x"])");
  ASSERT_TRUE(special.ok());
  const auto& list = *special->AsArray();
  EXPECT_TRUE(std::isnan(*list[0].AsNumber()));
  EXPECT_EQ(*list[1].AsNumber(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(*list[2].AsNumber(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(*list[3].AsNumber(), 4194304.0);
  EXPECT_EQ(list[4].AsNumber(), std::nullopt);
}

TEST(JsonTest, RefusesMalformedTextNamingWhere) {
  for (const char* bad : {"", "{", "{\"a\" 1}", "[1,]", "[1 2]", "{\"a\":1,}", "\"abc",
                          "tru", "01x", "-", "1.", "1e", "\"\\q\"", "{} {}", "\"\\u12\"",
                          "{1:2}"}) {
    auto v = ParseJson(bad);
    EXPECT_FALSE(v.ok()) << bad;
    if (!v.ok()) {
      EXPECT_NE(v.status().message().find("JSON at offset"), std::string::npos) << bad;
    }
  }
  // Text past the size bound is refused before it is read.
  EXPECT_FALSE(ParseJson("[" + std::string(kMaxJsonBytes, ' ') + "]").ok());
  // Nesting past the bound is refused rather than recursing without end.
  EXPECT_FALSE(ParseJson(std::string(100000, '[') + std::string(100000, ']')).ok());
  EXPECT_TRUE(ParseJson(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']')).ok());
}

}  // namespace
}  // namespace kiln
