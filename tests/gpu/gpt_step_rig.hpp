// Implements: a small GPT job on the GPU backend for the tests of whole
// training steps (test_gpt_step.cpp, test_step_kernels.cpp): rank 0's
// token set (windows of 8 ids under a vocabulary of 11, 60 rows, removed at
// the end), the input pipeline that scatters and uploads each global batch
// of 16 rows (epochs of 16, 16, 16, 12), a model from a spec, AdamW with
// weight decay and clipping, and the bucketed gradient all-reduce; the
// logits in bf16 under bf16, and each step train_step, as the trainer runs
// them.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/optimizer.hpp"
#include "gpu_env.hpp"
#include "parallel/gradient_buckets.hpp"
#include "train/train_step.hpp"

namespace gpu_test {

class GptStepRig {
 public:
  static constexpr int kT = 8, kVocab = 11, kRows = 60;
  static constexpr std::uint64_t kBatch = 16;

  // The job's `steps` steps (step 0 is started here), on `precision`.
  GptStepRig(dptrain::Precision precision, const std::string& spec, std::uint64_t steps)
      : file_(write_tokens()), plan_(kRows, kBatch), steps_(steps) {
    using namespace dptrain;
    if (env().rank == 0) {
      data_ = std::make_unique<Dataset>(file_, "train");
      InputQueueConfig qc;
      qc.batch_size = kBatch;
      qc.end_step = steps;
      qc.raw_features = true;
      queue_ = std::make_unique<InputQueue>(*data_, qc);
    }
    be_ = make_gpu(precision);
    comm_ = be_->make_communicator(MpiCommHandle{MPI_COMM_WORLD});
    const int max_rows = max_shard_rows(kBatch, env().size);
    const char* precision_name = precision == Precision::kBf16 ? "bf16" : "fp32";  // for the logits
    model_ = std::make_unique<Model>(*be_, parse_model_spec(spec), Shape{kT}, max_rows, kVocab,
                                     Recompute::kNone, ModelStorage::kAllocated,
                                     logits_precision(precision_name, LossKind::kXent));
    model_->init(1);
    OptimizerConfig oc;
    oc.kind = OptimizerKind::kAdamW;
    oc.weight_decay = 0.1f;
    oc.clip_grad_norm = 0.5f;
    opt_ = std::make_unique<Optimizer>(*be_, oc, model_->num_params());
    input_ = std::make_unique<InputPipeline>(MPI_COMM_WORLD, *be_, queue_.get(), max_rows, kT, kT,
                                             LabelType::kClass, FeatureType::kTokenId);
    buckets_ = std::make_unique<GradientBuckets>(
        *comm_, model_->grads(), plan_buckets(model_->param_layout(), model_->num_params(), 1));
    stats_ = std::make_unique<DeviceBuffer<float>>(*be_, 2);
    input_->start(plan_.slot(0).rows);
  }
  ~GptStepRig() {
    if (env().rank != 0) return;
    std::remove(file_.c_str());
    rmdir(file_.substr(0, file_.rfind('/')).c_str());
  }
  GptStepRig(const GptStepRig&) = delete;
  GptStepRig& operator=(const GptStepRig&) = delete;

  dptrain::Backend& backend() { return *be_; }
  // The steps of the first epoch: once they ran, every batch size was seen.
  std::uint64_t warm_steps() const { return plan_.steps_per_epoch(); }
  // Runs step s (steps run in order, each once); false on non-finite gradients.
  bool step(std::uint64_t s) {
    const dptrain::Shard& shard = input_->finish();
    if (s + 1 < steps_) input_->start(plan_.slot(s + 1).rows);
    return dptrain::train_step(*be_, *comm_, *model_, *opt_, dptrain::LossKind::kXent, shard,
                               plan_.slot(s).rows, 0.01f, stats_->get(), nullptr, buckets_.get(),
                               nullptr, input_.get());
  }

 private:
  // Rank 0 writes the token set; returns its path ("" elsewhere).
  static std::string write_tokens() {
    using namespace dptrain;
    if (env().rank != 0) return "";
    char dir[] = "/tmp/dptrain-gpt-step.XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    const std::string file = std::string(dir) + "/tokens.h5";
    std::vector<std::int32_t> ids(static_cast<std::size_t>(kRows) * (kT + 1));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + i / 5) % kVocab);
    h5::File f = h5::create_file(file, ExitCode::kOther);
    h5::write_array(f.get(), "/train/tokens", H5T_STD_I32LE, H5T_NATIVE_INT32,
                    {hsize_t(kRows), hsize_t(kT + 1)}, ids.data(), ExitCode::kOther);
    h5::DataSet d = h5::open_dataset(f.get(), "/train/tokens", ExitCode::kOther);
    h5::write_attr(d.get(), "vocab_size", std::int64_t{kVocab}, ExitCode::kOther);
    return file;
  }

  std::string file_;
  dptrain::BatchPlan plan_;
  std::uint64_t steps_;
  std::unique_ptr<dptrain::Dataset> data_;
  std::unique_ptr<dptrain::InputQueue> queue_;
  std::unique_ptr<dptrain::Backend> be_;
  std::unique_ptr<dptrain::Communicator> comm_;
  std::unique_ptr<dptrain::Model> model_;
  std::unique_ptr<dptrain::Optimizer> opt_;
  std::unique_ptr<dptrain::InputPipeline> input_;
  std::unique_ptr<dptrain::GradientBuckets> buckets_;
  std::unique_ptr<dptrain::DeviceBuffer<float>> stats_;
};

}  // namespace gpu_test
