// The bare gRPC peer of the RPC and infeed benchmarks: echoes unary calls
// and counts streamed bytes, copying each message once as Kiln does.
#ifndef KILN_BENCHMARKS_ECHO_SERVICE_H_
#define KILN_BENCHMARKS_ECHO_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "echo.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace kiln::bench {

class EchoService final : public Echo::Service {
  grpc::Status Unary(grpc::ServerContext*, const Blob* in, Blob* out) override {
    *out = *in;
    return grpc::Status::OK;
  }
  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<Blob>* reader,
                      Count* out) override {
    Blob b;
    int64_t n = 0;
    std::vector<char> sink;
    while (reader->Read(&b)) {
      sink.assign(b.data().begin(), b.data().end());
      n += static_cast<int64_t>(b.data().size());
    }
    out->set_bytes(n);
    return grpc::Status::OK;
  }
};

// The peer listening on a free loopback port, with a stub connected to it;
// both take messages of up to 256 MiB.
struct EchoPeer {
  EchoService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<Echo::Stub> stub;
};

inline std::unique_ptr<EchoPeer> StartEchoPeer() {
  auto peer = std::make_unique<EchoPeer>();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.RegisterService(&peer->service);
  peer->server = builder.BuildAndStart();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  peer->stub = Echo::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
  return peer;
}

}  // namespace kiln::bench

#endif  // KILN_BENCHMARKS_ECHO_SERVICE_H_
