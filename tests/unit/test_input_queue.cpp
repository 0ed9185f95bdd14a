// Implements: unit tests of SampleOrder (every mode a per-epoch permutation,
// a pure function of seed and epoch, resumable mid-epoch), BatchPlan, and
// InputQueue (cached and streaming delivery, prompt stop, error hand-off).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <set>

#include "dptrain/common/h5.hpp"
#include "dptrain/data/batch_plan.hpp"
#include "dptrain/data/input_queue.hpp"
#include "dptrain/data/sample_order.hpp"
#include "h5_fixtures.hpp"
#include "test_paths.hpp"

namespace dptrain {
namespace {

using testing::FixtureSpec;

std::vector<std::uint64_t> epoch_order(std::uint64_t n, const ShuffleConfig& cfg, std::uint64_t epoch) {
  SampleOrder o(n, cfg);
  std::vector<std::uint64_t> out;
  o.indices(epoch, 0, n, out);
  return out;
}

bool is_permutation_of_n(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  for (std::uint64_t i = 0; i < v.size(); ++i)
    if (v[i] != i) return false;
  return true;
}

ShuffleConfig config(ShuffleMode mode, std::uint64_t seed, std::uint64_t block_rows = 8,
                     std::uint64_t window_blocks = 3) {
  ShuffleConfig c;
  c.mode = mode;
  c.seed = seed;
  c.block_rows = block_rows;
  c.window_blocks = window_blocks;
  return c;
}

TEST(SampleOrderTest, NoneIsFileOrder) {
  auto v = epoch_order(37, config(ShuffleMode::kNone, 5), 3);
  std::vector<std::uint64_t> id(37);
  std::iota(id.begin(), id.end(), 0);
  EXPECT_EQ(v, id);
}

TEST(SampleOrderTest, EveryModeIsAPermutationFixedBySeedAndEpoch) {
  for (ShuffleMode mode : {ShuffleMode::kFull, ShuffleMode::kBlock}) {
    // n: divisible by the block, not, smaller than a block, one window only.
    for (std::uint64_t n : {96u, 101u, 5u, 20u, 1000u}) {
      SCOPED_TRACE(std::to_string(int(mode)) + " n=" + std::to_string(n));
      const auto a = epoch_order(n, config(mode, 1), 0);
      EXPECT_TRUE(is_permutation_of_n(a));
      EXPECT_EQ(a, epoch_order(n, config(mode, 1), 0));
      EXPECT_TRUE(is_permutation_of_n(epoch_order(n, config(mode, 1), 7)));
      if (n >= 20) {
        EXPECT_NE(a, epoch_order(n, config(mode, 2), 0));
        EXPECT_NE(a, epoch_order(n, config(mode, 1), 1));
        std::vector<std::uint64_t> id(n);
        std::iota(id.begin(), id.end(), 0);
        EXPECT_NE(a, id);
      }
    }
  }
}

TEST(SampleOrderTest, BlockModeStaysWithinAWindowOfBlocks) {
  // A run of window-size positions spans at most three windows (two, plus
  // the one short window holding the last block), which bounds the blocks
  // the streaming reader keeps.
  const std::uint64_t n = 1001, br = 8, w = 4;
  for (std::uint64_t epoch = 0; epoch < 4; ++epoch) {
    const auto v = epoch_order(n, config(ShuffleMode::kBlock, 9, br, w), epoch);
    for (std::uint64_t p = 0; p + br * w <= n; p += 7) {
      std::set<std::uint64_t> blocks;
      for (std::uint64_t i = p; i < p + br * w; ++i) blocks.insert(v[i] / br);
      ASSERT_LE(blocks.size(), 3 * w) << "epoch " << epoch << " position " << p;
    }
  }
}

TEST(SampleOrderTest, MidEpochPositionsMatchTheFullEpoch) {
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kFull, ShuffleMode::kBlock}) {
    const std::uint64_t n = 203;
    const auto cfg = config(mode, 11, 8, 3);
    const auto full = epoch_order(n, cfg, 2);
    SampleOrder shared(n, cfg);
    std::vector<std::uint64_t> out;
    shared.indices(5, 17, 40, out);  // another epoch first: caches must switch
    for (std::uint64_t pos : {0u, 1u, 23u, 24u, 100u, 190u, 202u}) {
      SampleOrder fresh(n, cfg);
      fresh.indices(2, pos, n - pos, out);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), full.begin() + pos)) << int(mode) << " " << pos;
      shared.indices(2, pos, std::min<std::uint64_t>(9, n - pos), out);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), full.begin() + pos)) << int(mode) << " " << pos;
    }
    EXPECT_THROW(shared.indices(0, 200, 4, out), Error);
  }
}

