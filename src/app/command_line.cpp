// Implements: parse_options — one options_description per command built from
// shared groups, INI files through --config (the command line wins because it
// is stored first), and range checks that name the option.
#include "app/command_line.hpp"

#include "dptrain/data/augment.hpp"

#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include <boost/program_options.hpp>

#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/data/input_readers.hpp"
#include "dptrain/data/sample_order.hpp"
#include "dptrain/model/loss.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/model/optimizer.hpp"

namespace po = boost::program_options;

namespace dptrain {
namespace {

[[noreturn]] void usage_error(const std::string& msg) {
  throw Error(ExitCode::kUsage, msg + " (try 'dptrain --help')");
}

po::options_description data_group(Options& o) {
  po::options_description d("Data");
  d.add_options()
      ("data", po::value(&o.data), "HDF5 data file (sets /<set>/features, /<set>/labels), or a .txt list of such files, concatenated in order")
      ("train-set", po::value(&o.train_set)->default_value(o.train_set), "training set group")
      ("val-set", po::value(&o.val_set)->default_value(o.val_set), "validation set group; \"\" disables evaluation")
      ("shuffle", po::value(&o.shuffle)->default_value(o.shuffle), "none | full | block | auto (full when the set fits --input-cache-mb, else block)")
      ("augment", po::value(&o.augment)->default_value(o.augment), "training-time augmentation of images: crop:P (random crop after zero padding P), flip (horizontal); e.g. crop:4,flip")
      ("input-readers", po::value(&o.input_readers)->default_value(o.input_readers), "who reads the training rows: rank0 (rank 0 for all) | node (local rank 0 of each node for its node) | all (each rank its own); the same batches and weights either way")
      ("input-cache-mb", po::value(&o.input_cache_mb)->default_value(o.input_cache_mb), "each input reader holds a set in memory when it fits this many MiB")
      ("prefetch", po::value(&o.prefetch)->default_value(o.prefetch), "global batches each input reader reads ahead")
      ("shuffle-block-rows", po::value(&o.shuffle_block_rows)->default_value(o.shuffle_block_rows), "block shuffle: rows per contiguous block (0: follow the file's chunks, a multiple of the chunk rows near 1024; 1024 when not chunked)")
      ("shuffle-window-blocks", po::value(&o.shuffle_window_blocks)->default_value(o.shuffle_window_blocks), "block shuffle: blocks shuffled together (the shuffle buffer)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed of all randomness (init, shuffle, augmentation, dropout)");
  return d;
}

po::options_description model_group(Options& o) {
  po::options_description d("Model and optimizer");
  d.add_options()
      ("model", po::value(&o.model)->default_value(o.model), "the layers, comma-separated (docs/design.md section 2), e.g. conv:32:3,bn,relu,maxpool:2,dense:10; input shape from the data")
      ("loss", po::value(&o.loss)->default_value(o.loss), "xent (int labels) | mse (float targets)")
      ("batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "GLOBAL batch size, split across ranks")
      ("eval-batch-size", po::value(&o.eval_batch_size)->default_value(o.eval_batch_size), "global batch for evaluation (0: --batch-size)")
      ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every), "also evaluate after every N steps (0: at epoch ends and the end only)")
      ("eval-batches", po::value(&o.eval_batches)->default_value(o.eval_batches), "each evaluation covers the first K global batches of --val-set (0: all of it)")
      ("epochs", po::value(&o.epochs)->default_value(o.epochs), "stop after N epochs")
      ("steps", po::value(&o.steps)->default_value(o.steps), "stop after N optimizer steps (wins over --epochs)")
      ("optimizer", po::value(&o.optimizer)->default_value(o.optimizer), "sgd | adam | adamw")
      ("lr", po::value(&o.lr)->default_value(o.lr), "base learning rate")
      ("momentum", po::value(&o.momentum)->default_value(o.momentum), "sgd momentum")
      ("nesterov", po::value(&o.nesterov)->default_value(o.nesterov)->implicit_value(true), "sgd Nesterov momentum")
      ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "L2 (sgd, adam) or decoupled (adamw) weight decay")
      ("weight-decay-params", po::value(&o.weight_decay_params)->default_value(o.weight_decay_params), "all | matrices (decay only tensors of rank >= 2: weights and embeddings, not biases or norm scales)")
      ("clip-grad-norm", po::value(&o.clip_grad_norm)->default_value(o.clip_grad_norm), "0 = off; else scale the averaged gradient by min(1, X / (||g|| + 1e-6)) before the step, as torch.nn.utils.clip_grad_norm_; train events then carry grad_norm")
      ("shard-optimizer", po::bool_switch(&o.shard_optimizer), "ZeRO stage 1: each rank keeps and updates only its 1/P slice of the optimizer state (gradients reduce-scattered, parameters all-gathered); same results, optimizer memory / P; checkpoints unchanged")
      ("shard-params", po::bool_switch(&o.shard_params), "ZeRO stage 3 / FSDP: each rank keeps only its 1/P slice of the parameters, gradients and optimizer state; each top-level layer's parameters are all-gathered before its forward and its backward, its gradient reduce-scattered after; the results of --shard-optimizer; checkpoints unchanged")
      ("accumulate", po::value(&o.accumulate)->default_value(o.accumulate), "gradient accumulation: run each rank's shard as K micro-batches (activations for shard/K rows) and sum their gradients before the step's one reduction; the step is the same global-batch mean")
      ("recompute", po::value(&o.recompute)->default_value(o.recompute), "none | blocks: keep only each top-level layer's input (and output) from forward and run the layer's forward again right before its backward; the same results bit for bit, less activation memory, about one more forward of time")
      ("beta1", po::value(&o.beta1)->default_value(o.beta1), "adam beta1")
      ("beta2", po::value(&o.beta2)->default_value(o.beta2), "adam beta2")
      ("eps", po::value(&o.eps)->default_value(o.eps), "adam epsilon")
      ("lr-schedule", po::value(&o.lr_schedule)->default_value(o.lr_schedule), "constant | cosine | step")
      ("warmup-steps", po::value(&o.warmup_steps)->default_value(o.warmup_steps), "linear warmup steps")
      ("lr-step-size", po::value(&o.lr_step_size)->default_value(o.lr_step_size), "step schedule: steps between decays")
      ("lr-gamma", po::value(&o.lr_gamma)->default_value(o.lr_gamma), "step schedule: decay factor")
      ("min-lr", po::value(&o.min_lr)->default_value(o.min_lr), "cosine schedule: final learning rate");
  return d;
}

