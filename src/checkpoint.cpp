// Implements: write_checkpoint and check_layout (checkpoint.hpp): the
// DESIGN.md section 4 file, written atomically (NAME.tmp, fsync, rename,
// fsync of the directory) in a format whose data chunks and metadata are all
// checksummed. Reading lives in checkpoint_read.cpp.
#include "dptrain/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "checkpoint_format.hpp"

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

// Writes one arena (params or an optimizer state) as <base>/dense<i>/{weight,bias}.
void write_arena(hid_t file, const std::string& base, const std::vector<DenseInfo>& layout,
                 const std::vector<float>& arena) {
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const DenseInfo& d = layout[i];
    const std::string g = base + "/" + layer_group(i);
    const hsize_t out = static_cast<hsize_t>(d.out), in = static_cast<hsize_t>(d.in);
    h5::write_array(file, g + "/weight", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {out, in},
                    arena.data() + d.weight_offset, kCode, chunked(in));
    h5::write_array(file, g + "/bias", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {out},
                    arena.data() + d.bias_offset, kCode, chunked(1));
  }
}

// Refuses data whose arrays do not match its own layout: writing it would
// produce a file that our reader rejects.
void check_data(const CheckpointData& data, const std::string& path) {
  if (data.layout.empty()) fail(path, "cannot write checkpoint: the model has no dense layers");
  std::size_t n = 0;
  for (std::size_t i = 0; i < data.layout.size(); ++i) {
    const DenseInfo& d = data.layout[i];
    if (d.in <= 0 || d.out <= 0 || d.weight_offset != n ||
        d.bias_offset != n + std::size_t(d.in) * d.out)
      fail(path, "cannot write checkpoint: dense" + std::to_string(i) +
                     " has a bad shape or arena offset");
    n = d.bias_offset + d.out;
  }
  if (data.params.size() != n)
    fail(path, "cannot write checkpoint: " + std::to_string(data.params.size()) +
                   " parameters for a layout of " + std::to_string(n));
  for (const auto& s : data.optimizer_state)
    if (s.values.size() != n || s.name.empty() || s.name.find_first_of("/,.") != std::string::npos)
      fail(path, "cannot write checkpoint: optimizer state '" + s.name + "' is misshaped");
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
  write_arena(f, "/model", data.layout, data.params);

  h5::Group opt = h5::create_group(f, "/optimizer", kCode);
  std::string names;
  for (const auto& s : data.optimizer_state) {
    names += (names.empty() ? "" : ",") + s.name;
    write_arena(f, "/optimizer/" + s.name, data.layout, s.values);
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

// Test hook: DPTRAIN_TEST_SLOW_CHECKPOINT_MS=N sleeps N ms between the fsync
// of NAME.tmp and the rename, so a crash test can SIGKILL a process while a
// checkpoint is half done and check that NAME never appears partially.
void test_delay() {
  const char* v = std::getenv("DPTRAIN_TEST_SLOW_CHECKPOINT_MS");
  const long ms = v ? std::strtol(v, nullptr, 10) : 0;
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
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
    test_delay();
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

void check_layout(const CheckpointData& data, const std::vector<DenseInfo>& layout,
                  const std::string& path) {
  const auto& have = data.layout;
  for (std::size_t i = 0; i < std::min(have.size(), layout.size()); ++i) {
    if (have[i].in != layout[i].in || have[i].out != layout[i].out)
      fail(path, "/model/" + layer_group(i) + ": checkpoint weight is [" +
                     std::to_string(have[i].out) + ", " + std::to_string(have[i].in) +
                     "], the model needs [" + std::to_string(layout[i].out) + ", " +
                     std::to_string(layout[i].in) + "]");
  }
  if (have.size() != layout.size())
    fail(path, "checkpoint has " + std::to_string(have.size()) + " dense layers, the model has " +
                   std::to_string(layout.size()));
}

}  // namespace dptrain