TEST(BatchPlanTest, SlotsCoverEachEpochWithAShortLastBatch) {
  BatchPlan p(103, 10);
  EXPECT_EQ(p.steps_per_epoch(), 11u);
  BatchSlot s = p.slot(10);
  EXPECT_EQ(s.epoch, 0u);
  EXPECT_EQ(s.position, 100u);
  EXPECT_EQ(s.rows, 3u);
  s = p.slot(23);
  EXPECT_EQ(s.step, 23u);
  EXPECT_EQ(s.epoch, 2u);
  EXPECT_EQ(s.position, 10u);
  EXPECT_EQ(s.rows, 10u);
  EXPECT_EQ(BatchPlan(5, 64).slot(3).rows, 5u);
  EXPECT_THROW(BatchPlan(5, 0), Error);
}

struct QueueCase {
  ShuffleMode mode;
  bool uint8;
  bool cached;
  std::uint64_t targets;
};

// Checks every batch of [first, end) against the file rows at SampleOrder's
// indices, recycling buffers as the trainer does.
void check_queue(const std::string& file, const FixtureSpec& spec, const QueueCase& c) {
  Dataset data(file, spec.set);
  InputQueueConfig qc;
  qc.batch_size = 10;
  qc.shuffle = config(c.mode, 3, 8, 3);
  const BatchPlan plan(spec.rows, qc.batch_size);
  qc.first_step = 3;
  qc.end_step = 3 * plan.steps_per_epoch() + 2;  // crosses epochs, includes short batches
  qc.capacity = 3;
  qc.cache_bytes = c.cached ? (std::size_t(1) << 30) : 100;
  InputQueue q(data, qc);
  EXPECT_EQ(q.cached(), c.cached);
  SampleOrder order(spec.rows, qc.shuffle);
  std::vector<std::uint64_t> idx;
  std::uint64_t step = qc.first_step;
  while (auto b = q.pop()) {
    const BatchSlot want = plan.slot(step);
    ASSERT_EQ(b->slot.step, step);
    ASSERT_EQ(b->slot.epoch, want.epoch);
    ASSERT_EQ(b->slot.position, want.position);
    ASSERT_EQ(b->slot.rows, want.rows);
    order.indices(want.epoch, want.position, want.rows, idx);
    const std::uint64_t d = testing::fixture_dim(spec);
    ASSERT_EQ(b->features.size(), want.rows * d);
    for (std::uint64_t i = 0; i < want.rows; ++i) {
      const auto row = testing::fixture_row(spec, idx[i]);
      ASSERT_TRUE(std::equal(row.begin(), row.end(), b->features.begin() + i * d))
          << "step " << step << " row " << i << " index " << idx[i];
      if (c.targets) {
        for (std::uint64_t k = 0; k < c.targets; ++k)
          ASSERT_EQ(b->targets[i * c.targets + k], testing::fixture_target(idx[i], k));
      } else {
        ASSERT_EQ(b->labels[i], testing::fixture_label(idx[i], spec.classes));
      }
    }
    q.recycle(std::move(*b));
    ++step;
  }
  EXPECT_EQ(step, qc.end_step);
}

TEST(InputQueueTest, DeliversThePlannedBatchesInEveryMode) {
  const std::string dir = testing::scratch_dir("queue");
  int k = 0;
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kFull, ShuffleMode::kBlock})
    for (bool uint8 : {false, true})
      for (bool cached : {true, false})
        for (std::uint64_t targets : {0u, 2u}) {
          SCOPED_TRACE("mode " + std::to_string(int(mode)) + " uint8 " + std::to_string(uint8) +
                       " cached " + std::to_string(cached) + " targets " + std::to_string(targets));
          FixtureSpec spec;
          spec.rows = 103;
          spec.shape = {2, 3};
          spec.uint8 = uint8;
          spec.targets = targets;
          spec.chunk_rows = 16;
          const std::string file = dir + "/q" + std::to_string(k++) + ".h5";
          testing::write_fixture(file, spec);
          check_queue(file, spec, {mode, uint8, cached, targets});
        }
}

