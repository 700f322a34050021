#include "server/tokens.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

class TokensFile {
 public:
  explicit TokensFile(const std::string& text, mode_t mode = 0600) {
    char name[] = "/tmp/kiln_tokens_XXXXXX";
    int fd = mkstemp(name);
    path_ = name;
    close(fd);
    Write(text);
    chmod(path_.c_str(), mode);
  }
  ~TokensFile() { std::remove(path_.c_str()); }
  void Write(const std::string& text) {
    std::ofstream out(path_, std::ios::trunc);
    out << text;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(TokenStoreTest, AuthenticatesKnownTokensByName) {
  TokensFile file("# trainers\ntrainer-a  aaaaaaaaaaaaaaaa1\n\n\tproducer\tbbbbbbbbbbbbbbbb2  \n");
  auto store = TokenStore::Load(file.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto a = (*store)->Authenticate("Bearer aaaaaaaaaaaaaaaa1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "trainer-a");
  auto b = (*store)->Authenticate("bearer bbbbbbbbbbbbbbbb2");  // the scheme is case-insensitive
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, "producer");
}

TEST(TokenStoreTest, RefusesMissingWrongAndMalformedAuthorizations) {
  TokensFile file("a aaaaaaaaaaaaaaaa1\n");
  auto store = TokenStore::Load(file.path());
  ASSERT_TRUE(store.ok()) << store.status();
  struct Case {
    std::string authorization, message;
  } cases[] = {
      {"", "requires a bearer token"},
      {"Basic YWxhZGRpbjpvcGVuc2VzYW1l", "not a bearer token"},
      {"Bearer", "not a bearer token"},
      {"Bearer ", "unknown bearer token"},
      {"Bearer aaaaaaaaaaaaaaaa", "unknown bearer token"},     // a prefix
      {"Bearer aaaaaaaaaaaaaaaa12", "unknown bearer token"},   // longer
      {"Bearer aaaaaaaaaaaaaaaa2", "unknown bearer token"},    // last character
      {"Bearer  aaaaaaaaaaaaaaaa1", "unknown bearer token"},   // extra space
  };
  for (const Case& c : cases) {
    auto r = (*store)->Authenticate(c.authorization);
    ASSERT_FALSE(r.ok()) << c.authorization;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << c.authorization;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
  }
}

TEST(TokenStoreTest, ParseNamesTheLineOfEachMistake) {
  struct Case {
    std::string text, message;
  } cases[] = {
      {"only-a-name\n", "x:1: expected a name and a token"},
      {"# c\na b c\n", "x:2: expected a name and a token"},
      {"bad/name aaaaaaaaaaaaaaaa1\n", "x:1: a token's name"},
      {"a short\n", "x:1: token 'a' is shorter than 16"},
      {"a aaaaaaaaaaaaaaaa1\na bbbbbbbbbbbbbbbb1\n", "x:2: the name 'a' is used twice"},
      {"a aaaaaaaaaaaaaaaa1\nb aaaaaaaaaaaaaaaa1\n", "x:2: token 'b' repeats 'a'"},
      {"a aaaaaaaa\x01" "aaaaaaaaa\n", "x:1: token 'a' has characters other than printable"},
      {"# nothing\n\n", "x holds no token"},
  };
  for (const Case& c : cases) {
    auto r = TokenStore::Parse(c.text, "x");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
  }
}

TEST(TokenStoreTest, RefusesFilesOthersCanRead) {
  TokensFile group_readable("a aaaaaaaaaaaaaaaa1\n", 0440);
  EXPECT_TRUE(TokenStore::Load(group_readable.path()).ok());
  TokensFile group_writable("a aaaaaaaaaaaaaaaa1\n", 0660);
  EXPECT_FALSE(TokenStore::Load(group_writable.path()).ok());
  TokensFile file("a aaaaaaaaaaaaaaaa1\n", 0644);
  auto store = TokenStore::Load(file.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("chmod 600"), std::string::npos);
  EXPECT_EQ(TokenStore::Load("/nonexistent/kiln/tokens").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TokenStoreTest, ReloadReplacesTokensAndKeepsThemWhenTheNewFileIsBad) {
  TokensFile file("old aaaaaaaaaaaaaaaa1\n");
  auto store = TokenStore::Load(file.path());
  ASSERT_TRUE(store.ok()) << store.status();
  file.Write("new bbbbbbbbbbbbbbbb1\nnewer cccccccccccccccc1\n");
  auto n = (*store)->Reload();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2u);
  EXPECT_FALSE((*store)->Authenticate("Bearer aaaaaaaaaaaaaaaa1").ok());
  EXPECT_TRUE((*store)->Authenticate("Bearer cccccccccccccccc1").ok());
  file.Write("broken\n");
  EXPECT_FALSE((*store)->Reload().ok());
  EXPECT_TRUE((*store)->Authenticate("Bearer bbbbbbbbbbbbbbbb1").ok());
}

}  // namespace
}  // namespace kiln::server
