// Implements: the generate command (docs/design.md section 2) — a language
// model's checkpoint continues a prompt one token at a time: the model reads
// the last T tokens (the context slides past T; a shorter context is padded
// after its end, which a causal model never reads), the logits of the last
// real position are divided by --temperature, cut to the --top-k most likely
// and sampled with a generator seeded by --seed, so the same seed gives the
// same text. Byte-level models (vocabulary 256) read the prompt's bytes and
// write bytes; others read --prompt-ids and write ids.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/random.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/run/runtime.hpp"

namespace dptrain {
namespace {

constexpr std::uint64_t kSamplePurpose = 0x73616d70;  // "samp": apart from init and shuffle draws
constexpr int kByteVocab = 256;

// The prompt as ids of a vocabulary of `vocab`; Error(kUsage) naming the
// first id (or byte) the model cannot take.
std::vector<std::int32_t> prompt_ids(const Options& opts, int vocab) {
  std::vector<std::int32_t> ids;
  if (!opts.prompt.empty()) {
    for (std::size_t i = 0; i < opts.prompt.size(); ++i) {
      const auto byte = static_cast<unsigned char>(opts.prompt[i]);
      DPT_REQUIRE(byte < vocab, ExitCode::kUsage,
                  "--prompt: byte " + std::to_string(byte) + " at offset " + std::to_string(i) +
                      " is outside the model's vocabulary of " + std::to_string(vocab) +
                      " (use --prompt-ids)");
      ids.push_back(byte);
    }
    return ids;
  }
  std::size_t pos = 0;
  while (pos <= opts.prompt_ids.size()) {
    const std::size_t comma = std::min(opts.prompt_ids.find(',', pos), opts.prompt_ids.size());
    const std::string item = opts.prompt_ids.substr(pos, comma - pos);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DPT_REQUIRE(used == item.size() && !item.empty() && v >= 0 && v < vocab, ExitCode::kUsage,
                "--prompt-ids: '" + item + "' (item " + std::to_string(ids.size()) +
                    ") is not an id in [0, " + std::to_string(vocab) + ")");
    ids.push_back(static_cast<std::int32_t>(v));
    pos = comma + 1;
  }
  return ids;
}

// One draw from softmax(logits / temperature) over the top_k largest
// (temperature 0: the first largest).
std::int32_t sample(const std::vector<float>& logits, double temperature, std::int64_t top_k,
                    Rng& rng) {
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by id, so the order is a function of the logits alone.
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  if (temperature == 0.0) return order.front();
  const std::size_t k = top_k > 0 ? std::min<std::size_t>(top_k, order.size()) : order.size();
  std::vector<double> p(k);
  double sum = 0.0;
  for (std::size_t i = 0; i < k; ++i)
    sum += p[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  double u = rng.uniform() * sum;
  for (std::size_t i = 0; i < k; ++i)
    if ((u -= p[i]) < 0.0) return order[i];
  return order[k - 1];
}

}  // namespace

ExitCode run_generate(const Options& opts, MpiSession& mpi) {
  agree(mpi.world(), [&] {  // rank 0 says it, every rank exits 2
    DPT_REQUIRE(mpi.rank() != 0 || mpi.size() == 1, ExitCode::kUsage,
                "generate runs on one process; start it without mpirun");
  });
  const CheckpointData ck = read_checkpoint(opts.checkpoint, true);
  DPT_REQUIRE(ck.vocab_size > 0 && ck.input_shape.size() == 1 && !ck.meta.model.empty(),
              ExitCode::kUsage,
              opts.checkpoint + ": not a language model (generate needs a checkpoint of a model "
                                "trained on a token set)");
  const int t = static_cast<int>(ck.input_shape[0]), vocab = static_cast<int>(ck.vocab_size);
  const std::vector<std::int32_t> prompt = prompt_ids(opts, vocab);
  Runtime rt = make_runtime(opts, mpi);
  Backend& be = *rt.backend;
  Model model(be, parse_model_spec(ck.meta.model), Shape{t}, 1, vocab);
  check_layout(ck, model.param_layout(), model.buffer_layout(), opts.checkpoint);
  be.copy_to_device(model.params(), ck.params.data(), ck.params.size() * sizeof(float));
  if (!ck.buffers.empty())
    be.copy_to_device(model.buffers(), ck.buffers.data(), ck.buffers.size() * sizeof(float));

  const bool bytes = vocab == kByteVocab && opts.prompt_ids.empty();
  std::vector<std::int32_t> context = prompt;
  std::vector<std::int32_t> window(static_cast<std::size_t>(t), 0);
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  DeviceBuffer<float> input(be, static_cast<std::size_t>(t));
  Rng rng(mix_seed(opts.seed, kSamplePurpose));
  if (bytes) std::fwrite(opts.prompt.data(), 1, opts.prompt.size(), stdout);
  for (std::int64_t i = 0; i < opts.generate_tokens; ++i) {
    const std::size_t n = std::min(context.size(), static_cast<std::size_t>(t));
    std::fill(window.begin(), window.end(), 0);
    std::copy(context.end() - static_cast<std::ptrdiff_t>(n), context.end(), window.begin());
    be.copy_to_device(input.get(), window.data(), window.size() * sizeof(std::int32_t));
    const float* out = model.forward(input.get(), 1, nullptr, Mode::kEval);
    be.copy_to_host(logits.data(), out + (n - 1) * static_cast<std::size_t>(vocab),
                    logits.size() * sizeof(float));
    const std::int32_t next = sample(logits, opts.temperature, opts.top_k, rng);
    context.push_back(next);
    if (bytes) std::fputc(next, stdout);
    else std::printf("%s%d", i ? "," : "", next);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return ExitCode::kOk;
}

}  // namespace dptrain
