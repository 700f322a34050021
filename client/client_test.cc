// The client library over the embedded service.
#include "client/client.h"

#include "compiler/ir/hlo_parser.h"
#include "embedded/embedded.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

std::unique_ptr<ir::Module> Parse(const char* text) {
  auto m = ir::ParseModule(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

ir::Literal Vec(std::vector<float> v) {
  return ir::Literal::FromVector<float>(ir::ElementType::kF32, {int64_t(v.size())}, v);
}

TEST(ClientTest, DevicesAndDefault) {
  auto client = embedded::Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_EQ((*client)->devices().size(), 1u);
  EXPECT_EQ((*client)->devices()[0].name, "cpu:0");
  EXPECT_EQ((*client)->devices()[0].kind, "cpu");
  EXPECT_EQ((*client)->default_device().name, "cpu:0");
}

TEST(ClientTest, TransferCompileExecuteAndReleaseFreesMemory) {
  auto client = *embedded::Connect();
  {
    auto x = client->TransferToDevice(Vec({1, 2, 3}), "cpu:0");
    ASSERT_TRUE(x.ok()) << x.status();
    auto exe = client->Compile(*Parse("ENTRY e {\n x = f32[3] parameter(0)\n ROOT y = f32[3] add(x, x)\n}"),
                               "cpu:0");
    ASSERT_TRUE(exe.ok()) << exe.status();
    EXPECT_FALSE((*exe)->cache_hit());
    ExecuteOptions options;
    options.inline_result_max_bytes = 1024;
    auto r = client->Execute(**exe, {*x}, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->inline_values[0].has_value());
    EXPECT_EQ(r->inline_values[0]->data<float>()[2], 6.0f);
    auto back = client->TransferFromDevice(*r->outputs[0]);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->data<float>()[1], 4.0f);
    EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 24);
  }
  // Every handle went out of scope: after the batched release, nothing is left.
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 0);
}

TEST(ClientTest, DonatedBufferCannotBeReused) {
  auto client = *embedded::Connect();
  auto x = *client->TransferToDevice(Vec({1}), "cpu:0");
  auto exe = *client->Compile(*Parse("ENTRY e {\n x = f32[1] parameter(0)\n ROOT y = f32[1] negate(x)\n}"),
                              "cpu:0");
  ExecuteOptions donate;
  donate.donate = {0};
  ASSERT_TRUE(client->Execute(*exe, {x}, donate).ok());
  EXPECT_TRUE(x->donated());
  auto again = client->Execute(*exe, {x});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Donated arguments are gone once the server has the request, also when the
// program then fails (here: out of device memory): the client neither reuses
// nor releases them.
TEST(ClientTest, DonationOfAFailedExecutionIsFinal) {
  embedded::Options small;
  small.backend_config = "cpu.memory_bytes=4K";
  auto client = *embedded::Connect(small);
  auto x = *client->TransferToDevice(
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {256}, std::vector<float>(256, 1.0f)),
      "cpu:0");
  auto exe = *client->Compile(*Parse(R"(ENTRY e {
 x = f32[256] parameter(0)
 ROOT b = f32[16,256] broadcast(x), dimensions={1}
})"), "cpu:0");
  ExecuteOptions donate;
  donate.donate = {0};
  EXPECT_EQ(client->Execute(*exe, {x}, donate).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(x->donated());
  x.reset();  // nothing to release: the server took it
  ASSERT_TRUE(client->FlushReleases().ok());
  EXPECT_EQ(client->MemoryInfo("cpu:0")->bytes_in_use(), 0);
}

TEST(ClientTest, HandlesMayOutliveTheClient) {
  std::shared_ptr<DeviceBuffer> kept;
  {
    auto client = *embedded::Connect();
    kept = *client->TransferToDevice(Vec({1, 2}), "cpu:0");
  }
  EXPECT_EQ(kept->shape().ToString(), "f32[2]");
  kept.reset();  // releasing after the session closed is harmless
}

TEST(ClientTest, ServerErrorsArriveAsStatuses) {
  auto client = *embedded::Connect();
  auto bad_device = client->TransferToDevice(Vec({1}), "gpu:3");
  EXPECT_EQ(bad_device.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(bad_device.status().message().find("unknown device 'gpu:3'"), std::string::npos);
}

}  // namespace
}  // namespace kiln::client