po::options_description device_group(Options& o) {
  po::options_description d("Device");
  d.add_options()
      ("device", po::value(&o.device)->default_value(o.device), "auto (cuda when every rank sees a GPU) | cpu | cuda")
      ("precision", po::value(&o.precision)->default_value(o.precision), "fp32 | tf32 | bf16 (tf32: cuda; bf16: cuda, and cpu with bf16 instructions)")
      ("attention", po::value(&o.attention)->default_value(o.attention), "auto (cuda: cudnn under --precision bf16 where the build has cuDNN, else fused; cpu: math) | math (T x T weights materialized: the reference) | fused (tiles with an online softmax, nothing T x T stored; cuda) | cudnn (cuDNN's fused attention, bf16 only; says once and runs fused where cuDNN cannot run a shape or its first run of it disagrees with fused, or under fp32/tf32)")
      ("cuda-graphs", po::value(&o.cuda_graphs)->default_value(o.cuda_graphs), "off | on: on one GPU (one rank), each training step's forward, loss and backward are recorded as a CUDA graph at their second step and replayed as one launch from then on (per shard buffer and batch size); the same results bit for bit, less host time a step. The forward phase's time then holds the backward's. Says once and runs as usual where the step cannot be recorded, with more ranks, --accumulate or --shard-params; cuda")
      ("threads", po::value(&o.threads)->default_value(o.threads), "CPU compute threads per rank (0: the CPUs this rank may run on, its affinity mask, shared with the ranks of the node bound to the same CPUs)")
      ("comm-timeout", po::value(&o.comm_timeout)->default_value(o.comm_timeout), "seconds a collective or data wait may take before the job aborts (exit 6)")
      ("bucket-mb", po::value(&o.bucket_mb)->default_value(o.bucket_mb), "gradient all-reduce bucket size in MiB; buckets start while earlier layers still run backward (0: one all-reduce after backward)");
  return d;
}

