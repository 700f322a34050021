#include "compiler/passes/clone.h"

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "compiler/ir/fingerprint.h"
#include "compiler/passes/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::passes {
namespace {

using ::testing::HasSubstr;

constexpr absl::string_view kModule = R"(
HloModule cloned

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

unused {
  ROOT z = f32[] constant(0)
}

ENTRY main {
  x = f32[2,3] parameter(0)
  k = f32[2,3] constant({{1, -0, nan}, {inf, 0.5, -2}})
  sum = f32[2,3] add(x, k)
  zero = f32[] constant(0)
  r = f32[2] reduce(sum, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[2], f32[2,3]) tuple(r, sum)
}
)";

TEST(CloneTest, CopyIsTheSameProgramAndSharesNothing) {
  auto module = Parse(kModule);
  ASSERT_NE(module, nullptr);
  // A NaN whose payload the text cannot show.
  ir::Instruction* k = nullptr;
  for (const auto& instr : module->entry()->instructions()) {
    if (instr->name() == "k") k = instr.get();
  }
  ASSERT_NE(k, nullptr);
  const uint32_t payload_nan = 0x7fc01234;
  std::memcpy(k->mutable_attrs().literal.mutable_bytes().data() + 8,
              &payload_nan, 4);

  absl::StatusOr<std::unique_ptr<ir::Module>> copy = CloneModule(*module);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(ir::PrintModule(**copy), ir::PrintModule(*module));
  EXPECT_EQ(ir::CanonicalBytes(**copy), ir::CanonicalBytes(*module));
  EXPECT_EQ((*copy)->name(), "cloned");
  EXPECT_EQ((*copy)->entry()->name(), "main");
  EXPECT_TRUE(ir::Verify(**copy).ok());

  absl::flat_hash_set<const void*> originals;
  for (const auto& c : module->computations()) {
    originals.insert(c.get());
    for (const auto& instr : c->instructions()) originals.insert(instr.get());
  }
  for (const auto& c : (*copy)->computations()) {
    EXPECT_FALSE(originals.contains(c.get()));
    for (const auto& instr : c->instructions()) {
      EXPECT_FALSE(originals.contains(instr.get()));
      EXPECT_EQ(instr->parent(), c.get());
      for (const ir::Instruction* op : instr->operands()) {
        EXPECT_EQ(op->parent(), c.get());
      }
      for (const ir::Computation* callee : instr->called()) {
        EXPECT_FALSE(originals.contains(callee));
      }
    }
  }
  // Changing the copy leaves the original alone.
  (*copy)->entry()->root()->set_name("renamed");
  EXPECT_EQ(module->entry()->root()->name(), "t");
}

TEST(CloneTest, FilterDropsInstructionsAndComputations) {
  auto module = Parse(R"(
HloModule m
unused {
  ROOT z = f32[] constant(0)
}
ENTRY main {
  x = f32[4] parameter(0)
  dead = f32[4] negate(x)
  ROOT a = f32[4] abs(x)
}
)");
  CloneFilter filter;
  filter.keep_computation = [](const ir::Computation& c) {
    return c.name() != "unused";
  };
  filter.keep_instruction = [](const ir::Instruction& i) {
    return i.name() != "dead";
  };
  absl::StatusOr<std::unique_ptr<ir::Module>> copy =
      CloneModule(*module, filter);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(Structure(**copy), Structure(R"(
HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  ROOT a = f32[4] abs(x)
}
)"));
  EXPECT_EQ((*copy)->computations().size(), 1u);
}

TEST(CloneTest, DroppingWhatIsStillUsedIsAnInternalError) {
  auto module = Parse(R"(
HloModule m
neg {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}
ENTRY main {
  x = f32[] parameter(0)
  c = f32[] call(x), to_apply=neg
  ROOT a = f32[] abs(c)
}
)");
  CloneFilter drop_operand;
  drop_operand.keep_instruction = [](const ir::Instruction& i) {
    return i.name() != "c";
  };
  absl::StatusOr<std::unique_ptr<ir::Module>> copy =
      CloneModule(*module, drop_operand);
  ASSERT_FALSE(copy.ok());
  EXPECT_EQ(copy.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(copy.status().message(), HasSubstr("keeps a but drops its"));

  CloneFilter drop_callee;
  drop_callee.keep_computation = [](const ir::Computation& c) {
    return c.name() != "neg";
  };
  copy = CloneModule(*module, drop_callee);
  ASSERT_FALSE(copy.ok());
  EXPECT_THAT(copy.status().message(), HasSubstr("drops its callee neg"));

  CloneFilter drop_entry;
  drop_entry.keep_computation = [](const ir::Computation& c) {
    return c.name() != "main";
  };
  copy = CloneModule(*module, drop_entry);
  ASSERT_FALSE(copy.ok());
  EXPECT_THAT(copy.status().message(), HasSubstr("entry computation"));
}

}  // namespace
}  // namespace kiln::passes
