// End to end: kiln-server with TLS, mutual TLS and bearer tokens, and its
// refusal to listen exposed without them. Certificates are made for each
// run with the openssl command.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/grpc_transport.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kiln/v1/service.grpc.pb.h"
#include "tests/server_process.h"
#include "tests/test_pki.h"

namespace kiln {
namespace {

using client::Client;
using client::ConnectOptions;
using testing::Pki;
using testing::ProcessResult;
using testing::RunCommand;
using testing::WriteTokens;

ConnectOptions Quick() {
  ConnectOptions options;
  options.connect_timeout = absl::Seconds(8);
  return options;
}

// A compile and an execution through the connection: it works for real.
void ExpectWorks(Client& c) {
  ir::Literal x = ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1.5f, -2});
  auto buffer = c.TransferToDevice(x, "cpu:0");
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  auto back = c.TransferFromDevice(**buffer);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data<float>()[1], -2.0f);
}

class SecurityE2E : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pki_.ok()) << "openssl failed: " << pki_.error(); }
  Pki pki_;
};

TEST_F(SecurityE2E, TlsConnectsWithTheRightCaAndFailsCleanlyOtherwise) {
  testing::ServerProcess server(
      {"--tls_cert=" + pki_.Path("server.pem"), "--tls_key=" + pki_.Path("server.key")});
  ASSERT_FALSE(server.address().empty());

  ConnectOptions good = Quick();
  good.security.tls_ca_file = pki_.Path("ca.pem");
  auto c = Client::Connect(server.address(), good);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectWorks(**c);
  EXPECT_EQ((*c)->security_warning(), "");

  // The server's name is checked: the certificate is for 127.0.0.1 and
  // localhost only.
  ConnectOptions wrong_name = good;
  wrong_name.security.tls_server_name = "kiln.example.com";
  auto named = Client::Connect(server.address(), wrong_name);
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().code(), absl::StatusCode::kUnavailable);

  ConnectOptions wrong_ca = Quick();
  wrong_ca.security.tls_ca_file = pki_.Path("other_ca.pem");
  const auto start = std::chrono::steady_clock::now();
  auto bad = Client::Connect(server.address(), wrong_ca);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find("KILN_TLS_CA"), std::string::npos) << bad.status();
  // A failed handshake ends the wait instead of retrying until the deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(6));

  auto plaintext = Client::Connect(server.address(), Quick());
  ASSERT_FALSE(plaintext.ok());
  EXPECT_EQ(plaintext.status().code(), absl::StatusCode::kUnavailable);

  // The server is unharmed by the failed handshakes.
  ExpectWorks(**c);
}

TEST_F(SecurityE2E, MutualTlsNeedsAClientCertificateFromTheClientCa) {
  testing::ServerProcess server({"--tls_cert=" + pki_.Path("server.pem"),
                                 "--tls_key=" + pki_.Path("server.key"),
                                 "--tls_client_ca=" + pki_.Path("ca.pem")});
  ASSERT_FALSE(server.address().empty());
  ConnectOptions good = Quick();
  good.security.tls_ca_file = pki_.Path("ca.pem");
  good.security.tls_cert_file = pki_.Path("client.pem");
  good.security.tls_key_file = pki_.Path("client.key");
  auto c = Client::Connect(server.address(), good);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectWorks(**c);

  ConnectOptions no_cert = Quick();
  no_cert.security.tls_ca_file = pki_.Path("ca.pem");
  auto refused = Client::Connect(server.address(), no_cert);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();

  ConnectOptions rogue = no_cert;
  rogue.security.tls_cert_file = pki_.Path("rogue.pem");
  rogue.security.tls_key_file = pki_.Path("rogue.key");
  auto rogue_client = Client::Connect(server.address(), rogue);
  ASSERT_FALSE(rogue_client.ok());
  EXPECT_EQ(rogue_client.status().code(), absl::StatusCode::kUnavailable);

  ConnectOptions half = good;
  half.security.tls_key_file.clear();
  auto half_client = Client::Connect(server.address(), half);
  ASSERT_FALSE(half_client.ok());
  EXPECT_EQ(half_client.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectWorks(**c);
}

// Calls `method` with an empty request and `authorization` (none if empty);
// its status.
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& authorization) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, method, request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  return status;
}