po::options_description train_group(Options& o) {
  po::options_description d("Checkpoints and output");
  d.add_options()
      ("init-from", po::value(&o.init_from), "start from the /model weights of this checkpoint")
      ("checkpoint-dir", po::value(&o.checkpoint_dir), "directory of periodic checkpoints")
      ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(o.checkpoint_every), "checkpoint every N steps (0: only at the end and on SIGTERM/SIGUSR1)")
      ("keep-checkpoints", po::value(&o.keep_checkpoints)->default_value(o.keep_checkpoints), "keep the newest K checkpoints (0: all)")
      ("resume", po::value(&o.resume)->default_value(o.resume), "auto (newest valid in --checkpoint-dir) | never | FILE")
      ("save", po::value(&o.save), "write the final checkpoint to this file")
      ("metrics", po::value(&o.metrics), "JSON Lines metrics file (rank 0)")
      ("timeline", po::value(&o.timeline), "Chrome trace (JSON) of every rank's phases, written by rank 0 at the end; open in Perfetto or chrome://tracing")
      ("log-every", po::value(&o.log_every)->default_value(o.log_every), "progress line and train event every N steps")
      ("peak-tflops", po::value(&o.peak_tflops)->default_value(o.peak_tflops), "a device's dense peak in TFLOPS for the mfu of token models' train events (0: from the GPU's name, for the --precision in use; unknown GPUs and the CPU report no mfu)")
      ("check-every", po::value(&o.check_every)->default_value(o.check_every), "compare parameter checksums across ranks every N steps (0: never)")
      ("plan-only", po::bool_switch(&o.plan_only), "print the memory plan of one rank (parameters, gradients, optimizer state, activations with and without --recompute blocks) and exit without training")
      ("plan-ranks", po::value(&o.plan_ranks)->default_value(o.plan_ranks), "--plan-only: plan for this many ranks (0: the ranks of this job)")
      ("fit-gib", po::value(&o.fit_gib)->default_value(o.fit_gib), "--plan-only: also the largest batch per rank whose plan fits this many GiB (0: not shown)")
      ("skip-nonfinite", po::value(&o.skip_nonfinite)->default_value(o.skip_nonfinite), "skip up to N steps with NaN/Inf gradients before failing");
  return d;
}

po::options_description eval_group(Options& o, bool with_output) {
  po::options_description d("Evaluation");
  d.add_options()
      ("checkpoint", po::value(&o.checkpoint), "checkpoint file")
      ("set", po::value(&o.set)->default_value(o.set), "set group in --data");
  if (with_output)
    d.add_options()("output", po::value(&o.output), "HDF5 file for /predictions")(
        "logits", po::bool_switch(&o.predict_logits),
        "language models: write /predictions/logits [N, T, V] too (N·T·V floats), not only the "
        "argmax per position");
  return d;
}

std::string any_to_string(const boost::any& v) {
  if (auto p = boost::any_cast<std::string>(&v)) return *p;
  if (auto p = boost::any_cast<std::int64_t>(&v)) return std::to_string(*p);
  if (auto p = boost::any_cast<std::uint64_t>(&v)) return std::to_string(*p);
  if (auto p = boost::any_cast<bool>(&v)) return *p ? "true" : "false";
  if (auto p = boost::any_cast<double>(&v)) {
    std::ostringstream s;
    s.precision(17);
    s << *p;
    return s.str();
  }
  return "?";
}

