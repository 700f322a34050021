// The bare gRPC peer of the RPC and infeed benchmarks: echoes unary calls
// and counts streamed bytes, copying each message once as Kiln does.
#ifndef KILN_BENCHMARKS_ECHO_SERVICE_H_
#define KILN_BENCHMARKS_ECHO_SERVICE_H_

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

}  // namespace kiln::bench

#endif  // KILN_BENCHMARKS_ECHO_SERVICE_H_
