// Implements: write_checkpoint and check_layout (checkpoint.hpp): the
// docs/design.md section 4 file, written atomically (NAME.tmp, fsync, rename,
// fsync of the directory) in a format whose data chunks and metadata are all
// checksummed. Reading lives in checkpoint_read.cpp.
#include "dptrain/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/checkpoint_format.hpp"
#include "dptrain/common/test_hooks.hpp"

namespace dptrain {
namespace {

using namespace ckpt;

// About 1 MiB per chunk: each chunk carries its own Fletcher32 checksum, so a
// flipped bit fails the read of exactly the chunk that holds it.
constexpr std::uint64_t kChunkBytes = std::uint64_t(1) << 20;

h5::CreateOptions chunked(hsize_t row_floats) {
  h5::CreateOptions co;
  co.chunk_rows = std::max<hsize_t>(1, kChunkBytes / (4 * std::max<hsize_t>(1, row_floats)));
  co.fletcher32 = true;
  return co;
}

std::vector<hsize_t> dims_of(const ParamInfo& p) { return {p.shape.begin(), p.shape.end()}; }

// Writes one arena (params, buffers or an optimizer state) as
// <base>/<layer>/<name>, one dataset per tensor, chunked by rows of its
// first dimension.
void write_arena(hid_t file, const std::string& base, const std::vector<ParamInfo>& layout,
                 const std::vector<float>& arena) {
  for (const ParamInfo& p : layout) {
    const hsize_t row_floats = p.count / p.shape.front();
    h5::write_array(file, base + "/" + p.path(), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims_of(p),
                    arena.data() + p.offset, kCode, chunked(row_floats));
  }
}

// The same for a state whose tensors come one at a time from its fetch.
void write_arena(hid_t file, const std::string& base, const std::vector<ParamInfo>& layout,
                 const std::function<void(const ParamInfo&, float*)>& fetch) {
  std::size_t largest = 0;
  for (const ParamInfo& p : layout) largest = std::max(largest, p.count);
  std::vector<float> tensor(largest);
  for (const ParamInfo& p : layout) {
    fetch(p, tensor.data());
    const hsize_t row_floats = p.count / p.shape.front();
    h5::write_array(file, base + "/" + p.path(), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, dims_of(p),
                    tensor.data(), kCode, chunked(row_floats));
  }
}

bool bad_name(const std::string& s) {
  return s.empty() || s.find_first_of("/,.") != std::string::npos;
}
// A layer may be nested ("res0/proj"): '/'-separated names, none empty.
bool bad_layer_name(const std::string& s) {
  return s.empty() || s.front() == '/' || s.back() == '/' || s.find("//") != std::string::npos ||
         s.find_first_of(",.") != std::string::npos;
}

// Refuses a layout that is not a packed arena of `values` floats with
// distinct names: writing it would produce a file that our reader rejects.
void check_arena(const std::vector<ParamInfo>& layout, std::size_t values, const char* what,
                 std::set<std::string>& names, const std::string& path) {
  std::size_t n = 0;
  for (const ParamInfo& p : layout) {
    std::size_t count = p.shape.empty() ? 0 : 1;
    for (std::size_t d : p.shape) count *= d;
    if (bad_layer_name(p.layer) || bad_name(p.name) || count == 0 || p.count != count ||
        p.offset != n)
      fail(path, "cannot write checkpoint: " + p.path() + " has a bad name, shape or arena offset");
    if (!names.insert(p.path()).second)
      fail(path, "cannot write checkpoint: two tensors named " + p.path());
    n += p.count;
  }
  if (values != n)
    fail(path, "cannot write checkpoint: " + std::to_string(values) + " " + what +
                   " for a layout of " + std::to_string(n));
}

void check_data(const CheckpointData& data, const std::string& path) {
  if (data.param_layout.empty()) fail(path, "cannot write checkpoint: the model has no parameters");
  std::set<std::string> names;
  check_arena(data.param_layout, data.params_fetch ? arena_size(data.param_layout) : data.params.size(),
              "parameters", names, path);
  check_arena(data.buffer_layout, data.buffers.size(), "buffer values", names, path);
  for (const auto& s : data.optimizer_state)
    if ((s.fetch ? !s.values.empty() : s.values.size() != arena_size(data.param_layout)) ||
        bad_name(s.name))
      fail(path, "cannot write checkpoint: optimizer state '" + s.name + "' is misshaped");
}

// The buffers attribute of /model: the buffer tensors in arena order, so
// a reader finds them without knowing any layer kind.
void write_buffers(hid_t f, const CheckpointData& data) {
  if (data.buffer_layout.empty()) return;
  write_arena(f, "/model", data.buffer_layout, data.buffers);
  std::string list;
  for (const ParamInfo& p : data.buffer_layout) {
    if (!list.empty()) list += ',';
    list += p.path();
  }
  h5::Group model = h5::open_group(f, "/model", kCode);
  h5::write_attr_fixed(model.get(), kBuffersAttr, list, kCode);
}

void write_contents(hid_t f, const CheckpointData& data) {
  const CheckpointMeta& m = data.meta;
  h5::write_attr_fixed(f, "format", kFormat, kCode);
  h5::write_attr(f, "version", kVersion, kCode);
  h5::write_attr_fixed(f, "model", m.model, kCode);
  h5::write_attr_fixed(f, "loss", m.loss, kCode);
  h5::write_attr_fixed(f, "config", m.config, kCode);
  h5::write_attr_fixed(f, "optimizer", m.optimizer, kCode);
  h5::write_attr(f, "step", m.step, kCode);
  h5::write_attr(f, "epoch", m.epoch, kCode);
  h5::write_attr(f, "epoch_position", m.epoch_position, kCode);
  h5::write_attr(f, "world_size", m.world_size, kCode);
  h5::write_attr(f, "optimizer_step", m.optimizer_step, kCode);
  h5::write_attr(f, "seed", m.seed, kCode);
  if (!data.input_shape.empty())
    h5::write_attr_int64s(f, kInputShapeAttr,
                          std::vector<std::int64_t>(data.input_shape.begin(), data.input_shape.end()),
                          kCode);
  if (data.vocab_size > 0) h5::write_attr(f, kVocabAttr, data.vocab_size, kCode);
  if (data.params_fetch) write_arena(f, "/model", data.param_layout, data.params_fetch);
  else write_arena(f, "/model", data.param_layout, data.params);
  write_buffers(f, data);

  h5::Group opt = h5::create_group(f, "/optimizer", kCode);
  std::string names;
  for (const auto& s : data.optimizer_state) {
    names += (names.empty() ? "" : ",") + s.name;
    if (s.fetch) write_arena(f, "/optimizer/" + s.name, data.param_layout, s.fetch);
    else write_arena(f, "/optimizer/" + s.name, data.param_layout, s.values);
  }
  h5::write_attr_fixed(opt.get(), "name", m.optimizer, kCode);
  h5::write_attr(opt.get(), "step", m.optimizer_step, kCode);
  // Restore order matters (the optimizer's state() order), name order may differ.
  h5::write_attr_fixed(opt.get(), "states", names, kCode);

  // Init, sample order and dropout are pure functions of (seed, epoch,
  // position) — splitmix64 streams keyed by them — so the seed plus the root
  // epoch/epoch_position attributes are the whole RNG state of a run.
  h5::Group rng = h5::create_group(f, "/rng", kCode);
  h5::write_attr(rng.get(), "seed", m.seed, kCode);
  h5::write_attr_fixed(rng.get(), "algorithm", "splitmix64", kCode);
}

void fsync_path(const std::string& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw Error(kCode, "cannot open " + p + " to fsync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); the rename is then
  // as durable as that file system makes it.
  if (rc != 0 && !(directory && err == EINVAL)) throw Error(kCode, "fsync of " + p + " failed: " + std::strerror(err));
}

// "dense" for dense0, dense1, ...: the kind of a layer (docs/design.md section 4 names).
std::string kind_of(const std::string& layer) {
  return layer.substr(0, layer.find_last_not_of("0123456789") + 1);
}

// Layers of each kind in a layout, kinds in order of first appearance.
std::vector<std::pair<std::string, int>> kind_counts(const std::vector<ParamInfo>& layout) {
  std::vector<std::pair<std::string, int>> counts;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    if (i > 0 && layout[i].layer == layout[i - 1].layer) continue;
    const std::string kind = kind_of(layout[i].layer);
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& c) { return c.first == kind; });
    if (it == counts.end())
      counts.emplace_back(kind, 1);
    else
      ++it->second;
  }
  return counts;
}

