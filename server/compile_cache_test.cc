#include "server/compile_cache.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

class FakeExecutable : public runtime::Executable {
 public:
  explicit FakeExecutable(int64_t held = 0) : held_(held) {}
  int64_t held_bytes() const override { return held_; }
  absl::StatusOr<runtime::BufferPtr> Execute(runtime::Device&,
                                             const std::vector<runtime::BufferPtr>&,
                                             const runtime::ExecuteOptions&) override {
    return absl::UnimplementedError("fake");
  }
  const ir::Shape& result_shape() const override { return shape_; }
  const std::vector<ir::Shape>& parameter_shapes() const override { return params_; }

 private:
  ir::Shape shape_;
  std::vector<ir::Shape> params_;
  int64_t held_ = 0;
};

// The cache counts each entry's module and what its executable holds, and
// evicts the least recently used entries to stay within its bytes; a
// program larger than the whole budget is compiled but not kept.
TEST(CompileCacheTest, EvictsToStayWithinItsBytes) {
  CompileCache cache(100, 1000);
  auto compile_holding = [](int64_t held) {
    return [held]() -> absl::StatusOr<std::shared_ptr<runtime::Executable>> {
      return std::make_shared<FakeExecutable>(held);
    };
  };
  const std::string module(100, 'm');
  ASSERT_TRUE(cache.GetOrCompile("a", module + "a", compile_holding(300)).ok());
  ASSERT_TRUE(cache.GetOrCompile("b", module + "b", compile_holding(300)).ok());
  EXPECT_EQ(cache.bytes(), 2 * (101 + 300));
  ASSERT_TRUE(cache.GetOrCompile("a", module + "a", compile_holding(300))->hit);  // a is recent
  ASSERT_TRUE(cache.GetOrCompile("c", module + "c", compile_holding(300)).ok());  // evicts b
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * (101 + 300));
  EXPECT_TRUE(cache.GetOrCompile("a", module + "a", compile_holding(300))->hit);
  EXPECT_TRUE(cache.GetOrCompile("c", module + "c", compile_holding(300))->hit);
  // Too large alone: returned, never kept, and nothing evicted for it.
  auto huge = cache.GetOrCompile("h", module + "h", compile_holding(5000));
  ASSERT_TRUE(huge.ok());
  EXPECT_NE(huge->executable, nullptr);
  EXPECT_FALSE(cache.GetOrCompile("h", module + "h", compile_holding(5000))->hit);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * (101 + 300));
}

TEST(CompileCacheTest, HitAfterMissAndLruEviction) {
  CompileCache cache(2, int64_t{1} << 30);
  int compiles = 0;
  auto compile = [&]() -> absl::StatusOr<std::shared_ptr<runtime::Executable>> {
    ++compiles;
    return std::make_shared<FakeExecutable>();
  };
  auto a = cache.GetOrCompile("a", "program a", compile);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->hit);
  auto a2 = cache.GetOrCompile("a", "program a", compile);
  EXPECT_TRUE(a2->hit);
  EXPECT_EQ(a2->executable, a->executable);
  cache.GetOrCompile("b", "program b", compile).IgnoreError();
  cache.GetOrCompile("a", "program a", compile).IgnoreError();  // a is now most recent
  cache.GetOrCompile("c", "program c", compile).IgnoreError();  // evicts b
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(compiles, 3);
  EXPECT_TRUE(cache.GetOrCompile("a", "program a", compile)->hit);
  EXPECT_FALSE(cache.GetOrCompile("b", "program b", compile)->hit);
  EXPECT_EQ(compiles, 4);
}

// A key that collides (the same key for two different programs) never
// hands one program's executable to the other.
TEST(CompileCacheTest, AHitIsConfirmedByTheProgramItself) {
  CompileCache cache(4, int64_t{1} << 30);
  int compiles = 0;
  auto compile = [&]() -> absl::StatusOr<std::shared_ptr<runtime::Executable>> {
    ++compiles;
    return std::make_shared<FakeExecutable>();
  };
  auto first = cache.GetOrCompile("k", "program one", compile);
  auto other = cache.GetOrCompile("k", "program two", compile);
  ASSERT_TRUE(first.ok() && other.ok());
  EXPECT_FALSE(other->hit);
  EXPECT_NE(other->executable, first->executable);
  EXPECT_EQ(cache.collisions(), 1u);
  EXPECT_EQ(compiles, 2);
  // The entry now holds the second program.
  auto again = cache.GetOrCompile("k", "program two", compile);
  EXPECT_TRUE(again->hit);
  EXPECT_EQ(again->executable, other->executable);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(CompileCacheTest, ConcurrentRequestsCompileOnce) {
  CompileCache cache(8, int64_t{1} << 30);
  std::atomic<int> compiles{0};
  auto compile = [&]() -> absl::StatusOr<std::shared_ptr<runtime::Executable>> {
    ++compiles;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return std::make_shared<FakeExecutable>();
  };
  std::vector<std::thread> threads;
  std::atomic<int> hits{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto r = cache.GetOrCompile("k", "program k", compile);
      if (r.ok() && r->hit) ++hits;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(compiles.load(), 1);
  EXPECT_EQ(hits.load(), 7);
}

TEST(CompileCacheTest, FailuresAreNotCached) {
  CompileCache cache(4, int64_t{1} << 30);
  int calls = 0;
  auto failing = [&]() -> absl::StatusOr<std::shared_ptr<runtime::Executable>> {
    ++calls;
    return absl::InvalidArgumentError("bad");
  };
  EXPECT_FALSE(cache.GetOrCompile("x", "program x", failing).ok());
  EXPECT_FALSE(cache.GetOrCompile("x", "program x", failing).ok());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace kiln::server
