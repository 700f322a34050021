// libFuzzer target: sequences of service requests on the in-process service
// (what a hostile or careless client can send, without the sockets). The
// input chooses sessions, transfers of arbitrary shapes and bytes, compiles
// of a few fixed modules or of a module decoded from the input's bytes,
// executions with any handles and donations, releases, reads, feeds and
// closes. Besides "no crash, no sanitizer report, no hang", it checks that
// once every session is closed no device memory is charged any more.
#include <fuzzer/FuzzedDataProvider.h>
#include <google/protobuf/stubs/logging.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "compiler/ir/hlo_parser.h"
#include "compiler/ir/proto_convert.h"
#include "server/service.h"
#include "proto/protocol.h"

namespace {

using kiln::server::Service;
namespace v1 = kiln::v1;

// Small modules a client would send: elementwise, dot, a reduction, a loop
// that reads its infeed, a sort and a convolution.
constexpr const char* kModules[] = {
    "ENTRY e {\n x = f32[4] parameter(0)\n ROOT n = f32[4] negate(x)\n}",
    "ENTRY e {\n a = f32[2,3] parameter(0)\n b = f32[3,2] parameter(1)\n"
    " ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}",
    "add { p = f32[] parameter(0)\n q = f32[] parameter(1)\n ROOT s = f32[] add(p, q) }\n"
    "ENTRY e {\n x = f32[8,4] parameter(0)\n z = f32[] constant(0)\n"
    " ROOT r = f32[4] reduce(x, z), dimensions={0}, to_apply=add\n}",
    "cond { s = (s32[], f32[2]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
    " n = s32[] constant(3)\n ROOT lt = pred[] compare(i, n), direction=LT }\n"
    "body { s = (s32[], f32[2]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
    " one = s32[] constant(1)\n j = s32[] add(i, one)\n tok = token[] after-all()\n"
    " in = (f32[2], token[]) infeed(tok)\n v = f32[2] get-tuple-element(in), index=0\n"
    " ROOT t = (s32[], f32[2]) tuple(j, v) }\n"
    "ENTRY e {\n z = s32[] constant(0)\n x = f32[2] parameter(0)\n"
    " init = (s32[], f32[2]) tuple(z, x)\n"
    " ROOT w = (s32[], f32[2]) while(init), condition=cond, body=body\n}",
    "lt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
    " ROOT c = pred[] compare(a, b), direction=LT }\n"
    "ENTRY e {\n x = f32[16] parameter(0)\n ROOT s = f32[16] sort(x), dimensions={0}, to_apply=lt\n}",
    "ENTRY e {\n x = f32[2,6,6,1] parameter(0)\n k = f32[3,3,1,2] parameter(1)\n"
    " ROOT c = f32[2,6,6,2] convolution(x, k), window={size=3x3 pad=1_1x1_1},"
    " dim_labels=b01f_01io->b01f\n}",
};

Service& TheService() {
  static Service* service = [] {
    // Sessions opening and closing by the thousand, and protobuf's notes
    // on malformed strings, are not findings.
    kiln::logging::SetLevel("off").IgnoreError();
    google::protobuf::SetLogHandler(nullptr);
    kiln::server::ServiceOptions options;
    options.backends = {{"cpu", 2, {{"memory_bytes", "64M"}}}};
    options.lease = absl::Seconds(30);
    options.feed_queue_capacity = 2;
    // Sequenced executions numbered out of order wait this long at most.
    options.sequence_patience = absl::Milliseconds(5);
    options.session_limits.memory_bytes = int64_t{16} << 20;
    options.session_limits.executions = 2;
    options.module_limits.module_bytes = int64_t{1} << 20;
    options.module_limits.instructions = 2000;
    options.module_limits.literal_bytes = int64_t{1} << 20;
    return Service::Create(options)->release();
  }();
  return *service;
}

std::string Pick(FuzzedDataProvider& in, const std::vector<std::string>& from) {
  if (from.empty() || in.ConsumeIntegralInRange(0, 7) == 0) return in.ConsumeRandomLengthString(24);
  return from[in.ConsumeIntegralInRange<size_t>(0, from.size() - 1)];
}

kiln::ir::ElementType PickType(FuzzedDataProvider& in) {
  using kiln::ir::ElementType;
  constexpr ElementType kTypes[] = {ElementType::kF32, ElementType::kS32, ElementType::kPred,
                                    ElementType::kBF16, ElementType::kF64};
  return kTypes[in.ConsumeIntegralInRange(0, 4)];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Service& service = TheService();
  FuzzedDataProvider in(data, size);
  std::vector<std::string> sessions, buffers, executables;
  auto session = [&] { return Pick(in, sessions); };
  // Every call that could wait gives up after a short deadline.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(500);
  const kiln::runtime::CancelCheck cancelled = [deadline] { return absl::Now() > deadline; };

  for (int step = 0; step < 48 && in.remaining_bytes() > 0; ++step) {
    switch (in.ConsumeIntegralInRange(0, 9)) {
      case 0: {
        v1::HandshakeRequest req;
        req.set_min_version(in.ConsumeIntegralInRange(0, 4));
        req.set_max_version(in.ConsumeIntegralInRange(0, 4));
        req.set_client_name(in.ConsumeRandomLengthString(40));
        if (auto r = service.Handshake(req); r.ok()) sessions.push_back(r->session_id());
        break;
      }
      case 1: {  // a transfer of any shape, declared size and bytes
        v1::TransferHeader h;
        h.set_session_id(session());
        h.set_device(in.ConsumeBool() ? "cpu:0" : in.ConsumeBool() ? "cpu:1" : "tpu:0");
        const int rank = in.ConsumeIntegralInRange(0, 3);
        std::vector<int64_t> dims;
        for (int d = 0; d < rank; ++d) dims.push_back(in.ConsumeIntegralInRange(0, 9));
        const kiln::ir::Shape shape(PickType(in), dims);
        kiln::ir::ShapeToProto(shape, h.mutable_shape());
        h.set_total_bytes(in.ConsumeBool() ? shape.ByteSize() : in.ConsumeIntegralInRange<int64_t>(-4, 1 << 12));
        const int chunks = in.ConsumeIntegralInRange(0, 3);
        int sent = 0;
        auto r = service.TransferToDevice(
            h, in.ConsumeRandomLengthString(shape.ByteSize() + 4),
            [&](std::string* chunk) -> absl::StatusOr<bool> {
              if (sent++ >= chunks) return false;
              *chunk = in.ConsumeRandomLengthString(64);
              return true;
            });
        if (r.ok()) buffers.push_back(r->buffer_handle());
        break;
      }
      case 2: {  // a compile of a known module, or of the input's bytes
        v1::CompileRequest req;
        req.set_session_id(session());
        req.set_device(in.ConsumeBool() ? "cpu:0" : "cpu:1");
        if (in.ConsumeBool()) {
          auto module = kiln::ir::ParseModule(kModules[in.ConsumeIntegralInRange<size_t>(
              0, std::size(kModules) - 1)]);
          if (!module.ok()) std::abort();  // the fixed modules are valid
          *req.mutable_module() = kiln::ir::ModuleToProto(**module);
        } else {
          req.mutable_module()->ParseFromString(in.ConsumeRandomLengthString(2048));
        }
        req.mutable_options()->set_rng_seed(in.ConsumeIntegral<uint64_t>());
        if (auto r = service.Compile(req); r.ok()) executables.push_back(r->executable_handle());
        break;
      }
      case 3: {  // an execution with any handles, donations and limits
        v1::ExecuteRequest req;
        req.set_session_id(session());
        req.set_executable_handle(Pick(in, executables));
        const int args = in.ConsumeIntegralInRange(0, 3);
        for (int a = 0; a < args; ++a) {
          if (in.ConsumeIntegralInRange(0, 5) == 0) {
            // An output of a sequenced execution, made or not.
            req.add_argument_handles(kiln::protocol::SequencedHandle(
                in.ConsumeIntegralInRange<uint64_t>(0, 6), in.ConsumeIntegralInRange(0, 2)));
            continue;
          }
          req.add_argument_handles(in.ConsumeBool() ? Pick(in, buffers) : std::string());
        }
        // Inline arguments (protocol 4) at any index, of any shape and bytes.
        const int inline_args = in.ConsumeIntegralInRange(0, 2);
        for (int a = 0; a < inline_args; ++a) {
          v1::InlineArgument* arg = req.add_inline_arguments();
          arg->set_index(in.ConsumeIntegralInRange(-1, 3));
          const int rank = in.ConsumeIntegralInRange(0, 2);
          std::vector<int64_t> dims;
          for (int d = 0; d < rank; ++d) dims.push_back(in.ConsumeIntegralInRange(0, 5));
          const kiln::ir::Shape shape(PickType(in), dims);
          kiln::ir::ShapeToProto(shape, arg->mutable_value()->mutable_shape());
          arg->mutable_value()->set_data(in.ConsumeBool()
                                             ? std::string(shape.ByteSize(), '\1')
                                             : in.ConsumeRandomLengthString(64));
        }
        if (in.ConsumeBool()) req.add_donated_arguments(in.ConsumeIntegralInRange(-1, 3));
        req.set_inline_result_max_bytes(in.ConsumeIntegralInRange<int64_t>(-1, 256));
        req.set_infeed_timeout_millis(in.ConsumeIntegralInRange(1, 50));
        // Sequenced (protocol 6): numbers in and out of order, reused.
        if (in.ConsumeBool()) req.set_sequence(in.ConsumeIntegralInRange<uint64_t>(0, 6));
        if (auto r = service.Execute(req, cancelled); r.ok()) {
          for (const auto& out : r->outputs()) buffers.push_back(out.buffer_handle());
          for (const auto& kept : r->inline_argument_handles()) {
            if (!kept.empty()) buffers.push_back(kept);
          }
        }
        break;
      }
      case 4: {
        v1::ReleaseRequest req;
        req.set_session_id(session());
        const int n = in.ConsumeIntegralInRange(0, 3);
        for (int i = 0; i < n; ++i) req.add_buffer_handles(Pick(in, buffers));
        if (in.ConsumeBool()) req.add_executable_handles(Pick(in, executables));
        (void)service.Release(req);
        break;
      }
      case 5: {
        v1::TransferFromDeviceRequest req;
        req.set_session_id(session());
        req.set_buffer_handle(Pick(in, buffers));
        req.set_chunk_bytes(in.ConsumeIntegralInRange<int64_t>(-1, 4096));
        int chunks = 0;
        (void)service.TransferFromDevice(req, [&](const v1::TransferFromDeviceChunk&) {
          return ++chunks < 64;
        });
        break;
      }
      case 6: {
        v1::CloseSessionRequest req;
        req.set_session_id(session());
        (void)service.CloseSession(req);
        break;
      }
      case 7: {  // a value into some session's infeed
        v1::FeedTarget target;
        target.set_session_id(session());
        target.set_device(in.ConsumeBool() ? "cpu:0" : "cpu:1");
        auto feed = service.OpenFeed(target);
        if (feed.ok()) {
          kiln::ir::Literal value(kiln::ir::Shape(kiln::ir::ElementType::kF32, {2}));
          (void)service.Infeed(*feed, std::move(value), cancelled);
          if (in.ConsumeBool()) (void)service.Outfeed(*feed, absl::Milliseconds(5), cancelled);
        }
        break;
      }
      case 8: {
        v1::CreateFeedTokenRequest req;
        req.set_session_id(session());
        req.set_device(in.ConsumeBool() ? "cpu:0" : "cpu:7");
        (void)service.CreateFeedToken(req);
        break;
      }
      default: {
        v1::MemoryInfoRequest req;
        req.set_session_id(session());
        req.set_device(in.ConsumeBool() ? "cpu:0" : "cpu:1");
        (void)service.MemoryInfo(req);
        (void)service.GetMetrics();
        break;
      }
    }
  }
  // Everything a session held goes with it.
  for (const std::string& id : sessions) {
    v1::CloseSessionRequest req;
    req.set_session_id(id);
    (void)service.CloseSession(req);
  }
  if (service.sessions().size() == 0) {
    for (kiln::runtime::Device* device : service.devices()) {
      if (device->memory_stats().bytes_in_use != 0) {
        std::fprintf(stderr, "%s still charges %lld bytes after every session closed\n",
                     device->name().c_str(),
                     static_cast<long long>(device->memory_stats().bytes_in_use));
        std::abort();
      }
    }
  }
  return 0;
}
