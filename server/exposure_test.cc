#include "server/exposure.h"

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

TEST(ExposureTest, LoopbackHosts) {
  for (const char* address : {"127.0.0.1:8470", "127.3.2.1:0", "localhost:1", "LOCALHOST:1",
                              "[::1]:8470", "[::ffff:127.0.0.1]:5", "unix:/run/kiln.sock"}) {
    EXPECT_TRUE(IsLoopbackHost(HostOf(address))) << address;
  }
  for (const char* address : {"0.0.0.0:8470", "[::]:8470", ":8470", "10.0.0.5:8470",
                              "128.0.0.1:1", "kiln.example.com:8470", "[fe80::1]:1",
                              "localhost.example.com:1"}) {
    EXPECT_FALSE(IsLoopbackHost(HostOf(address))) << address;
  }
}

TEST(ExposureTest, NonLoopbackNeedsTlsAndAuthenticationOrInsecure) {
  EXPECT_EQ(*CheckExposure("127.0.0.1:1", {}), "");
  EXPECT_EQ(*CheckExposure("0.0.0.0:1", {.tls = true, .authenticated = true}), "");

  auto refused = CheckExposure("0.0.0.0:1", {});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("TLS"), std::string::npos);
  EXPECT_NE(refused.status().message().find("--insecure"), std::string::npos);

  auto tls_only = CheckExposure("10.0.0.1:1", {.tls = true});
  ASSERT_FALSE(tls_only.ok());
  EXPECT_NE(tls_only.status().message().find("client authentication"), std::string::npos);
  EXPECT_EQ(tls_only.status().message().find("--tls_cert"), std::string::npos);

  auto tokens_only = CheckExposure("10.0.0.1:1", {.authenticated = true});
  ASSERT_FALSE(tokens_only.ok());
  EXPECT_NE(tokens_only.status().message().find("TLS"), std::string::npos);

  auto warned = CheckExposure("[::]:1", {.insecure = true});
  ASSERT_TRUE(warned.ok());
  EXPECT_NE(warned->find("INSECURE"), std::string::npos);
  EXPECT_NE(warned->find("[::]:1"), std::string::npos);
}

}  // namespace
}  // namespace kiln::server
