#include "benchmarks/soak_worker.h"

#include <signal.h>
#include <sys/prctl.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "client/autodiff.h"
#include "client/client.h"
#include "client/lazy.h"
#include "client/optimizers.h"
#include "client/tensor.h"

namespace kiln::bench {
namespace {

using Clock = std::chrono::steady_clock;
using client::Tensor;
using ir::ElementType;
using ir::Shape;

constexpr int kBatch = 32;
constexpr int kFeatures = 64;
constexpr int kHidden = 64;
constexpr int kClasses = 10;
// A "progress" line every this many steps.
constexpr int kReportEvery = 10;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A 64-64-10 MLP trained with SGD on random batches; one step is one
// upload of a batch, one execution of the cached step program and one read
// of the loss.
class SoakModel {
 public:
  SoakModel(client::LazyContext* ctx, std::string device, uint64_t seed)
      : ctx_(ctx), device_(std::move(device)), rng_(seed), sgd_(0.05) {
    params_.push_back(
        ctx->RandomNormal(Shape(ElementType::kF32, {kFeatures, kHidden}), 0,
                          std::sqrt(2.0 / kFeatures), seed, device_));
    params_.push_back(ctx->FromLiteral(
        ir::Literal(Shape(ElementType::kF32, {kHidden})), device_));
    params_.push_back(
        ctx->RandomNormal(Shape(ElementType::kF32, {kHidden, kClasses}), 0,
                          std::sqrt(2.0 / kHidden), seed + 1, device_));
    params_.push_back(ctx->FromLiteral(
        ir::Literal(Shape(ElementType::kF32, {kClasses})), device_));
  }

  // Returns the step's loss.
  absl::StatusOr<double> Step() {
    for (const Tensor& p : params_) RETURN_IF_ERROR(p.status());
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int32_t> label(0, kClasses - 1);
    std::vector<float> x(kBatch * kFeatures);
    for (float& v : x) v = normal(rng_);
    std::vector<int32_t> y(kBatch);
    for (int32_t& v : y) v = label(rng_);
    Tensor loss;
    {
      Tensor images = ctx_->FromVector<float>(ElementType::kF32,
                                              {kBatch, kFeatures}, x, device_);
      Tensor labels =
          ctx_->FromVector<int32_t>(ElementType::kS32, {kBatch}, y, device_);
      Tensor h = client::Relu(client::Matmul(images, params_[0]) + params_[1]);
      Tensor logits = client::Matmul(h, params_[2]) + params_[3];
      loss =
          client::SoftmaxCrossEntropy(logits, client::OneHot(labels, kClasses));
      ASSIGN_OR_RETURN(std::vector<Tensor> grads, client::Grad(loss, params_));
      ASSIGN_OR_RETURN(params_, sgd_.Step(params_, grads));
    }
    RETURN_IF_ERROR(ctx_->Barrier(device_));
    ASSIGN_OR_RETURN(double value, loss.Item());
    if (!std::isfinite(value)) {
      return absl::InternalError(absl::StrCat("loss is ", value));
    }
    return value;
  }

 private:
  client::LazyContext* ctx_;
  std::string device_;
  std::mt19937_64 rng_;
  client::Sgd sgd_;
  std::vector<Tensor> params_;
};

// One line of the protocol (soak_worker.h), flushed at once.
void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int RunSoakWorker(const SoakWorkerOptions& options) {
  // A worker never outlives its driver.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  logging::SetLevel("warn").IgnoreError();
  const auto start = Clock::now();
  auto report_error = [](const absl::Status& st) {
    Say(absl::StrCat("error ", absl::CEscape(st.ToString())));
  };
  client::ConnectOptions connect;
  connect.client_name = absl::StrCat("soak-", options.seed);
  auto connection = client::Client::Connect(options.server, connect);
  if (!connection.ok()) {
    report_error(WithContext(connection.status(), "connecting"));
    Say("done 0");
    return 1;
  }
  Say(absl::StrCat("session ", (*connection)->session_id()));
  int done = 0;
  bool failed = false;
  {
    auto ctx = client::LazyContext::Create(connection->get());
    SoakModel model(ctx.get(), (*connection)->default_device().name,
                    options.seed);
    while (done < options.steps && Since(start) < options.time_limit_seconds) {
      // After an error the model's tensors carry it: the worker stops.
      if (absl::StatusOr<double> loss = model.Step(); !loss.ok()) {
        report_error(
            WithContext(loss.status(), absl::StrCat("step ", done + 1)));
        failed = true;
        break;
      }
      ++done;
      if (done % kReportEvery == 0) Say(absl::StrCat("progress ", done));
    }
  }
  if (absl::Status st = (*connection)->FlushReleases(); !st.ok()) {
    report_error(WithContext(st, "releasing"));
    failed = true;
  }
  Say(absl::StrCat("done ", done));
  return failed ? 1 : 0;
}

}  // namespace kiln::bench
