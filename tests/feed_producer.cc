// A producer in its own process for the feed tests:
//   feed_producer ADDRESS TOKEN COUNT [cut]
// writes COUNT values f32[2] = {i, -i} (i = 1..COUNT) into the infeed of the
// session that issued TOKEN and prints "done N" or "error MESSAGE". With
// "cut" it sends the first half of one more value and dies without closing
// the stream, like a producer whose machine went away.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/flags.h"
#include "client/client.h"
#include "kiln/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "compiler/ir/proto_convert.h"

int main(int argc, char** argv) {
  kiln::HandleHelp(argc, argv, "usage: feed_producer ADDRESS TOKEN COUNT [cut]\nA test helper: writes COUNT values into the infeed a feed token grants.");
  if (argc < 4) {
    std::fprintf(stderr, "usage: feed_producer ADDRESS TOKEN COUNT [cut]\n");
    return 2;
  }
  const std::string address = argv[1], token = argv[2];
  const int count = std::atoi(argv[3]);
  const bool cut = argc > 4 && std::string(argv[4]) == "cut";
  if (!cut) {
    auto client = kiln::client::Client::Connect(address);
    if (!client.ok()) {
      std::printf("error %s\n", client.status().ToString().c_str());
      return 1;
    }
    auto stream = (*client)->OpenInfeed("cpu:0", token);
    if (!stream.ok()) {
      std::printf("error %s\n", stream.status().ToString().c_str());
      return 1;
    }
    for (int i = 1; i <= count; ++i) {
      auto v = kiln::ir::Literal::FromVector<float>(kiln::ir::ElementType::kF32, {2},
                                                    {float(i), float(-i)});
      if (!(*stream)->Write(v).ok()) break;
    }
    auto verdict = (*stream)->Finish();
    if (!verdict.ok()) {
      std::printf("error %s\n", verdict.status().ToString().c_str());
      return 1;
    }
    std::printf("done %lld\n", static_cast<long long>(verdict->values()));
    return 0;
  }
  // Raw stream, so the cut can fall inside a value.
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = kiln::v1::KilnService::NewStub(channel);
  grpc::ClientContext ctx;
  kiln::v1::InfeedResponse resp;
  auto writer = stub->Infeed(&ctx, &resp);
  kiln::v1::InfeedChunk first;
  first.mutable_target()->set_feed_token(token);
  first.mutable_target()->set_device("cpu:0");
  writer->Write(first);
  for (int i = 1; i <= count + 1; ++i) {
    const float data[2] = {float(i), float(-i)};
    kiln::v1::InfeedChunk chunk;
    kiln::ir::ShapeToProto(kiln::ir::Shape(kiln::ir::ElementType::kF32, {2}),
                           chunk.mutable_shape());
    chunk.set_total_bytes(8);
    chunk.set_data(reinterpret_cast<const char*>(data), i <= count ? 8 : 4);
    writer->Write(chunk);
  }
  std::printf("cut\n");
  std::fflush(stdout);
  _exit(0);
}
