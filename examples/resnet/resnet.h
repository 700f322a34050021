// A ResNet-18-style network for 28x28 Fashion-MNIST images, written with
// Kiln's nn modules: a 3x3 stem, four stages of two basic residual blocks
// (width, 2, 4 and 8 times width channels; strides 1, 2, 2, 2: 28x28 down
// to 4x4), global average pooling and a linear classifier.
#ifndef KILN_EXAMPLES_RESNET_RESNET_H_
#define KILN_EXAMPLES_RESNET_RESNET_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/data_parallel.h"
#include "client/lazy.h"
#include "client/nn.h"
#include "client/optimizers.h"
#include "client/tensor.h"

namespace kiln::examples {

class ResNet : public client::nn::Module {
 public:
  ResNet(client::LazyContext* ctx, const std::string& device, int width, uint64_t seed);
  // Logits [N, 10] from images [N, 784].
  client::Tensor Forward(const client::Tensor& images);

 private:
  client::nn::Conv2d stem_;
  client::nn::BatchNorm stem_bn_;
  std::vector<std::unique_ptr<client::nn::ResidualBlock>> blocks_;
  client::nn::Linear fc_;
};

// One training step (forward, softmax cross-entropy, backward, the
// optimizer's update), traced the same way in step mode and in a device
// loop. Returns the batch's mean loss. With `data_parallel`, each replica
// traces its part of the batch: the gradients and the loss are averaged
// over the replicas, and so are the batch normalization statistics after
// the step, so that every replica holds the same model.
absl::StatusOr<client::Tensor> TraceTrainStep(ResNet& net, client::Optimizer& optimizer,
                                              const client::Tensor& images,
                                              const client::Tensor& labels,
                                              const client::DataParallel* data_parallel = nullptr);

}  // namespace kiln::examples

#endif  // KILN_EXAMPLES_RESNET_RESNET_H_