void require_positive(std::int64_t v, const char* name) {
  if (v <= 0) usage_error(std::string("--") + name + " must be > 0, got " + std::to_string(v));
}
void require_nonnegative(double v, const char* name) {
  if (!(v >= 0)) usage_error(std::string("--") + name + " must be >= 0, got " + std::to_string(v));
}
void require_one_of(const std::string& v, const char* name, std::vector<std::string> allowed) {
  for (auto& a : allowed)
    if (v == a) return;
  std::string list;
  for (auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  usage_error(std::string("--") + name + " '" + v + "' is not one of: " + list);
}

void check_train(const Options& o) {
  if (o.data.empty()) usage_error("train needs --data FILE");
  require_positive(o.batch_size, "batch-size");
  require_nonnegative(static_cast<double>(o.eval_batch_size), "eval-batch-size");
  require_nonnegative(static_cast<double>(o.eval_every), "eval-every");
  require_nonnegative(static_cast<double>(o.eval_batches), "eval-batches");
  if (o.steps <= 0) require_positive(o.epochs, "epochs");
  require_nonnegative(static_cast<double>(o.steps), "steps");
  // The parsers the run uses judge the names, so the lists live once.
  parse_loss(o.loss);
  parse_optimizer(o.optimizer);
  parse_lr_schedule(o.lr_schedule);
  parse_shuffle(o.shuffle, true);
  parse_augment(o.augment);  // a bad list is a usage error before anything runs
  parse_reader_mode(o.input_readers);
  if (!(o.lr > 0)) usage_error("--lr must be > 0");
  require_nonnegative(o.momentum, "momentum");
  if (o.nesterov && !(o.momentum > 0)) usage_error("--nesterov needs --momentum > 0");
  require_nonnegative(o.weight_decay, "weight-decay");
  parse_decay_all(o.weight_decay_params);
  require_nonnegative(o.clip_grad_norm, "clip-grad-norm");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) usage_error("--beta1 must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) usage_error("--beta2 must be in [0, 1)");
  if (!(o.eps > 0)) usage_error("--eps must be > 0");
  require_nonnegative(static_cast<double>(o.warmup_steps), "warmup-steps");
  require_positive(o.lr_step_size, "lr-step-size");
  require_positive(o.accumulate, "accumulate");
  if (o.accumulate > 65536) usage_error("--accumulate must be at most 65536, got " + std::to_string(o.accumulate));
  parse_recompute(o.recompute);
  require_nonnegative(static_cast<double>(o.plan_ranks), "plan-ranks");
  if (!(o.fit_gib >= 0.0) || !std::isfinite(o.fit_gib)) usage_error("--fit-gib must be a finite number >= 0");
  if (!o.plan_only && (o.plan_ranks > 0 || o.fit_gib > 0))
    usage_error("--plan-ranks and --fit-gib go with --plan-only");
  require_positive(o.log_every, "log-every");
  require_positive(o.input_cache_mb + 1, "input-cache-mb");
  require_positive(o.prefetch, "prefetch");
  require_nonnegative(static_cast<double>(o.shuffle_block_rows), "shuffle-block-rows");
  require_positive(o.shuffle_window_blocks, "shuffle-window-blocks");
  require_nonnegative(static_cast<double>(o.checkpoint_every), "checkpoint-every");
  require_nonnegative(static_cast<double>(o.keep_checkpoints), "keep-checkpoints");
  require_nonnegative(static_cast<double>(o.check_every), "check-every");
  require_nonnegative(static_cast<double>(o.skip_nonfinite), "skip-nonfinite");
  // Parsed here, where every rank reaches the same verdict, so only rank 0
  // speaks; the trainer parses the same strings again without failing.
  const auto layers = parse_model_spec(o.model);
  (void)layers;
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    usage_error("--checkpoint-every needs --checkpoint-dir");
  if (o.resume != "auto" && o.resume != "never" && !o.init_from.empty())
    usage_error("--resume FILE and --init-from are exclusive");
}

po::options_description generate_group(Options& o) {
  po::options_description d("Generation");
  d.add_options()
      ("checkpoint", po::value(&o.checkpoint), "checkpoint of a language model (trained on a token set)")
      ("prompt", po::value(&o.prompt), "text to continue (its UTF-8 bytes; byte-level models)")
      ("prompt-ids", po::value(&o.prompt_ids), "ids to continue, e.g. 1,2,3 (any vocabulary)")
      ("tokens", po::value(&o.generate_tokens)->default_value(o.generate_tokens), "tokens to generate")
      ("temperature", po::value(&o.temperature)->default_value(o.temperature),
       "divides the logits before sampling (0: always the most likely token)")
      ("top-k", po::value(&o.top_k)->default_value(o.top_k), "sample among the K most likely tokens (0: all)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed of the sampling (same seed, same text)");
  return d;
}

void check_generate(const Options& o) {
  if (o.checkpoint.empty()) usage_error("generate needs --checkpoint FILE");
  if (o.prompt.empty() == o.prompt_ids.empty())
    usage_error("generate needs a non-empty --prompt TEXT or --prompt-ids LIST (one of them)");
  require_positive(o.generate_tokens, "tokens");
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature))
    usage_error("--temperature must be a finite number >= 0");
  require_nonnegative(static_cast<double>(o.top_k), "top-k");
}

