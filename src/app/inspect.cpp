// Implements: `dptrain inspect FILE` — a summary of a checkpoint (model,
// cursor, optimizer, layer shapes, stored config) or of a data file (per set:
// shapes, dtypes, chunking, label histogram or target ranges). Rank 0 prints;
// every rank returns the agreed outcome.
#include "app/inspect.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <vector>

#include "app/commands.hpp"
#include "dptrain/checkpoint/checkpoint.hpp"
#include "dptrain/common/error.hpp"
#include "dptrain/common/h5.hpp"
#include "dptrain/data/dataset.hpp"
#include "dptrain/data/dataset_files.hpp"
#include "dptrain/run/agree.hpp"
#include "dptrain/backends/backend_factory.hpp"
#include "dptrain/model/model.hpp"
#include "dptrain/train/rank_memory.hpp"

namespace dptrain {
namespace {

// Labels are scanned in slices of this size, so a set of any N fits in memory.
constexpr std::size_t kScanBytes = std::size_t(8) << 20;
// Class ids above this are counted but not binned: a histogram sized by a
// hostile label (2^31) would be the allocation we refuse everywhere else.
constexpr std::int64_t kMaxBinnedClasses = std::int64_t(1) << 16;
constexpr std::size_t kPrintedClasses = 100;
constexpr std::uint64_t kPerTargetColumns = 16;  // per-column stats up to this K

void print_config(const std::string& text, std::ostream& out) {
  if (text.empty()) return;
  out << "  config:\n";
  std::size_t p = 0;
  while (p < text.size()) {
    std::size_t nl = std::min(text.find('\n', p), text.size());
    out << "    " << text.substr(p, nl - p) << "\n";
    p = nl + 1;
  }
}

// One line per layer: its tensors with their shapes and how many values
// they hold together.
void print_tensors(const std::vector<ParamInfo>& layout, const char* unit, std::ostream& out) {
  for (std::size_t i = 0; i < layout.size();) {
    const std::string& layer = layout[i].layer;
    out << "    " << std::left << std::setw(13) << layer << " ";
    std::uint64_t n = 0;
    for (int k = 0; i < layout.size() && layout[i].layer == layer; ++i, ++k) {
      out << std::setw(k == 0 ? 22 : 14) << layout[i].name + " " + dims_string(layout[i].shape);
      n += layout[i].count;
    }
    out << std::right << n << " " << unit << "\n";
  }
}

// The per-sample input shape of a file with a spec and an input shape
// (version 2); rank 0 when it has none.
Shape checkpoint_input(const CheckpointData& ck) {
  if (ck.meta.model.empty() || ck.input_shape.empty() || ck.input_shape.size() > 4) return {};
  const auto& d = ck.input_shape;
  auto dim = [&](std::size_t i) { return static_cast<int>(d[i]); };
  return d.size() == 1   ? Shape{dim(0)}
         : d.size() == 2 ? Shape{dim(0), dim(1)}
         : d.size() == 3 ? Shape{dim(0), dim(1), dim(2)}
                         : Shape{dim(0), dim(1), dim(2), dim(3)};
}

// The value of `key` in the stored config's INI text ("batch-size = 32"),
// or "" when it is not there.
std::string config_value(const std::string& ini, const std::string& key) {
  std::istringstream lines(ini);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](std::string t) {
      const auto a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t\r");
      return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
    };
    if (trim(line.substr(0, eq)) == key) return trim(line.substr(eq + 1));
  }
  return "";
}

// The model's layers, each with its output shape and parameter count, when
// the file has a spec and an input shape (version 2).
void print_layer_shapes(const CheckpointData& ck, std::ostream& out) {
  const Shape input = checkpoint_input(ck);
  if (input.rank() == 0) return;
  out << "  input:           " << input.to_string()
      << (ck.vocab_size > 0 ? " token ids of a vocabulary of " + std::to_string(ck.vocab_size) : "")
      << " per sample\n  layer outputs:\n";
  const int vocab = static_cast<int>(ck.vocab_size);
  for (const auto& l : build_layers(parse_model_spec(ck.meta.model), input, vocab)) {
    std::size_t n = 0;
    for (const ParamInfo& p : l->params()) n += p.count;
    out << "    " << std::left << std::setw(13) << l->name() << std::setw(44) << l->spec()
        << std::setw(18) << l->output_shape().to_string() << std::right << n << " parameters\n";
  }
}

