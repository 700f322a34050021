#include "examples/resnet/resnet.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/autodiff.h"

namespace kiln::examples {

using client::Tensor;

ResNet::ResNet(client::LazyContext* ctx, const std::string& device, int width, uint64_t seed)
    : stem_(ctx, device, 1, width, 3, seed, {.padding = "SAME", .bias = false}),
      stem_bn_(ctx, device, width),
      fc_(ctx, device, 8 * width, 10, seed + 1) {
  RegisterModule("stem", &stem_);
  RegisterModule("stem_bn", &stem_bn_);
  int64_t channels = width;
  uint64_t block_seed = seed + 2;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t out = int64_t{width} << stage;
    for (int b = 0; b < 2; ++b) {
      const int stride = stage > 0 && b == 0 ? 2 : 1;
      blocks_.push_back(std::make_unique<client::nn::ResidualBlock>(ctx, device, channels, out,
                                                                    stride, block_seed));
      block_seed += 2;
      RegisterModule(absl::StrCat("stage", stage + 1, ".", b), blocks_.back().get());
      channels = out;
    }
  }
  RegisterModule("fc", &fc_);
}

Tensor ResNet::Forward(const Tensor& images) {
  Tensor h = client::Reshape(images, {images.dim(0), 28, 28, 1});
  h = client::Relu(stem_bn_.Forward(stem_.Forward(h)));
  for (const auto& block : blocks_) h = block->Forward(h);
  return fc_.Forward(client::nn::GlobalAvgPool2D(h));
}

absl::StatusOr<Tensor> TraceTrainStep(ResNet& net, client::Optimizer& optimizer,
                                      const Tensor& images, const Tensor& labels,
                                      const client::DataParallel* data_parallel) {
  Tensor loss = client::SoftmaxCrossEntropy(net.Forward(images), client::OneHot(labels, 10));
  RETURN_IF_ERROR(loss.status());
  ASSIGN_OR_RETURN(std::vector<Tensor> grads, client::Grad(loss, net.Parameters()));
  if (data_parallel != nullptr) {
    grads = data_parallel->AllReduceMean(grads);
    loss = data_parallel->AllReduceMean({loss})[0];
    for (const auto& [name, buffer] : net.NamedBuffers()) {
      if (ir::IsFloatType(buffer->storage_type())) *buffer = data_parallel->AllReduceMean({*buffer})[0];
    }
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> updated, optimizer.Step(net.Parameters(), grads));
  RETURN_IF_ERROR(net.SetParameters(updated));
  return loss;
}

}  // namespace kiln::examples
