// Implements: the options of one run (docs/design.md section 2), as every
// concern reads them; app/command_line.cpp fills them from the command line
// and --config files.
#pragma once

#include <cstdint>
#include <string>

namespace dptrain {

enum class Command { kTrain, kEval, kPredict, kInspect, kGenerate };

struct Options {
  Command command = Command::kTrain;
  std::string help;  // non-empty: print this and exit 0

  // data and model
  std::string data, train_set = "train", val_set = "test";
  std::string model = "dense:256,relu,dense:256,relu,dense:10";
  std::string loss = "xent";
  std::int64_t batch_size = 128, eval_batch_size = 0;  // 0: same as batch size
  // train: also evaluate after every N steps (0: at epoch ends and the end
  // only); each evaluation covers the first K global batches (0: the set).
  std::int64_t eval_every = 0, eval_batches = 0;
  std::int64_t epochs = 1, steps = 0;                   // steps > 0 wins
  // optimizer and schedule
  std::string optimizer = "adam";
  double lr = 1e-3, momentum = 0.0, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool nesterov = false;
  double clip_grad_norm = 0.0;               // 0 = off
  std::string weight_decay_params = "all";   // all | matrices
  std::string lr_schedule = "constant";
  std::int64_t warmup_steps = 0, lr_step_size = 1000;
  double lr_gamma = 0.1, min_lr = 0.0;
  bool shard_optimizer = false;  // ZeRO stage 1: optimizer state in 1/P slices
  bool shard_params = false;     // ZeRO stage 3: parameters, gradients and state in 1/P slices
  std::int64_t accumulate = 1;   // micro-batches per rank and step
  std::string recompute = "none";  // none | blocks: top-level layers run forward again in backward
  // input
  std::string shuffle = "auto";  // auto = full when the set fits the cache, else block
  std::string augment;           // "crop:4,flip"; "" = none
  std::string input_readers = "rank0";  // rank0 | node | all: who reads the training rows
  // shuffle_block_rows 0: the file's chunk rows (a multiple near 1024), or 1024.
  std::int64_t input_cache_mb = 1024, prefetch = 4, shuffle_block_rows = 0,
               shuffle_window_blocks = 64;
  std::uint64_t seed = 0;
  // device
  std::string device = "auto", precision = "fp32", attention = "auto";
  std::string cuda_graphs = "off";  // off | on: train steps replayed as CUDA graphs (one rank)
  std::int64_t threads = 0;  // 0: this rank's CPUs, shared with ranks bound to the same ones
  // checkpoints
  std::string init_from, checkpoint_dir, resume = "auto", save;
  std::int64_t checkpoint_every = 0, keep_checkpoints = 3;
  // output and safety
  std::string metrics;
  std::int64_t log_every = 100, check_every = 200, skip_nonfinite = 0;
  double peak_tflops = 0.0;  // a device's dense peak for mfu (0: the GPU table's)
  double comm_timeout = 300.0;
  double bucket_mb = 4.0;  // gradient all-reduce bucket size (MiB)
  std::string timeline;    // Chrome trace of every rank's phases ("" = off)
  // --plan-only: print the memory plan per rank and exit; for plan_ranks
  // ranks (0: the job's), and the largest batch that fits fit_gib GiB.
  bool plan_only = false;
  std::int64_t plan_ranks = 0;
  double fit_gib = 0.0;
  // eval / predict / inspect
  std::string checkpoint, set = "test", output, file;
  std::int64_t inspect_ranks = 0;  // inspect a checkpoint: memory per rank at this many ranks
  bool predict_logits = false;  // predict on a sequence output: also write the N·T·V logits
  // generate: a prompt as text (UTF-8 bytes) or ids "1,2,3", tokens to add,
  // sampling temperature (0: the most likely token) and top-k (0: all).
  std::string prompt, prompt_ids;
  std::int64_t generate_tokens = 200, top_k = 0;
  double temperature = 1.0;

  std::string config_text;  // resolved options as INI, stored in checkpoints
};

}  // namespace dptrain