// --ranks P, for a file with a spec, an input shape and its run's batch:
// the activations of one rank's micro-batch, as the cpu backend plans them
// (Model::activation_plan, the code that sizes a run), without and with
// --recompute blocks.
void print_rank_activations(const CheckpointData& ck, int ranks, std::ostream& out) {
  const Shape input = checkpoint_input(ck);
  const std::string batch_text = config_value(ck.meta.config, "batch-size");
  if (input.rank() == 0 || batch_text.empty()) return;
  // A config that does not hold plain positive numbers shows no plan.
  auto number = [](const std::string& text) {
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    return end && *end == '\0' && v > 0 && v < (1LL << 40) ? v : 0LL;
  };
  const std::string accumulate_text = config_value(ck.meta.config, "accumulate");
  const long long batch = number(batch_text);
  const long long micro = accumulate_text.empty() ? 1 : number(accumulate_text);
  if (batch == 0 || micro == 0) return;
  const long long shard = (batch + ranks - 1) / ranks;
  const long long rows_per_rank = (shard + micro - 1) / micro;
  if (rows_per_rank > (1LL << 30)) return;
  const int rows = static_cast<int>(rows_per_rank);
  const auto be = make_backend("cpu", BackendOptions{});
  const Model model(*be, parse_model_spec(ck.meta.model), input, 1,
                    static_cast<int>(ck.vocab_size), Recompute::kNone, ModelStorage::kPlanOnly);
  const ActivationPlan plain = model.activation_plan(rows, Recompute::kNone);
  const ActivationPlan recomputed = model.activation_plan(rows, Recompute::kBlocks);
  out << "  activations:     " << human_bytes(plain.total()) << " for " << rows
      << " rows a rank (batch " << batch << (micro > 1 ? ", --accumulate " + std::to_string(micro) : "")
      << "): " << human_bytes(plain.kept) << " kept for backward, " << human_bytes(plain.workspace)
      << " workspace\n"
      << "  recomputed:      " << human_bytes(recomputed.total()) << " with --recompute blocks: "
      << human_bytes(recomputed.kept) << " kept, " << human_bytes(recomputed.workspace)
      << " workspace\n"
      << "                   (as the cpu backend plans them: attention as math)\n";
}

// --ranks P: what each of P ranks would hold to train this checkpoint on,
// with the optimizer state it stores, with and without --shard-optimizer.
void print_rank_memory(const CheckpointData& ck, int ranks, std::ostream& out) {
  const int arrays = static_cast<int>(ck.optimizer_state.size());
  for (const bool sliced : {false, true}) {
    const RankMemory m = rank_memory(ck.params.size(), arrays, ranks, sliced, false);
    out << (sliced ? "  sharded:         " : "  on " + std::to_string(ranks) + " rank(s):    ")
        << describe(m) << "\n";
  }
  // --shard-params needs the units: the top-level layers of the spec.
  const Shape input = checkpoint_input(ck);
  if (input.rank() > 0) {
    const auto be = make_backend("cpu", BackendOptions{});
    const Model plan(*be, parse_model_spec(ck.meta.model), input, 1, static_cast<int>(ck.vocab_size),
                     Recompute::kNone, ModelStorage::kPlanOnly);
    const RankMemory m = rank_memory(ck.params.size(), arrays, ranks, true, false, true,
                                     plan.largest_layer_params());
    out << "  --shard-params:  " << describe(m) << "\n";
  }
  out << "                   (per rank, before activations; --accumulate K > 1 adds one "
         "gradient arena)\n";
  print_rank_activations(ck, ranks, out);
}

void inspect_checkpoint(const std::string& path, bool has_format, int ranks, std::ostream& out) {
  // A /model-only file (h5py, --init-from) has no attributes to show.
  const CheckpointData ck = read_checkpoint(path, !has_format);
  const CheckpointMeta& m = ck.meta;
  out << path << ": "
      << (has_format ? "dptrain checkpoint"
                     : "model-only checkpoint (/model without attributes; an --init-from source)")
      << "\n";
  if (has_format) {
    out << "  model:           " << m.model << "\n"
        << "  loss:            " << m.loss << "\n"
        << "  step:            " << m.step << " (epoch " << m.epoch << ", epoch_position "
        << m.epoch_position << ")\n"
        << "  seed:            " << m.seed << "\n"
        << "  world size:      " << m.world_size << "\n";
    out << "  optimizer:       " << (m.optimizer.empty() ? "(none)" : m.optimizer) << ", step "
        << m.optimizer_step << ", state:";
    if (ck.optimizer_state.empty()) out << " none";
    for (const auto& s : ck.optimizer_state) out << " " << s.name;
    out << "\n";
  }
  print_layer_shapes(ck, out);
  out << "  tensors:\n";
  print_tensors(ck.param_layout, "parameters", out);
  if (!ck.buffer_layout.empty()) {
    out << "  buffers:\n";
    print_tensors(ck.buffer_layout, "values", out);
  }
  const std::uint64_t n = ck.params.size();
  out << "  parameters:      " << n << " (" << human_bytes(n * 4) << " as float32)\n";
  if (!ck.buffers.empty())
    out << "  buffer values:   " << ck.buffers.size() << " ("
        << human_bytes(ck.buffers.size() * 4) << " as float32)\n";
  if (!ck.optimizer_state.empty())
    out << "  optimizer bytes: " << human_bytes(n * 4 * ck.optimizer_state.size()) << "\n";
  if (ranks > 0) print_rank_memory(ck, ranks, out);
  print_config(m.config, out);
}

