// A program's arena: steps take their planned arrays run after run, results
// never live in it, and an array held longer than planned is not written
// over.
#include "runtime/host/arena.h"

#include <cmath>
#include <cstring>

#include "compiler/ir/hlo_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/host/program.h"
#include "runtime/host/test_util.h"

namespace kiln::host {
namespace {

using ::testing::ElementsAreArray;

std::unique_ptr<ir::Module> ParseOrDie(const std::string& text) {
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? *std::move(module) : nullptr;
}

// A module and its entry's program.
struct Compiled {
  std::unique_ptr<ir::Module> module;
  ProgramCache cache;
  std::shared_ptr<const Program> program;
};

// Null (the test failed) when `text` does not parse or compile.
std::unique_ptr<Compiled> Compile(const std::string& text) {
  auto compiled = std::make_unique<Compiled>();
  compiled->module = ParseOrDie(text);
  if (compiled->module == nullptr) return nullptr;
  auto program = compiled->cache.Get(compiled->module->entry());
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return nullptr;
  compiled->program = *program;
  return compiled;
}

BufferPtr F32Buffer(std::vector<int64_t> dims, const std::vector<float>& values) {
  auto b = Buffer::FromLiteral(F32(std::move(dims), values), nullptr);
  EXPECT_TRUE(b.ok());
  return *b;
}

std::vector<float> FloatsOf(const Buffer& b) {
  const float* p = b.as<float>();
  return std::vector<float>(p, p + b.size_bytes() / sizeof(float));
}

// x, transposed, reversed along rows, transposed back, reversed along
// columns: three intermediates in the arena, the root outside it.
constexpr char kChain[] = R"(
HloModule m
ENTRY main {
  x = f32[2,3] parameter(0)
  a = f32[3,2] transpose(x), dimensions={1,0}
  b = f32[3,2] reverse(a), dimensions={0}
  c = f32[2,3] transpose(b), dimensions={1,0}
  ROOT d = f32[2,3] reverse(c), dimensions={1}
}
)";

// By hand: b[k][i] = x[i][2-k], c[i][k] = x[i][2-k], so d = x.
TEST(ArenaTest, StepsTakeTheirPlannedArraysEveryRunAndChargeOnlyTheRoot) {
  auto compiled = Compile(kChain);
  ASSERT_NE(compiled, nullptr);
  const Program& program = *compiled->program;
  EXPECT_EQ(program.arena_arrays(), 3);
  EXPECT_EQ(program.arena_bytes(), 128);  // a and c share bytes
  runtime::MemoryTracker memory(int64_t{1} << 20);
  ExecState st;
  st.memory = &memory;
  BufferPtr first;
  for (int run = 1; run <= 3; ++run) {
    std::vector<float> x = {1, 2, 3, 4, 5, static_cast<float>(run)};
    auto out = program.Run(st, std::vector<BufferPtr>{F32Buffer({2, 3}, x)});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_THAT(FloatsOf(**out), ElementsAreArray(x));
    EXPECT_EQ(program.arena_arrays_taken(), 3 * run);
    // The arena is charged while the program runs; afterwards only the
    // results are.
    EXPECT_EQ(memory.Stats().bytes_in_use, (run == 1 ? 1 : 2) * 24);
    if (run == 1) first = *out;
  }
  EXPECT_THAT(FloatsOf(*first), ElementsAreArray(std::vector<float>{1.0f, 2, 3, 4, 5, 1}));
}

// A result that is a reshape of an intermediate shares its storage: that
// intermediate takes no slice, so a later run leaves the result alone.
TEST(ArenaTest, AResultOfAnEarlierRunIsNotWrittenOver) {
  auto compiled = Compile(R"(
HloModule m
ENTRY main {
  x = f32[2,3] parameter(0)
  t = f32[3,2] transpose(x), dimensions={1,0}
  u = f32[3,2] reverse(t), dimensions={0}
  r = f32[6] reshape(u)
  ROOT o = (f32[6], f32[3,2]) tuple(r, t)
}
)");
  ASSERT_NE(compiled, nullptr);
  const Program& program = *compiled->program;
  ExecState st;
  auto first = program.Run(st, std::vector<BufferPtr>{F32Buffer({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      program.Run(st, std::vector<BufferPtr>{F32Buffer({2, 3}, {7, 8, 9, 10, 11, 12})});
  ASSERT_TRUE(second.ok()) << second.status();
  // t = [[1,4],[2,5],[3,6]]; u reverses its rows.
  EXPECT_THAT(FloatsOf(*(*first)->element(0)), ElementsAreArray(std::vector<float>{3.0f, 6, 2, 5, 1, 4}));
  EXPECT_THAT(FloatsOf(*(*first)->element(1)), ElementsAreArray(std::vector<float>{1.0f, 4, 2, 5, 3, 6}));
  EXPECT_THAT(FloatsOf(*(*second)->element(0)), ElementsAreArray(std::vector<float>{9.0f, 12, 8, 11, 7, 10}));
}

// Two results of one loop of the same shape: the slice planned for the
// second is not taken by the first, an output; and no result of a run is
// an array of the arena.
TEST(ArenaTest, EachResultTakesTheSlicePlannedForIt) {
  auto compiled = Compile(R"(
HloModule m
loop {
  p = f32[8] parameter(0)
  a = f32[8] negate(p)
  b = f32[8] exponential(p)
  ROOT t = (f32[8], f32[8]) tuple(a, b)
}
ENTRY main {
  x = f32[8] parameter(0)
  f = (f32[8], f32[8]) call(x), to_apply=loop
  g0 = f32[8] get-tuple-element(f), index=0
  g1 = f32[8] get-tuple-element(f), index=1
  r = f32[8] reverse(g1), dimensions={0}
  s = f32[8] add(r, x)
  ROOT o = (f32[8], f32[8]) tuple(g0, s)
}
)");
  ASSERT_NE(compiled, nullptr);
  const Program& program = *compiled->program;
  ASSERT_EQ(program.arena_arrays(), 1);  // f's second result (s may take r in place)
  runtime::MemoryTracker memory(int64_t{1} << 20);
  ExecState st;
  st.memory = &memory;
  const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7};
  auto out = program.Run(st, std::vector<BufferPtr>{F32Buffer({8}, x)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(program.arena_arrays_taken(), 1);
  for (int e = 0; e < 2; ++e) EXPECT_FALSE((*out)->element(e)->InArena()) << e;
  EXPECT_EQ(memory.Stats().bytes_in_use, 2 * 32);
  std::vector<float> negated, sums;
  for (int i = 0; i < 8; ++i) {
    negated.push_back(-x[i]);
    sums.push_back(std::exp(x[7 - i]) + x[i]);
  }
  EXPECT_THAT(FloatsOf(*(*out)->element(0)), ElementsAreArray(negated));
  EXPECT_THAT(FloatsOf(*(*out)->element(1)), ::testing::Pointwise(::testing::FloatNear(1e-3), sums));
}

// An offer gives a result only the array planned for it (or for the
// step's one array), and each array once.
TEST(ArenaTest, AnOfferGivesEachResultOnlyItsOwnArray) {
  const ir::Shape shape(ir::ElementType::kF32, {8});
  auto first = Buffer::Allocate(shape, nullptr), second = Buffer::Allocate(shape, nullptr);
  ASSERT_TRUE(first.ok() && second.ok());
  Offer offer;
  offer.Add(&*second, 1);
  EXPECT_EQ(offer.Take(shape, 0), nullptr);
  EXPECT_EQ(offer.Take(shape, ExecState::kScratch), nullptr);
  EXPECT_EQ(offer.Take(shape, 1), *second);
  EXPECT_EQ(offer.Take(shape, 1), nullptr);
  offer.Clear();
  offer.Add(&*first, -1);
  EXPECT_EQ(offer.Take(shape, 3), *first);
  offer.Clear();
  offer.Add(&*first, -1);
  EXPECT_EQ(offer.Take(shape, -1), *first);
}

// Whatever a step took, a run's result never holds the arena: an array of
// it in the result is copied out.
TEST(ArenaTest, AnArrayOfTheArenaInTheResultIsCopiedOut) {
  auto module = ParseOrDie(kChain);
  ASSERT_NE(module, nullptr);
  const ir::Computation& c = *module->entry();
  const ArenaPlan plan(c, passes::AssignBuffers(c), {-1, 0, 1, 2, 3}, 4);
  ArenaPool pool;
  runtime::MemoryTracker memory(int64_t{1} << 20);
  ArenaRun run(plan, pool, &memory);
  Offer* offer = run.Begin(0);
  ASSERT_NE(offer, nullptr);
  HostBufferPtr a = offer->Take(ir::Shape(ir::ElementType::kF32, {3, 2}), -1);
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 6; ++i) a->as<float>()[i] = static_cast<float>(i);
  HostBufferPtr alias = HostBuffer::Alias(a, ir::Shape(ir::ElementType::kF32, {6}));
  a.reset();
  ASSERT_TRUE(alias->InArena());
  auto result = run.Finish(HostBuffer::MakeTuple({alias}));
  ASSERT_TRUE(result.ok()) << result.status();
  const HostBufferPtr& e = (*result)->element(0);
  EXPECT_FALSE(e->InArena());
  EXPECT_THAT(FloatsOf(*e), ElementsAreArray(std::vector<float>{0, 1, 2, 3, 4, 5}));
}

// The arena run checks the plan: an array still held after its planned
// life is not offered again, nor is any array over its bytes, until it is
// released.
TEST(ArenaTest, AnArrayHeldPastItsLifeBlocksItsBytes) {
  auto module = ParseOrDie(kChain);
  ASSERT_NE(module, nullptr);
  const ir::Computation& c = *module->entry();
  const passes::BufferAssignment assignment = passes::AssignBuffers(c);
  // Steps: a, b, c, d (the parameter has none).
  const std::vector<int> step_of = {-1, 0, 1, 2, 3};
  const ArenaPlan plan(c, assignment, step_of, 4);
  ASSERT_EQ(plan.slice_count(), 3);
  ArenaPool pool;
  const ir::Shape rows(ir::ElementType::kF32, {3, 2}), cols(ir::ElementType::kF32, {2, 3});
  HostBufferPtr kept;
  {
    ArenaRun run(plan, pool, nullptr);
    Offer* offer = run.Begin(0);
    ASSERT_NE(offer, nullptr);
    EXPECT_EQ(offer->Take(cols, -1), nullptr);  // not the planned shape
    kept = offer->Take(rows, -1);
    ASSERT_NE(kept, nullptr);
    EXPECT_EQ(offer->Take(rows, -1), nullptr);  // taken once
    // b's bytes are not a's.
    offer = run.Begin(1);
    ASSERT_NE(offer, nullptr);
    HostBufferPtr b = offer->Take(rows, -1);
    ASSERT_NE(b, nullptr);
    EXPECT_NE(b->data(), kept->data());
    // c was planned over a's bytes, but a is still held.
    EXPECT_EQ(run.Begin(2), nullptr);
    EXPECT_EQ(run.Begin(3), nullptr);
    ASSERT_TRUE(run.Finish(nullptr).ok());
    EXPECT_EQ(run.taken(), 2);
  }
  {
    ArenaRun run(plan, pool, nullptr);
    EXPECT_EQ(run.Begin(0), nullptr);  // a is still held
    ASSERT_NE(run.Begin(1), nullptr);
    EXPECT_EQ(run.Begin(2), nullptr);
    ASSERT_TRUE(run.Finish(nullptr).ok());
  }
  const uint8_t* a_bytes = kept->data();
  kept.reset();
  {
    ArenaRun run(plan, pool, nullptr);
    Offer* offer = run.Begin(0);
    ASSERT_NE(offer, nullptr);
    HostBufferPtr a = offer->Take(rows, -1);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->data(), a_bytes);
    a.reset();
    ASSERT_NE(run.Begin(1), nullptr);
    offer = run.Begin(2);
    ASSERT_NE(offer, nullptr);
    HostBufferPtr cc = offer->Take(cols, -1);
    ASSERT_NE(cc, nullptr);
    EXPECT_EQ(cc->data(), a_bytes);
    ASSERT_TRUE(run.Finish(nullptr).ok());
  }
}

// Without the memory to charge the arena the program still runs, array by
// array.
TEST(ArenaTest, ARunTheArenaDoesNotFitRunsWithoutIt) {
  auto compiled = Compile(kChain);
  ASSERT_NE(compiled, nullptr);
  const Program& program = *compiled->program;
  // Room for the argument, the root and one intermediate at a time, not
  // for the 128-byte arena besides.
  runtime::MemoryTracker memory(24 * 3 + 64);
  ExecState st;
  st.memory = &memory;
  auto x = Buffer::FromLiteral(F32({2, 3}, {1, 2, 3, 4, 5, 6}), &memory);
  ASSERT_TRUE(x.ok());
  auto out = program.Run(st, std::vector<BufferPtr>{*x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(FloatsOf(**out), ElementsAreArray(std::vector<float>{1.0f, 2, 3, 4, 5, 6}));
  EXPECT_EQ(program.arena_arrays_taken(), 0);
}

}  // namespace
}  // namespace kiln::host