void check_common(const Options& o) {
  // The backends come from the factory, built or not: one not built here
  // fails later with a message that says so.
  std::vector<std::string> devices = {"auto"};
  for (const std::string& name : backend_names()) devices.push_back(name);
  require_one_of(o.device, "device", devices);
  parse_precision(o.precision);
  if (o.device == "cpu" && (o.attention == "fused" || o.attention == "cudnn"))
    usage_error("--attention " + o.attention + " needs --device cuda; the cpu backend computes "
                "attention as math");
  parse_attention(o.attention);
  require_one_of(o.cuda_graphs, "cuda-graphs", {"off", "on"});
  if (o.device == "cpu" && o.cuda_graphs == "on")
    usage_error("--cuda-graphs on needs --device cuda; the cpu backend runs each call as it is "
                "made");
  require_nonnegative(static_cast<double>(o.threads), "threads");
  if (!(o.comm_timeout > 0)) usage_error("--comm-timeout must be > 0");
  require_nonnegative(o.bucket_mb, "bucket-mb");
  if (!(o.peak_tflops >= 0.0) || !std::isfinite(o.peak_tflops))
    usage_error("--peak-tflops must be a finite number >= 0");
  if (o.bucket_mb > 1048576.0) usage_error("--bucket-mb must be at most 1048576 (1 TiB), got " + std::to_string(o.bucket_mb));
}

// The options of o.command (and its positional arguments) into `all`.
void add_command_options(Options& o, po::options_description& all,
                         po::positional_options_description& positional) {
  switch (o.command) {
    case Command::kTrain:
      all.add(data_group(o)).add(model_group(o)).add(device_group(o)).add(train_group(o));
      break;
    case Command::kEval:
    case Command::kPredict:
      all.add(eval_group(o, o.command == Command::kPredict));
      all.add_options()("data", po::value(&o.data), "HDF5 data file")(
          "eval-batch-size", po::value(&o.eval_batch_size)->default_value(1024), "global batch size")(
          "metrics", po::value(&o.metrics), "JSON Lines file for the eval event");
      all.add(device_group(o));
      break;
    case Command::kInspect:
      all.add_options()("file", po::value(&o.file), "data or checkpoint file")(
          "ranks", po::value(&o.inspect_ranks)->default_value(o.inspect_ranks),
          "checkpoints: also show the memory a rank holds when P ranks train it, with and without "
          "--shard-optimizer (0: not shown)");
      positional.add("file", 1);
      break;
    case Command::kGenerate:
      all.add(generate_group(o)).add(device_group(o));
      break;
  }
}

}  // namespace