void print_histogram(Dataset& ds, std::ostream& out) {
  const SetInfo& info = ds.info();
  const std::uint64_t step = std::max<std::uint64_t>(1, kScanBytes / info.label_bytes_per_row());
  std::vector<std::int32_t> buf;
  std::vector<std::uint64_t> counts;
  std::uint64_t negative = 0, too_large = 0;
  for (std::uint64_t begin = 0; begin < info.rows; begin += step) {
    const std::uint64_t cnt = std::min(step, info.rows - begin);
    buf.resize(cnt);
    ds.read_rows(begin, cnt, nullptr, buf.data());
    for (std::int32_t v : buf) {
      if (v < 0) {
        ++negative;
      } else if (v >= kMaxBinnedClasses) {
        ++too_large;
      } else {
        if (std::size_t(v) >= counts.size()) counts.resize(std::size_t(v) + 1, 0);
        ++counts[v];
      }
    }
  }
  out << "  classes:  " << counts.size() << " (largest id " << std::int64_t(counts.size()) - 1
      << ")\n  histogram:";
  for (std::size_t c = 0; c < std::min(counts.size(), kPrintedClasses); ++c)
    out << (c % 8 == 0 ? "\n    " : "  ") << c << ": " << counts[c];
  out << "\n";
  if (counts.size() > kPrintedClasses)
    out << "    ... " << counts.size() - kPrintedClasses << " more classes\n";
  if (negative) out << "  negative ids: " << negative << " (invalid for --loss xent)\n";
  if (too_large) out << "  ids >= " << kMaxBinnedClasses << ": " << too_large << "\n";
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  std::uint64_t n = 0;
  void add(float v) {
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
    sum += v;
    ++n;
  }
  void print(std::ostream& out) const {
    if (n == 0) {
      out << "no finite values";
      return;
    }
    out << "min " << lo << ", mean " << sum / double(n) << ", max " << hi;
  }
};

void print_targets(Dataset& ds, std::ostream& out) {
  const SetInfo& info = ds.info();
  const std::uint64_t k = info.label_width;
  const std::uint64_t step = std::max<std::uint64_t>(1, kScanBytes / info.label_bytes_per_row());
  std::vector<float> buf;
  Range all;
  std::vector<Range> cols(k <= kPerTargetColumns ? k : 0);
  std::uint64_t nonfinite = 0;
  for (std::uint64_t begin = 0; begin < info.rows; begin += step) {
    const std::uint64_t cnt = std::min(step, info.rows - begin);
    buf.resize(cnt * k);
    ds.read_rows(begin, cnt, nullptr, buf.data());
    for (std::size_t i = 0; i < buf.size(); ++i) {
      if (!std::isfinite(buf[i])) {
        ++nonfinite;
        continue;
      }
      all.add(buf[i]);
      if (!cols.empty()) cols[i % k].add(buf[i]);
    }
  }
  out << "  targets:  ";
  all.print(out);
  out << "\n";
  if (cols.size() > 1)
    for (std::size_t c = 0; c < cols.size(); ++c) {
      out << "    [" << c << "] ";
      cols[c].print(out);
      out << "\n";
    }
  if (nonfinite) out << "  NaN/Inf targets: " << nonfinite << "\n";
}

