// Training through a real kiln-server: a small Fashion-MNIST model learns,
// the compile counter stays flat after the first train and eval steps, and a
// changed batch size compiles once with an explanation.
#include <numeric>
#include <optional>

#include "client/client.h"
#include "client/lazy.h"
#include "examples/fashion_mnist/mnist.h"
#include "examples/fashion_mnist/trainer.h"
#include "gtest/gtest.h"
#include "tests/server_process.h"

namespace kiln {
namespace {

class TrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto train = examples::LoadFashionMnist(examples::kDefaultDataDir, "train", 3840);
    auto test = examples::LoadFashionMnist(examples::kDefaultDataDir, "t10k", 1000);
    ASSERT_TRUE(train.ok()) << train.status();
    ASSERT_TRUE(test.ok()) << test.status();
    train_ = new examples::Dataset(*std::move(train));
    test_ = new examples::Dataset(*std::move(test));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
  }

  void SetUp() override {
    ASSERT_FALSE(server_.address().empty());
    auto c = client::Client::Connect(server_.address());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    ctx_ = client::LazyContext::Create(client_.get());
    auto m = examples::MakeModel("mlp", ctx_.get(), "cpu:0", 7);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    examples::TrainerOptions options;
    options.learning_rate = 0.02;
    trainer_ = std::make_unique<examples::Trainer>(ctx_.get(), model_.get(), "cpu:0", options);
  }

  double TestAccuracy() {
    auto r = trainer_->EvalStep(test_->images.data(), test_->labels.data(), 1000);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->correct / 1000.0 : 0;
  }
  examples::StepResult Train(int64_t step, int batch) {
    auto r = trainer_->TrainStep(train_->images.data() + step * batch * 784,
                                 train_->labels.data() + step * batch, batch);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : examples::StepResult{};
  }

  // Another trainer of the same model (seed 7, rate 0.02) on a context of
  // its own.
  struct Other {
    std::shared_ptr<client::LazyContext> ctx;
    std::unique_ptr<examples::Model> model;
    std::unique_ptr<examples::Trainer> trainer;
  };
  Other MakeOther(bool replay) {
    Other other;
    other.ctx = client::LazyContext::Create(client_.get());
    auto m = examples::MakeModel("mlp", other.ctx.get(), "cpu:0", 7);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return other;
    other.model = std::move(*m);
    examples::TrainerOptions options;
    options.learning_rate = 0.02;
    options.replay = replay;
    other.trainer = std::make_unique<examples::Trainer>(other.ctx.get(), other.model.get(),
                                                        "cpu:0", options);
    return other;
  }

  static examples::Dataset* train_;
  static examples::Dataset* test_;
  testing::ServerProcess server_;
  std::unique_ptr<client::Client> client_;
  std::shared_ptr<client::LazyContext> ctx_;
  std::unique_ptr<examples::Model> model_;
  std::unique_ptr<examples::Trainer> trainer_;
};

examples::Dataset* TrainingTest::train_ = nullptr;
examples::Dataset* TrainingTest::test_ = nullptr;

TEST_F(TrainingTest, LossFallsAndAccuracyRisesWithAFlatCompileCounter) {
  const double before = TestAccuracy();
  std::vector<double> losses;
  Train(0, 128);
  const int64_t compiles_after_first_steps = ctx_->metrics().uncached_compiles;
  EXPECT_EQ(compiles_after_first_steps, 2);  // one eval program, one train program
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int64_t step = 0; step < 30; ++step) losses.push_back(Train(step, 128).loss);
  }
  const double after = TestAccuracy();
  const double first = std::accumulate(losses.begin(), losses.begin() + 5, 0.0) / 5;
  const double last = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
  EXPECT_LT(last, first * 0.6) << "loss " << first << " -> " << last;
  EXPECT_GT(after, before + 0.3) << "accuracy " << before << " -> " << after;
  EXPECT_GT(after, 0.7);
  // 60 more train steps and one more eval step compiled nothing new: they
  // ran the traced programs again without tracing.
  EXPECT_EQ(ctx_->metrics().uncached_compiles, compiles_after_first_steps);
  EXPECT_EQ(ctx_->metrics().replays, 61);
  EXPECT_TRUE(ctx_->recompile_explanations().empty());
}

TEST_F(TrainingTest, ChangedBatchSizeCompilesOnceAndSaysWhy) {
  Train(0, 128);
  Train(1, 128);
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 1);
  Train(2, 96);
  Train(3, 96);
  EXPECT_EQ(ctx_->metrics().uncached_compiles, 2);
  ASSERT_EQ(ctx_->recompile_explanations().size(), 1u);
  const std::string& why = ctx_->recompile_explanations()[0];
  EXPECT_NE(why.find("f32[128,784] -> f32[96,784]"), std::string::npos) << why;
  EXPECT_NE(why.find("trainer.cc"), std::string::npos) << why;  // the call site
}

