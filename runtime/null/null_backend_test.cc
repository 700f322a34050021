// The null backend: every operation is a clear UNIMPLEMENTED, and the
// service runs with it beside a working backend, unchanged.
#include "runtime/null/null_backend.h"

#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service.h"

namespace kiln::null_backend {
namespace {

using ::testing::HasSubstr;

TEST(NullBackendTest, EveryOperationIsUnimplemented) {
  NullBackend backend(2);
  ASSERT_EQ(backend.devices().size(), 2u);
  runtime::Device& device = *backend.devices()[1];
  EXPECT_EQ(device.name(), "null:1");
  EXPECT_EQ(device.kind(), "null");
  EXPECT_EQ(device.memory_stats().capacity_bytes, 0);
  auto buffer = device.Allocate(ir::Shape(ir::ElementType::kF32, {2}));
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(buffer.status().message(), HasSubstr("null:1 cannot allocate f32[2]"));
  auto transfer = device.TransferToDevice(
      ir::Literal::FromVector<float>(ir::ElementType::kF32, {1}, {1}));
  EXPECT_EQ(transfer.status().code(), absl::StatusCode::kUnimplemented);
  auto module = ir::ParseModule("ENTRY e {\n ROOT c = f32[] constant(1)\n}");
  ASSERT_TRUE(module.ok());
  auto exe = backend.compiler().Compile(**module, {});
  EXPECT_EQ(exe.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(exe.status().message(), HasSubstr("template for new backends"));
}

TEST(NullBackendTest, TheServiceRunsWithItBesideTheCpu) {
  server::ServiceOptions options;
  auto specs = runtime::ParseBackendSpecs("cpu:1,null:2", "");
  ASSERT_TRUE(specs.ok());
  options.backends = *specs;
  auto service = server::Service::Create(options);
  ASSERT_TRUE(service.ok()) << service.status();
  v1::HandshakeRequest hello;
  hello.set_min_version(1);
  hello.set_max_version(3);
  auto session = (*service)->Handshake(hello);
  ASSERT_TRUE(session.ok());
  std::vector<std::string> names;
  for (const auto& d : session->devices()) names.push_back(d.name());
  EXPECT_THAT(names, ::testing::ElementsAre("cpu:0", "null:0", "null:1"));

  ir::Literal value = ir::Literal::FromVector<float>(ir::ElementType::kF32, {2}, {1, 2});
  auto upload = [&](const std::string& device) {
    v1::TransferHeader header;
    header.set_session_id(session->session_id());
    header.set_device(device);
    ir::ShapeToProto(value.shape(), header.mutable_shape());
    header.set_total_bytes(8);
    return (*service)->TransferToDevice(
        header, std::string(value.bytes().begin(), value.bytes().end()),
        [](std::string*) -> absl::StatusOr<bool> { return false; });
  };
  auto refused = upload("null:0");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("null:0 cannot allocate"));

  auto module = ir::ParseModule("ENTRY e {\n x = f32[2] parameter(0)\n ROOT n = f32[2] negate(x)\n}");
  ASSERT_TRUE(module.ok());
  v1::CompileRequest compile;
  compile.set_session_id(session->session_id());
  compile.set_device("null:1");
  *compile.mutable_module() = ir::ModuleToProto(**module);
  EXPECT_EQ((*service)->Compile(compile).status().code(), absl::StatusCode::kUnimplemented);

  // The CPU beside it is unaffected.
  auto on_cpu = upload("cpu:0");
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  compile.set_device("cpu:0");
  auto exe = (*service)->Compile(compile);
  ASSERT_TRUE(exe.ok()) << exe.status();
  v1::ExecuteRequest run;
  run.set_session_id(session->session_id());
  run.set_executable_handle(exe->executable_handle());
  run.add_argument_handles(on_cpu->buffer_handle());
  run.set_inline_result_max_bytes(64);
  auto out = (*service)->Execute(run);
  ASSERT_TRUE(out.ok()) << out.status();
  auto result = ir::LiteralFromProto(out->outputs(0).inline_value());
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->data<float>()[1], -2.0f);
}

}  // namespace
}  // namespace kiln::null_backend