const char* command_name(Command c) {
  switch (c) {
    case Command::kTrain: return "train";
    case Command::kEval: return "eval";
    case Command::kPredict: return "predict";
    case Command::kInspect: return "inspect";
    case Command::kGenerate: return "generate";
  }
  return "?";
}

namespace {

Command command_named(const std::string& cmd) {
  if (cmd == "train") return Command::kTrain;
  if (cmd == "eval") return Command::kEval;
  if (cmd == "predict") return Command::kPredict;
  if (cmd == "inspect") return Command::kInspect;
  if (cmd == "generate") return Command::kGenerate;
  usage_error("unknown command '" + cmd + "'; expected train, eval, predict, inspect or generate");
}

// The options given, from the command line or the config file, as an INI
// file that --config reads back (help and config themselves left out).
std::string options_as_ini(const po::options_description& all, const po::variables_map& vm) {
  std::ostringstream ini;
  for (const auto& opt : all.options()) {
    const std::string& name = opt->long_name();
    if (name == "help" || name == "config" || !vm.count(name)) continue;
    ini << name << " = " << any_to_string(vm[name].value()) << "\n";
  }
  return ini.str();
}

// What each command needs beside its options' own checks.
void check_command(Options& o, const std::string& cmd) {
  if (o.command == Command::kTrain) {
    check_train(o);
  } else if (o.command == Command::kInspect) {
    if (o.file.empty()) usage_error("inspect needs a FILE");
    return;
  } else if (o.command == Command::kGenerate) {
    check_generate(o);
  } else {
    if (o.checkpoint.empty()) usage_error(cmd + " needs --checkpoint FILE");
    if (o.data.empty()) usage_error(cmd + " needs --data FILE");
    if (o.command == Command::kPredict && o.output.empty()) usage_error("predict needs --output FILE");
    require_positive(o.eval_batch_size, "eval-batch-size");
  }
  check_common(o);
}

}  // namespace

Options parse_options(int argc, const char* const* argv) {
  Options o;
  const std::string overview =
      "usage: dptrain <command> [options]\n"
      "commands:\n"
      "  train     train a model with synchronized data parallelism\n"
      "  eval      loss and accuracy of a checkpoint on a set\n"
      "  predict   write /predictions/logits and /predictions/labels of a set\n"
      "  inspect   summary of a data or checkpoint file\n"
      "  generate  continue a prompt with a language model (one process, no mpirun)\n"
      "'dptrain <command> --help' lists the options of a command; every option may\n"
      "also be given in an INI file with --config FILE (the command line wins).\n";
  if (argc < 2) usage_error("no command given; expected train, eval, predict, inspect or generate");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    o.help = overview;
    return o;
  }
  o.command = command_named(cmd);

  std::string config_file;
  po::options_description generic("General");
  generic.add_options()("help,h", "show the options of this command")(
      "config", po::value(&config_file), "INI file of options (key = value, # comments)");
  po::options_description all(std::string("dptrain ") + cmd + " options");
  all.add(generic);
  po::positional_options_description positional;
  add_command_options(o, all, positional);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc - 1, argv + 1).options(all).positional(positional).run(),
              vm);
    if (vm.count("help")) {
      std::ostringstream s;
      s << "usage: dptrain " << cmd << " [options]\n" << all;
      o.help = s.str();
      return o;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) usage_error("cannot open config file '" + path + "'");
      try {
        po::store(po::parse_config_file(in, all, false), vm);
      } catch (const po::error& e) {
        usage_error("config file '" + path + "': " + e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    usage_error(e.what());
  }

  o.config_text = options_as_ini(all, vm);
  check_command(o, cmd);
  return o;
}

}  // namespace dptrain