// A reader for a group of ranks (--input-readers node/all) holds exactly the
// rows of their shards of every global batch, in member order: the same
// bytes as one reader for everyone, whatever the mode, cached or streamed.
TEST(InputQueueTest, AGroupReaderHoldsItsRanksShardsOfTheSameBatches) {
  const std::string file = testing::scratch_dir("queue") + "/group.h5";
  testing::write_fixture(file, {.rows = 103, .shape = {5}, .chunk_rows = 8});
  const std::vector<std::vector<int>> groups = {{0, 1}, {2, 3}, {1}, {3}, {0, 1, 2, 3}};
  // One Dataset per queue: a queue's thread owns its Dataset.
  std::vector<std::unique_ptr<Dataset>> files;
  for (ShuffleMode mode : {ShuffleMode::kNone, ShuffleMode::kFull, ShuffleMode::kBlock})
    for (bool cached : {true, false}) {
      SCOPED_TRACE("mode " + std::to_string(int(mode)) + " cached " + std::to_string(cached));
      auto make = [&](std::vector<int> members) {
        files.push_back(std::make_unique<Dataset>(file, "train"));
        InputQueueConfig qc;
        qc.batch_size = 10;  // 103 rows: a short last batch of 3 (rank 3 gets none)
        qc.shuffle = config(mode, 7);
        qc.end_step = 22;   // two epochs and a bit
        qc.cache_bytes = cached ? (std::size_t(1) << 30) : 0;
        if (!members.empty()) qc.group = {4, std::move(members)};
        return std::make_unique<InputQueue>(*files.back(), qc);
      };
      auto whole = make({});
      std::vector<std::unique_ptr<InputQueue>> parts;
      for (const auto& g : groups) parts.push_back(make(g));
      std::vector<RowRange> ranges;
      for (std::uint64_t step = 0; step < 22; ++step) {
        const Batch all = *whole->pop();
        for (std::size_t k = 0; k < groups.size(); ++k) {
          const Batch part = *parts[k]->pop();
          group_rows(all.slot.rows, {4, groups[k]}, ranges);
          std::vector<float> want;
          std::vector<std::int32_t> want_labels;
          for (const RowRange& r : ranges) {
            want.insert(want.end(), all.features.begin() + r.first * 5,
                        all.features.begin() + (r.first + r.count) * 5);
            want_labels.insert(want_labels.end(), all.labels.begin() + r.first,
                               all.labels.begin() + r.first + r.count);
          }
          ASSERT_EQ(part.slot.step, step);
          ASSERT_EQ(part.rows, want_labels.size()) << "group " << k << " step " << step;
          EXPECT_EQ(part.features, want) << "group " << k << " step " << step;
          EXPECT_EQ(part.labels, want_labels) << "group " << k << " step " << step;
        }
      }
    }
}

TEST(InputQueueTest, DestructorReturnsPromptlyWhenTheConsumerStops) {
  const std::string file = testing::scratch_dir("queue") + "/stop.h5";
  testing::write_fixture(file, {.rows = 500, .chunk_rows = 64});
  Dataset data(file, "train");
  for (bool cached : {true, false}) {
    for (int popped : {0, 1}) {
      InputQueueConfig qc;
      qc.batch_size = 7;
      qc.end_step = 1'000'000'000;
      qc.capacity = 2;
      qc.cache_bytes = cached ? (std::size_t(1) << 30) : 0;
      const auto t0 = std::chrono::steady_clock::now();
      {
        InputQueue q(data, qc);
        for (int i = 0; i < popped; ++i) ASSERT_TRUE(q.pop().has_value());
      }
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    }
  }
}

// Flips bytes inside the third feature chunk so its Fletcher32 check fails.
void corrupt_chunk(const std::string& file, hsize_t chunk_index) {
  haddr_t addr = 0;
  hsize_t size = 0;
  {
    h5::File f = h5::open_read(file, ExitCode::kOther);
    h5::DataSet d = h5::open_dataset(f.get(), "/train/features", ExitCode::kOther);
    h5::DataSpace space(H5Dget_space(d.get()));
    std::vector<hsize_t> offset(3);
    unsigned mask = 0;
    ASSERT_GE(H5Dget_chunk_info(d.get(), space.get(), chunk_index, offset.data(), &mask, &addr, &size), 0);
  }
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(addr + 4));
  const char junk[4] = {'\x13', '\x37', '\x42', '\x7f'};
  io.write(junk, 4);
}

TEST(InputQueueTest, ReaderErrorsAreRethrownByPop) {
  const std::string dir = testing::scratch_dir("queue");
  for (bool cached : {true, false}) {
    const std::string file = dir + (cached ? "/bad_cached.h5" : "/bad_stream.h5");
    testing::write_fixture(file, {.rows = 100, .chunk_rows = 10, .fletcher32 = true});
    corrupt_chunk(file, 2);  // rows [20, 30)
    Dataset data(file, "train");
    InputQueueConfig qc;
    qc.batch_size = 10;
    qc.shuffle.mode = ShuffleMode::kNone;
    qc.end_step = 10;
    qc.cache_bytes = cached ? (std::size_t(1) << 30) : 0;
    InputQueue q(data, qc);
    if (!cached) {  // batches before the bad chunk still arrive, in order
      ASSERT_EQ(q.pop()->slot.step, 0u);
      ASSERT_EQ(q.pop()->slot.step, 1u);
    }
    try {
      q.pop();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kData);
      EXPECT_NE(std::string(e.what()).find("/train/features"), std::string::npos) << e.what();
    }
    EXPECT_THROW(q.pop(), Error);  // and stays failed
  }
}

}  // namespace
}  // namespace dptrain