// A token set: its windows, vocabulary and stored type, and the range of
// ids (one validation pass, which also refuses ids out of the vocabulary).
void print_token_set(Dataset& ds, hid_t first_file, const std::string& set, std::ostream& out) {
  const SetInfo& info = ds.info();
  h5::DataSet tokens = h5::open_dataset(first_file, "/" + set + "/tokens", ExitCode::kData);
  const std::string type = h5::type_name(h5::type_of(tokens.get()).get());
  const std::int64_t max_id = ds.validate(0);
  out << "set " << set << ": N = " << info.rows << "\n"
      << "  tokens:   " << type << " [" << info.rows << ", " << info.dim + 1
      << "] windows (T = " << info.dim << " inputs, each followed by its target), vocab_size "
      << info.vocab_size << ", largest id " << max_id << ", "
      << (info.chunk_rows ? "chunks of " + std::to_string(info.chunk_rows) + " rows"
                          : std::string("contiguous"))
      << "\n";
}

void inspect_data(const std::string& path, const std::vector<std::string>& sets,
                  std::ostream& out) {
  // A list: the sets of all its files, concatenated; stored types as in the first.
  const bool list = is_file_list(path);
  const std::vector<std::string> files = list ? read_file_list(path) : std::vector<std::string>{path};
  out << path << ": " << (list ? "list of " + std::to_string(files.size()) + " data files" : "data file")
      << ", " << sets.size() << (sets.size() == 1 ? " set" : " sets") << "\n";
  h5::File f = h5::open_read(files.front(), ExitCode::kData);
  for (const auto& set : sets) {
    Dataset ds(path, set);
    const SetInfo& info = ds.info();
    if (info.tokens()) {
      print_token_set(ds, f.get(), set, out);
      continue;
    }
    h5::DataSet labels = h5::open_dataset(f.get(), "/" + set + "/labels", ExitCode::kData);
    h5::DataType lt = h5::type_of(labels.get());
    std::vector<hsize_t> fshape(info.feature_shape.begin(), info.feature_shape.end());
    out << "set " << set << ": N = " << info.rows << "\n"
        << "  features: " << h5::shape_string(fshape) << " "
        << feature_type_name(info.feature_type)
        << (info.feature_type == FeatureType::kUint8 ? " (scaled by 1/255)" : "")
        << ", D = " << info.dim << ", "
        << (info.chunk_rows ? "chunks of " + std::to_string(info.chunk_rows) + " rows"
                            : std::string("contiguous"))
        << ", " << human_bytes(info.rows * info.feature_bytes_per_row()) << "\n";
    if (info.label_type == LabelType::kClass) {
      out << "  labels:   class ids, " << h5::type_name(lt.get()) << " [" << info.rows << "]\n";
      print_histogram(ds, out);
    } else {
      out << "  labels:   float targets, " << h5::type_name(lt.get()) << " [" << info.rows
          << ", " << info.label_width << "]\n";
      print_targets(ds, out);
    }
  }
}

}  // namespace

void inspect_file(const std::string& path, std::ostream& out, int ranks) {
  if (is_file_list(path)) {
    inspect_data(path, list_sets(path), out);
    return;
  }
  std::string format;
  bool has_model = false;
  {
    h5::File f = h5::open_read(path, ExitCode::kData);
    if (h5::has_attr(f.get(), "format")) {
      // Only a short string can name a format; a huge one is not worth reading.
      h5::Attribute a(H5Aopen(f.get(), "format", H5P_DEFAULT));
      format = a && H5Aget_storage_size(a.get()) > 4096
                   ? "(oversized)"
                   : h5::read_attr_string(f.get(), "format", ExitCode::kCheckpoint);
    }
    has_model = h5::is_group(f.get(), "/model");
  }
  if (format == "dptrain-checkpoint" || (format.empty() && has_model)) {
    inspect_checkpoint(path, !format.empty(), ranks, out);
    return;
  }
  const std::vector<std::string> sets = list_sets(path);
  if (!sets.empty()) {
    inspect_data(path, sets, out);
    return;
  }
  if (!format.empty())
    throw Error(ExitCode::kCheckpoint,
                "not a dptrain checkpoint (format attribute is '" + format + "') nor a data file",
                path);
  throw Error(ExitCode::kData,
              "neither a dptrain checkpoint (no format attribute, no /model group) nor a data "
              "file (no group holding features and labels)",
              path);
}

ExitCode run_inspect(const Options& opts, MpiSession& mpi) {
  // Agreed, so every rank exits with rank 0's verdict on the file.
  agree(mpi.world(), [&] {
    if (mpi.rank() != 0) return;
    inspect_file(opts.file, std::cout, static_cast<int>(opts.inspect_ranks));
    std::cout.flush();
  });
  return ExitCode::kOk;
}

}  // namespace dptrain