int count_of(const std::vector<std::pair<std::string, int>>& counts, const std::string& kind) {
  for (const auto& c : counts)
    if (c.first == kind) return c.second;
  return 0;
}

// have (the checkpoint's) must be need (the model's), tensor by tensor; the
// message names the first difference. `layers` words the count message.
void check_same_tensors(const std::vector<ParamInfo>& have, const std::vector<ParamInfo>& need,
                        const std::string& layers, const std::string& path) {
  for (std::size_t i = 0; i < std::min(have.size(), need.size()); ++i) {
    const std::string where = "/model/" + have[i].path();
    if (have[i].path() != need[i].path())
      fail(path, where + ": the checkpoint holds it where the model has /model/" + need[i].path());
    if (have[i].shape != need[i].shape)
      fail(path, where + ": checkpoint has shape " + dims_string(have[i].shape) +
                     ", the model needs " + dims_string(need[i].shape));
  }
  if (have.size() == need.size()) return;
  const auto a = kind_counts(have), b = kind_counts(need);
  auto kinds = b;
  kinds.insert(kinds.end(), a.begin(), a.end());
  for (const auto& k : kinds)
    if (count_of(a, k.first) != count_of(b, k.first))
      fail(path, "checkpoint has " + std::to_string(count_of(a, k.first)) + " " + k.first +
                     " layers" + layers + ", the model has " +
                     std::to_string(count_of(b, k.first)));
  fail(path, "checkpoint has " + std::to_string(have.size()) + " tensors" + layers +
                 ", the model has " + std::to_string(need.size()));
}

}  // namespace

void write_checkpoint(const std::string& path, const CheckpointData& data) {
  check_data(data, path);
  const std::string tmp = path + ".tmp";
  try {
    {
      h5::File f = h5::create_file_checksummed(tmp, kCode);
      write_contents(f.get(), data);
      h5::flush(f.get(), kCode);
      h5::check_status(H5Fclose(f.release()), kCode, tmp + ": close failed");
    }
    fsync_path(tmp, false);
    test_hooks::slow_checkpoint_pause();  // DPTRAIN_TEST_SLOW_CHECKPOINT_MS
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(kCode, "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
    std::string dir = std::filesystem::path(path).parent_path().string();
    fsync_path(dir.empty() ? "." : dir, true);
  } catch (const Error& e) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    fail(path, "cannot write checkpoint: " + strip_prefix(e.what(), tmp));
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

void check_layout(const CheckpointData& data, const std::vector<ParamInfo>& params,
                  const std::vector<ParamInfo>& buffers, const std::string& path) {
  check_same_tensors(data.param_layout, params, "", path);
  check_same_tensors(data.buffer_layout, buffers, " with buffers", path);
}

}  // namespace dptrain
