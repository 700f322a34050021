// A model the client's tests share: state besides its weights (batch
// normalization's running statistics, dropout's counter).
#ifndef KILN_CLIENT_NN_TEST_UTIL_H_
#define KILN_CLIENT_NN_TEST_UTIL_H_

#include <cstdint>

#include "client/lazy.h"
#include "client/nn.h"

namespace kiln::client::testing {

// x [batch, in] -> fc2(dropout(relu(bn(fc1(x))))) [batch, out], on cpu:0;
// its modules are named fc1, bn, dropout and fc2, the linear layers drawn
// from seeds 1 and 2.
class TwoLayerNet : public nn::Module {
 public:
  TwoLayerNet(LazyContext* ctx, int64_t in, int64_t hidden, int64_t out, double dropout,
              uint64_t dropout_seed)
      : fc1_(ctx, "cpu:0", in, hidden, 1), bn_(ctx, "cpu:0", hidden),
        dropout_(ctx, "cpu:0", dropout, dropout_seed), fc2_(ctx, "cpu:0", hidden, out, 2) {
    RegisterModule("fc1", &fc1_);
    RegisterModule("bn", &bn_);
    RegisterModule("dropout", &dropout_);
    RegisterModule("fc2", &fc2_);
  }
  Tensor Forward(const Tensor& x) {
    return fc2_.Forward(dropout_.Forward(Relu(bn_.Forward(fc1_.Forward(x)))));
  }

 private:
  nn::Linear fc1_;
  nn::BatchNorm bn_;
  nn::Dropout dropout_;
  nn::Linear fc2_;
};

}  // namespace kiln::client::testing

#endif  // KILN_CLIENT_NN_TEST_UTIL_H_
