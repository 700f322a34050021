#include "server/persistent_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <functional>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

class PersistentCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / absl::StrCat("kiln_pcache_", getpid(), "_", rand()))
               .string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static PersistentKey Key(const std::string& module = std::string(64, 'a')) {
    return {module, "cpu", "", "seed=42", "0.4.0", "onednn 3.0; cpu X"};
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    for (const auto& f : fs::directory_iterator(dir_)) out.push_back(f.path().filename().string());
    return out;
  }

  std::string dir_;
};

TEST_F(PersistentCacheTest, StoresAndFindsTheExactEntry) {
  auto cache = PersistentCache::Open(dir_ + "/nested", 1 << 20);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->Find(Key()).reason, "absent");
  const std::string artifact("\0binary\xff artifact", 17);
  ASSERT_TRUE((*cache)->Store(Key(), artifact).ok());
  PersistentCache::Lookup hit = (*cache)->Find(Key());
  ASSERT_TRUE(hit.artifact.has_value()) << hit.explanation;
  EXPECT_EQ(*hit.artifact, artifact);
  // Another process (here: another instance) sees it too.
  auto other = PersistentCache::Open(dir_ + "/nested", 1 << 20);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->Find(Key()).artifact.has_value());
  EXPECT_GT((*other)->bytes(), 17);
}

TEST_F(PersistentCacheTest, AMissNamesThePartThatDiffered) {
  auto cache = PersistentCache::Open(dir_, 1 << 20);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Store(Key(), "x").ok());
  struct Case {
    std::string PersistentKey::*member;
    std::string value, reason, words;
  } cases[] = {
      {&PersistentKey::backend, "tpu", "backend", "the backend kind differed: cached 'cpu', now 'tpu'"},
      {&PersistentKey::config, "chip=v4", "config", "the backend config differed"},
      {&PersistentKey::options, "seed=7", "options", "the compile options differed: cached 'seed=42', now 'seed=7'"},
      {&PersistentKey::kiln_version, "0.5.0", "kiln_version", "Kiln's version differed"},
      {&PersistentKey::dependencies, "onednn 3.1; cpu X", "dependencies",
       "the backend's libraries or processor differed"},
  };
  for (const Case& c : cases) {
    PersistentKey key = Key();
    key.*c.member = c.value;
    PersistentCache::Lookup miss = (*cache)->Find(key);
    EXPECT_FALSE(miss.artifact.has_value());
    EXPECT_EQ(miss.reason, c.reason);
    EXPECT_NE(miss.explanation.find(c.words), std::string::npos) << miss.explanation;
  }
  PersistentCache::Lookup other_module = (*cache)->Find(Key(std::string(64, 'b')));
  EXPECT_EQ(other_module.reason, "absent");
}

TEST_F(PersistentCacheTest, DamagedEntriesAreMissesAndRemoved) {
  auto cache = PersistentCache::Open(dir_, 1 << 20);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Store(Key(), std::string(1000, 'z')).ok());
  ASSERT_EQ(Files().size(), 1u);
  const std::string path = dir_ + "/" + Files()[0];
  for (int damage = 0; damage < 3; ++damage) {
    ASSERT_TRUE((*cache)->Store(Key(), std::string(1000, 'z')).ok());
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (damage == 0) bytes.resize(bytes.size() - 10);        // cut short
    if (damage == 1) bytes[bytes.size() - 5] = 'y';            // a flipped byte
    if (damage == 2) bytes = "kiln-compile-cache 1\nmodule"; // a broken header
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    PersistentCache::Lookup miss = (*cache)->Find(Key());
    EXPECT_FALSE(miss.artifact.has_value());
    EXPECT_EQ(miss.reason, "corrupt") << damage;
    EXPECT_FALSE(fs::exists(path));
  }
}