TEST_F(SecurityE2E, EveryCallWithoutAValidTokenIsUnauthenticated) {
  const std::string tokens = WriteTokens(pki_.Path("tokens"),
                                         "# name token\ntrainer aaaaaaaaaaaaaaaaaaaa\n");
  testing::ServerProcess server({"--auth_tokens_file=" + tokens});
  ASSERT_FALSE(server.address().empty());
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());

  // Every method of the service, whatever its kind of stream, and the
  // health check.
  std::vector<std::string> methods = {"/grpc.health.v1.Health/Check",
                                      "/grpc.health.v1.Health/Watch"};
  const auto* service = v1::HandshakeRequest::descriptor()->file()->FindServiceByName("KilnService");
  ASSERT_NE(service, nullptr);
  for (int i = 0; i < service->method_count(); ++i) {
    methods.push_back(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
  }
  ASSERT_GE(methods.size(), 15u);
  for (const std::string& method : methods) {
    for (const std::string& authorization :
         {std::string(), std::string("Bearer wrongwrongwrongwrong"),
          std::string("Bearer aaaaaaaaaaaaaaaaaaa"), std::string("Basic aaaaaaaaaaaaaaaaaaaa")}) {
      grpc::Status status = CallRaw(channel, method, authorization);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << " with '" << authorization << "': " << status.error_message();
    }
  }
  // With the token the same calls get past the check (to the request's own
  // errors: an empty request names no session).
  grpc::Status handshake =
      CallRaw(channel, "/kiln.v1.KilnService/KeepAlive", "Bearer aaaaaaaaaaaaaaaaaaaa");
  EXPECT_NE(handshake.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << handshake.error_message();

  // A token is never sent in clear to another machine: refused before any
  // connection is made.
  ConnectOptions cleartext = Quick();
  cleartext.security.token = "aaaaaaaaaaaaaaaaaaaa";
  auto refused_token = Client::Connect("10.255.255.1:8470", cleartext);
  ASSERT_FALSE(refused_token.ok());
  EXPECT_EQ(refused_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused_token.status().message().find("in clear"), std::string::npos);

  // The client library sends it with every call, streams included.
  auto anonymous = Client::Connect(server.address(), Quick());
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(anonymous.status().message().find("KILN_TOKEN"), std::string::npos);
  ConnectOptions with_token = Quick();
  with_token.security.token = "aaaaaaaaaaaaaaaaaaaa";
  auto c = Client::Connect(server.address(), with_token);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectWorks(**c);
  auto metrics = (*c)->Metrics();
  ASSERT_TRUE(metrics.ok());
  int64_t failures = 0;
  for (const auto& counter : metrics->counters()) {
    if (counter.name() == "auth_failures") failures = counter.value();
  }
  EXPECT_GE(failures, static_cast<int64_t>(methods.size() * 4));

  client::GrpcOptions health_options;
  health_options.security.token = "aaaaaaaaaaaaaaaaaaaa";
  auto health = client::CheckHealth(server.address(), health_options);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, "SERVING");
  EXPECT_EQ(client::CheckHealth(server.address()).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(SecurityE2E, ASessionServesOnlyTheTokenThatOpenedIt) {
  const std::string tokens = WriteTokens(
      pki_.Path("tokens"), "alice aaaaaaaaaaaaaaaaaaaa\nbob bbbbbbbbbbbbbbbbbbbb\n");
  testing::ServerProcess server({"--auth_tokens_file=" + tokens});
  ASSERT_FALSE(server.address().empty());
  ConnectOptions alice = Quick();
  alice.security.token = "aaaaaaaaaaaaaaaaaaaa";
  auto c = Client::Connect(server.address(), alice);
  ASSERT_TRUE(c.ok()) << c.status();
  auto buffer = (*c)->TransferToDevice(
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {1}, {5}), "cpu:0");
  ASSERT_TRUE(buffer.ok());

  client::GrpcOptions bob;
  bob.security.token = "bbbbbbbbbbbbbbbbbbbb";
  auto transport = client::ConnectGrpc(server.address(), bob);
  ASSERT_TRUE(transport.ok()) << transport.status();
  v1::KeepAliveRequest keep;
  keep.set_session_id((*c)->session_id());
  EXPECT_EQ((*transport)->KeepAlive(keep).status().code(), absl::StatusCode::kPermissionDenied);
  v1::TransferFromDeviceRequest read;
  read.set_session_id((*c)->session_id());
  read.set_buffer_handle((*buffer)->handle());
  absl::Status stolen = (*transport)->TransferFromDevice(
      read, [](v1::TransferFromDeviceChunk&) { return absl::OkStatus(); });
  EXPECT_EQ(stolen.code(), absl::StatusCode::kPermissionDenied) << stolen;
  v1::CloseSessionRequest close;
  close.set_session_id((*c)->session_id());
  EXPECT_EQ((*transport)->CloseSession(close).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Alice's session is untouched.
  ExpectWorks(**c);
  auto value = (*c)->TransferFromDevice(**buffer);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value->data<float>()[0], 5.0f);
}

TEST_F(SecurityE2E, TokensAreReReadOnSighupAndABadFileKeepsTheOldOnes) {
  const std::string tokens =
      WriteTokens(pki_.Path("tokens"), "old aaaaaaaaaaaaaaaaaaaa\n");
  testing::ServerProcess server({"--auth_tokens_file=" + tokens});
  ASSERT_FALSE(server.address().empty());
  client::GrpcOptions old_token, new_token;
  old_token.security.token = "aaaaaaaaaaaaaaaaaaaa";
  new_token.security.token = "bbbbbbbbbbbbbbbbbbbb";
  ASSERT_TRUE(client::CheckHealth(server.address(), old_token).ok());

  WriteTokens(tokens, "new bbbbbbbbbbbbbbbbbbbb\n");
  kill(server.pid(), SIGHUP);
  bool switched = false;
  for (int i = 0; i < 200 && !switched; ++i) {  // at most 10 s
    switched = client::CheckHealth(server.address(), new_token).ok();
    if (!switched) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(switched);
  EXPECT_EQ(client::CheckHealth(server.address(), old_token).status().code(),
            absl::StatusCode::kUnauthenticated);

  WriteTokens(tokens, "this line is not a token file\n");
  kill(server.pid(), SIGHUP);
  // The server counts the failed re-read and keeps serving with the tokens
  // it had.
  ConnectOptions options = Quick();
  options.security.token = new_token.security.token;
  auto c = Client::Connect(server.address(), options);
  ASSERT_TRUE(c.ok()) << c.status();
  int64_t failures = 0, reloads = 0;
  for (int i = 0; i < 200 && failures == 0; ++i) {  // at most 10 s
    auto m = (*c)->Metrics();
    ASSERT_TRUE(m.ok()) << m.status();
    for (const auto& counter : m->counters()) {
      if (counter.name() == "token_reload_failures") failures = counter.value();
      if (counter.name() == "token_reloads") reloads = counter.value();
    }
    if (failures == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(reloads, 1);
  EXPECT_TRUE(client::CheckHealth(server.address(), new_token).ok());
  EXPECT_EQ(client::CheckHealth(server.address(), old_token).status().code(),
            absl::StatusCode::kUnauthenticated);
  c->reset();
  EXPECT_EQ(server.Stop(), 0);
}

TEST_F(SecurityE2E, AnExposedAddressNeedsTlsAndAuthenticationOrInsecure) {
  const std::string bin = std::string(KILN_BIN_DIR) + "/kiln-server";
  ProcessResult refused = RunCommand(bin + " --listen=0.0.0.0:0 --log_level=warn");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("reachable from other machines"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--insecure"), std::string::npos);

  const std::string tokens = WriteTokens(pki_.Path("tokens"), "t aaaaaaaaaaaaaaaaaaaa\n");
  ProcessResult tokens_only = RunCommand(bin + " --listen=0.0.0.0:0 --auth_tokens_file=" + tokens);
  EXPECT_EQ(tokens_only.exit_code, 2) << tokens_only.output;
  EXPECT_NE(tokens_only.output.find("TLS"), std::string::npos);

  ProcessResult bad_key = RunCommand(bin + " --tls_cert=" + pki_.Path("server.pem") +
                         " --tls_key=" + pki_.Path("client.key"));
  EXPECT_EQ(bad_key.exit_code, 2) << bad_key.output;
  EXPECT_NE(bad_key.output.find("is not the key of --tls_cert"), std::string::npos)
      << bad_key.output;
  ProcessResult not_pem = RunCommand(bin + " --tls_cert=" + tokens + " --tls_key=" + pki_.Path("server.key"));
  EXPECT_EQ(not_pem.exit_code, 2) << not_pem.output;
  EXPECT_NE(not_pem.output.find("not a PEM certificate"), std::string::npos) << not_pem.output;

  // Exposed with everything: no warning.
  {
    testing::ServerProcess secured(
        {"--listen=0.0.0.0:0", "--tls_cert=" + pki_.Path("server.pem"),
         "--tls_key=" + pki_.Path("server.key"), "--auth_tokens_file=" + tokens});
    ASSERT_FALSE(secured.address().empty());
    const std::string port = secured.address().substr(secured.address().rfind(':') + 1);
    ConnectOptions options = Quick();
    options.security.tls_ca_file = pki_.Path("ca.pem");
    options.security.token = "aaaaaaaaaaaaaaaaaaaa";
    auto c = Client::Connect("127.0.0.1:" + port, options);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->security_warning(), "");
  }
  // --insecure starts, and every client is told.
  testing::ServerProcess insecure({"--listen=0.0.0.0:0", "--insecure"});
  ASSERT_FALSE(insecure.address().empty());
  const std::string port = insecure.address().substr(insecure.address().rfind(':') + 1);
  auto c = Client::Connect("127.0.0.1:" + port, Quick());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE((*c)->security_warning().find("INSECURE"), std::string::npos);
  ExpectWorks(**c);
  ProcessResult devices = RunCommand(std::string(KILN_BIN_DIR) + "/kiln devices --server=127.0.0.1:" + port);
  EXPECT_EQ(devices.exit_code, 0) << devices.output;
  EXPECT_NE(devices.output.find("server warns: INSECURE"), std::string::npos) << devices.output;
}

TEST_F(SecurityE2E, TheCliAndProducersTakeSecurityFromTheEnvironment) {
  const std::string tokens = WriteTokens(pki_.Path("tokens"), "cli aaaaaaaaaaaaaaaaaaaa\n");
  testing::ServerProcess server({"--tls_cert=" + pki_.Path("server.pem"),
                                 "--tls_key=" + pki_.Path("server.key"),
                                 "--tls_client_ca=" + pki_.Path("ca.pem"),
                                 "--auth_tokens_file=" + tokens});
  ASSERT_FALSE(server.address().empty());
  const std::string kiln = std::string(KILN_BIN_DIR) + "/kiln";
  const std::string env = absl::StrCat(
      "KILN_TLS_CA=", pki_.Path("ca.pem"), " KILN_TLS_CERT=", pki_.Path("client.pem"),
      " KILN_TLS_KEY=", pki_.Path("client.key"), " ");
  ProcessResult health = RunCommand(env + "KILN_TOKEN=aaaaaaaaaaaaaaaaaaaa " + kiln +
                        " health --server=" + server.address());
  EXPECT_EQ(health.exit_code, 0) << health.output;
  EXPECT_NE(health.output.find("SERVING"), std::string::npos);
  std::ofstream(pki_.Path("token_file")) << "aaaaaaaaaaaaaaaaaaaa\n";
  ProcessResult devices = RunCommand(env + "KILN_TOKEN_FILE=" + pki_.Path("token_file") + " " + kiln +
                         " devices --server=" + server.address());
  EXPECT_EQ(devices.exit_code, 0) << devices.output;
  EXPECT_NE(devices.output.find("cpu:0"), std::string::npos) << devices.output;
  ProcessResult no_token = RunCommand(env + kiln + " devices --server=" + server.address());
  EXPECT_EQ(no_token.exit_code, 1) << no_token.output;
  EXPECT_NE(no_token.output.find("bearer token"), std::string::npos) << no_token.output;
}

}  // namespace
}  // namespace kiln