// A batch sent as the file's u8 pixels, standardized by the step on the
// server, trains as the same batch standardized on the client: same losses
// and counts step after step (up to float rounding), one compile each way.
TEST_F(TrainingTest, PixelBatchesTrainAsTheirStandardizedImages) {
  Other other = MakeOther(/*replay=*/true);
  ASSERT_NE(other.trainer, nullptr);
  examples::Trainer& from_pixels = *other.trainer;
  for (int64_t step = 0; step < 4; ++step) {
    const examples::StepResult f32 = Train(step, 128);
    auto pixels = from_pixels.TrainStep(train_->pixels.data() + step * 128 * 784,
                                        train_->labels.data() + step * 128, 128);
    ASSERT_TRUE(pixels.ok()) << pixels.status();
    EXPECT_NEAR(pixels->loss, f32.loss, 1e-4 * std::max(1.0, f32.loss)) << "step " << step;
    EXPECT_NEAR(pixels->correct, f32.correct, 1) << "step " << step;
  }
  auto eval = from_pixels.EvalStep(test_->pixels.data(), test_->labels.data(), 1000);
  ASSERT_TRUE(eval.ok()) << eval.status();
  const double f32_accuracy = TestAccuracy();
  EXPECT_NEAR(eval->correct / 1000.0, f32_accuracy, 0.003);
  EXPECT_EQ(other.ctx->metrics().uncached_compiles, 2);  // one train, one eval program
}

// Steps replayed from one trace train as steps traced one by one: the same
// losses, counts and weights, bit for bit, through a change of learning
// rate and of batch size.
TEST_F(TrainingTest, ReplayedStepsTrainAsStepsTracedEachTime) {
  Other other = MakeOther(/*replay=*/false);
  ASSERT_NE(other.trainer, nullptr);
  examples::Trainer& traced = *other.trainer;
  const std::vector<int> batches = {128, 128, 128, 96, 96, 128};
  for (size_t step = 0; step < batches.size(); ++step) {
    if (step == 2) {
      trainer_->SetLearningRate(0.01);
      traced.SetLearningRate(0.01);
    }
    const int batch = batches[step];
    const examples::StepResult replayed = Train(static_cast<int64_t>(step), batch);
    auto each = traced.TrainStep(train_->images.data() + step * batch * 784,
                                 train_->labels.data() + step * batch, batch);
    ASSERT_TRUE(each.ok()) << each.status();
    EXPECT_EQ(replayed.loss, each->loss) << "step " << step;
    EXPECT_EQ(replayed.correct, each->correct) << "step " << step;
  }
  for (size_t i = 0; i < model_->params().size(); ++i) {
    auto a = model_->params()[i].ToHost();
    auto b = other.model->params()[i].ToHost();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->bytes(), b->bytes()) << "parameter " << i;
  }
  EXPECT_EQ(other.ctx->metrics().replays, 0);
  // Replayed: steps 1, 4 and 5 (step 2 traced for the new rate, 3 for the
  // new batch size; 5 runs step 0's program with the new rate).
  EXPECT_EQ(ctx_->metrics().replays, 3);
}

// Pipelined, as the example runs at one thread: each replayed step is sent
// while the one before may still run (its outputs named in advance) and
// read one step late; losses and weights are those of synchronous steps
// traced each time.
TEST_F(TrainingTest, PipelinedReplayedStepsTrainAsSynchronousTracedOnes) {
  Other other = MakeOther(/*replay=*/false);
  ASSERT_NE(other.trainer, nullptr);
  ctx_->set_pipelined(true);
  std::vector<double> pipelined, traced;
  std::optional<examples::PendingStep> previous;
  for (int64_t step = 0; step < 6; ++step) {
    auto started = trainer_->StartStep(train_->pixels.data() + step * 128 * 784,
                                       train_->labels.data() + step * 128, 128);
    ASSERT_TRUE(started.ok()) << started.status();
    if (previous.has_value()) {
      auto read = examples::Trainer::ReadStep(*previous);
      ASSERT_TRUE(read.ok()) << read.status();
      pipelined.push_back(read->loss);
    }
    previous = *std::move(started);
    auto each = other.trainer->TrainStep(train_->pixels.data() + step * 128 * 784,
                                         train_->labels.data() + step * 128, 128);
    ASSERT_TRUE(each.ok()) << each.status();
    traced.push_back(each->loss);
  }
  auto last = examples::Trainer::ReadStep(*previous);
  ASSERT_TRUE(last.ok()) << last.status();
  pipelined.push_back(last->loss);
  EXPECT_EQ(pipelined, traced);
  for (size_t i = 0; i < model_->params().size(); ++i) {
    auto a = model_->params()[i].ToHost();
    auto b = other.model->params()[i].ToHost();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->bytes(), b->bytes()) << "parameter " << i;
  }
  EXPECT_EQ(ctx_->metrics().replays, 5);
  EXPECT_EQ(ctx_->metrics().pipelined_executions, 6);
}

}  // namespace
}  // namespace kiln