// What a hostile or broken writer of the directory could leave at an
// entry's path: none of it crashes, hangs or allocates by its header.
TEST_F(PersistentCacheTest, AnythingButAWholeEntryAtItsPathIsAMiss) {
  auto cache = PersistentCache::Open(dir_, 1 << 20);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Store(Key(), "artifact").ok());
  ASSERT_EQ(Files().size(), 1u);
  const std::string path = dir_ + "/" + Files()[0];
  std::string header;
  {
    std::ifstream in(path, std::ios::binary);
    std::getline(in, header, '\0');
  }
  const std::string good_header = header.substr(0, header.find("artifact 8 "));
  struct Case {
    std::string name;
    std::function<void()> make;
  } cases[] = {
      {"a huge declared size",
       [&] {
         std::ofstream(path, std::ios::binary | std::ios::trunc)
             << good_header << "artifact 18446744073709551615 abc\nxyz";
       }},
      {"a declared size past the bound",
       [&] {
         std::ofstream(path, std::ios::binary | std::ios::trunc)
             << good_header << "artifact 999999999 abc\nxyz";
       }},
      {"no line end at all",
       [&] { std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(200000, 'k'); }},
      {"a link to /dev/zero", [&] { fs::create_symlink("/dev/zero", path); }},
      {"a FIFO", [&] { ASSERT_EQ(mkfifo(path.c_str(), 0600), 0); }},
      {"a directory", [&] { fs::create_directory(path); }},
  };
  for (const Case& c : cases) {
    fs::remove_all(path);
    c.make();
    PersistentCache::Lookup miss = (*cache)->Find(Key());
    EXPECT_FALSE(miss.artifact.has_value()) << c.name;
    EXPECT_EQ(miss.reason, "corrupt") << c.name;
    // A damaged entry is removed (a directory cannot be unlinked).
    if (c.name != "a directory") EXPECT_FALSE(fs::exists(fs::symlink_status(path))) << c.name;
  }
  fs::remove_all(path);
  ASSERT_TRUE((*cache)->Store(Key(), "artifact").ok());
  EXPECT_TRUE((*cache)->Find(Key()).artifact.has_value());
}

TEST_F(PersistentCacheTest, TheDirectoryIsBoundedLeastRecentlyUsedFirst) {
  auto cache = PersistentCache::Open(dir_, 3500);
  ASSERT_TRUE(cache.ok());
  auto key = [](char c) { return Key(std::string(64, c)); };
  ASSERT_TRUE((*cache)->Store(key('a'), std::string(1000, '1')).ok());
  ASSERT_TRUE((*cache)->Store(key('b'), std::string(1000, '2')).ok());
  // 'a' is used after 'b' was written: 'b' is now the least recently used.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE((*cache)->Find(key('a')).artifact.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE((*cache)->Store(key('c'), std::string(1000, '3')).ok());
  ASSERT_TRUE((*cache)->Store(key('d'), std::string(1000, '4')).ok());
  EXPECT_LE((*cache)->bytes(), 3500);
  EXPECT_FALSE((*cache)->Find(key('b')).artifact.has_value());
  EXPECT_TRUE((*cache)->Find(key('d')).artifact.has_value());
  // An entry larger than the bound alone is not written.
  ASSERT_TRUE((*cache)->Store(key('e'), std::string(5000, '5')).ok());
  EXPECT_EQ((*cache)->Find(key('e')).reason, "absent");
}

TEST_F(PersistentCacheTest, ConcurrentWritersLeaveWholeEntriesAndNoTemporaries) {
  auto a = PersistentCache::Open(dir_, 1 << 24);
  auto b = PersistentCache::Open(dir_, 1 << 24);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      PersistentCache& cache = t % 2 ? **a : **b;
      for (int i = 0; i < 20; ++i) {
        EXPECT_TRUE(cache.Store(Key(), std::string(10000 + t, static_cast<char>('a' + t))).ok());
        PersistentCache::Lookup l = cache.Find(Key());
        // Whatever a reader finds is one writer's entry, whole.
        ASSERT_TRUE(l.artifact.has_value()) << l.explanation;
        const char c = (*l.artifact)[0];
        EXPECT_EQ(*l.artifact, std::string(10000 + (c - 'a'), c));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& f : Files()) EXPECT_EQ(f.rfind(".tmp-", 0), std::string::npos) << f;
}

TEST_F(PersistentCacheTest, AnUnwritableDirectoryIsRefusedAtOpen) {
  auto cache = PersistentCache::Open("/proc/kiln-cannot-exist", 1 << 20);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cache.status().message().find("--compile_cache_dir"), std::string::npos);
}

}  // namespace
}  // namespace kiln::server
