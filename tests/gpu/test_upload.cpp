// Implements: the input upload path — pinned staging from allocate_host,
// copies on the copy stream ordered by the slot events (release_slot before,
// wait_upload after, sync_upload before the host rewrites its side), and
// ShardBuffers driven the way InputPipeline drives them. Each check holds on
// the CPU backend too, where the same calls are a memcpy and no-ops.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "dptrain/backends/backend_buffer.hpp"
#include "dptrain/backends/kernels/dense_kernels.hpp"
#include "dptrain/data/shard_transfer.hpp"
#include "dptrain/telemetry/metrics.hpp"
#include "gpu_env.hpp"

namespace {

using dptrain::Backend;
using dptrain::DeviceBuffer;
using dptrain::HostBuffer;
using gpu_test::download;
using gpu_test::random_vector;

class CudaUpload : public gpu_test::CpuAndGpu {};

TEST_F(CudaUpload, AsyncUploadThenKernelSeesTheData) {
  for (std::size_t n : {std::size_t(1), std::size_t(257), std::size_t(1) << 20,
                        std::size_t(1) << 24}) {
    const auto x = random_vector(n, 7);
    HostBuffer<float> h(*gpu_, n);
    std::memcpy(h.get(), x.data(), n * sizeof(float));
    DeviceBuffer<float> d(*gpu_, n);
    // Allocated before the upload: an allocation may synchronize the device,
    // which would hide a missing wait below.
    DeviceBuffer<float> out(*gpu_, n);
    gpu_->release_slot(1);  // after the zero-fill of d and out
    gpu_->upload_async(1, d.get(), h.get(), n * sizeof(float));
    gpu_->wait_upload(1);
    // A kernel on the compute stream reads the upload: out = 0 + d.
    gpu_->kernels<dptrain::DenseKernels>().add_bias(out.get(), d.get(), 1, static_cast<int>(n));
    EXPECT_EQ(download(*gpu_, out), x) << n;
    gpu_->sync_upload(1);
  }
}

TEST_F(CudaUpload, BadSlotIsAnError) {
  EXPECT_THROW(gpu_->release_slot(Backend::kUploadSlots), dptrain::Error);
  EXPECT_THROW(gpu_->wait_upload(-1), dptrain::Error);
}

// Two slots in turn, each round rewriting its host buffer, uploading it and
// reading the device copy twice: once right after wait_upload and once
// after 100 ms of queued device work, so the device lags far behind the
// host and every missing call changes the sum:
//  - no wait_upload: the first reads run while the 16 MiB copy is landing;
//  - no release_slot: nothing holds the copies back, so the host (which
//    then never waits) uploads later rounds under reads still queued;
//  - no sync_upload: the host rewrites a buffer whose copy still waits
//    behind the queued work, and that copy takes the later round's data.
TEST_F(CudaUpload, TwoSlotsAlternatingLoseNothing) {
  constexpr int kRounds = 8, kReads = 2, kCols = 1 << 22;
  constexpr std::size_t n = kCols;
  constexpr double kLagMs = 100.0;
  auto value = [](int round, std::size_t j) { return static_cast<float>((round * 7 + j) % 13); };
  for (Backend* be : {gpu_.get(), cpu_.get()}) {
    gpu_test::DeviceBusy busy(*be);
    HostBuffer<float> h[2] = {HostBuffer<float>(*be, n), HostBuffer<float>(*be, n)};
    DeviceBuffer<float> d[2] = {DeviceBuffer<float>(*be, n), DeviceBuffer<float>(*be, n)};
    DeviceBuffer<float> acc(*be, n);
    auto read = [&](int s) {
      for (int k = 0; k < kReads; ++k)
        be->kernels<dptrain::DenseKernels>().add_bias(acc.get(), d[s].get(), 1, kCols);
    };
    for (int i = 0; i < kRounds; ++i) {
      const int s = i % 2;
      be->sync_upload(s);
      for (std::size_t j = 0; j < n; ++j) h[s].get()[j] = value(i, j);
      be->release_slot(s);
      be->upload_async(s, d[s].get(), h[s].get(), n * sizeof(float));
      be->wait_upload(s);
      read(s);
      busy.queue(kLagMs);
      read(s);
    }
    std::vector<float> want(n, 0.0f);  // small integers: exact in any order
    for (int i = 0; i < kRounds; ++i)
      for (std::size_t j = 0; j < n; ++j) want[j] += 2 * kReads * value(i, j);
    EXPECT_EQ(download(*be, acc), want) << be->name();
  }
}

// A long chain of GEMMs writes d; the upload into d, released after them,
// must land after them: d ends as the uploaded data, not the GEMM result.
// (On the host emulation, whose streams run only when the host waits, the
// chain is small: it lags the host without being long.)
TEST_F(CudaUpload, ReleaseOrdersTheCopyAfterEarlierKernels) {
#if defined(DPTRAIN_EMULATED_DEVICE)
  constexpr int kM = 64, kK = 256, kGemms = 2;
#else
  constexpr int kM = 2048, kK = 8192, kGemms = 16;
#endif
  DeviceBuffer<float> a(*gpu_, std::size_t(kM) * kK), b(*gpu_, std::size_t(kK) * kM);
  DeviceBuffer<float> d(*gpu_, std::size_t(kM) * kM);
  gpu_->fill(a.get(), 1.0f, a.size());
  gpu_->fill(b.get(), 1.0f, b.size());
  const auto x = random_vector(d.size(), 11);
  HostBuffer<float> h(*gpu_, d.size());
  std::memcpy(h.get(), x.data(), d.size() * sizeof(float));
  gpu_->synchronize();  // the GEMMs alone are in flight below

  for (int g = 0; g < kGemms; ++g)  // d = kK everywhere, many ms of work
    gpu_->gemm(false, false, kM, kM, kK, 1.0f, a.get(), kK, b.get(), kM, 0.0f, d.get(), kM);
  gpu_->release_slot(0);
  gpu_->upload_async(0, d.get(), h.get(), d.size() * sizeof(float));
  gpu_->wait_upload(0);
  EXPECT_EQ(download(*gpu_, d), x);

  // The order also holds the other way: a GEMM queued after wait_upload
  // overwrites the upload.
  gpu_->gemm(false, false, kM, kM, kK, 1.0f, a.get(), kK, b.get(), kM, 0.0f, d.get(), kM);
  EXPECT_EQ(download(*gpu_, d), std::vector<float>(d.size(), static_cast<float>(kK)));
}

// ShardBuffers in InputPipeline's order: the next buffer is released and
// refilled right after the current one is handed out, and its upload is
// started in the middle of the current step; every step copies its shard
// aside on the compute stream, and all of them must arrive intact.
TEST_F(CudaUpload, ShardBuffersInPipelineOrderDeliverEveryShard) {
  constexpr int kSteps = 60, kMaxRows = 64, kDim = 33, kWork = 256;
  auto feature = [](int step, int r, int c) {
    return static_cast<float>(step * 4096 + r * kDim + c);
  };
  auto rows_of = [](int step) { return step % 7 == 3 ? 0 : 1 + (step * 13) % kMaxRows; };
  auto fill = [&](dptrain::ShardBuffers& buf, int step) {
    dptrain::Shard& h = buf.host();
    h.rows = rows_of(step);
    for (int r = 0; r < h.rows; ++r) {
      for (int c = 0; c < kDim; ++c) h.features[r * kDim + c] = feature(step, r, c);
      h.labels[r] = step * kMaxRows + r;
    }
  };
  const std::size_t per_step = std::size_t(kMaxRows) * kDim;
  for (Backend* be : {gpu_.get(), cpu_.get()}) {
    dptrain::ShardBuffers bufs[2] = {
        dptrain::ShardBuffers(*be, kMaxRows, kDim, 1, dptrain::LabelType::kClass, 0),
        dptrain::ShardBuffers(*be, kMaxRows, kDim, 1, dptrain::LabelType::kClass, 1)};
    DeviceBuffer<float> seen_x(*be, per_step * kSteps);
    DeviceBuffer<std::int32_t> seen_y(*be, std::size_t(kMaxRows) * kSteps);
    DeviceBuffer<float> w(*be, std::size_t(kWork) * kWork), out(*be, std::size_t(kWork) * kWork);
    be->fill(w.get(), 0.5f, w.size());
    gpu_test::DeviceBusy busy(*be);
    auto work = [&] {  // compute the uploads should hide under; the device lags the host
      for (int k = 0; k < 4; ++k)
        be->gemm(false, false, kWork, kWork, kWork, 1.0f, w.get(), kWork, w.get(), kWork, 0.0f,
                 out.get(), kWork);
      busy.queue(2.0);
    };

    bufs[0].release();
    fill(bufs[0], 0);
    for (int step = 0; step < kSteps; ++step) {
      dptrain::ShardBuffers& cur = bufs[step % 2];
      dptrain::ShardBuffers& next = bufs[(step + 1) % 2];
      const dptrain::Shard& d = cur.to_device();
      ASSERT_EQ(d.rows, rows_of(step));
      if (step + 1 < kSteps) {
        next.release();
        fill(next, step + 1);
      }
      work();
      if (step + 1 < kSteps) next.upload();  // between layers
      const std::size_t r = static_cast<std::size_t>(d.rows);
      be->copy_device(seen_x.get() + step * per_step, d.features, r * kDim * sizeof(float));
      be->copy_device(seen_y.get() + std::size_t(step) * kMaxRows, d.labels,
                      r * sizeof(std::int32_t));
      work();
    }

    const std::vector<float> got_x = download(*be, seen_x);
    const std::vector<std::int32_t> got_y = download(*be, seen_y);
    int bad = 0;
    for (int step = 0; step < kSteps; ++step)
      for (int r = 0; r < rows_of(step); ++r) {
        bad += got_y[std::size_t(step) * kMaxRows + r] != step * kMaxRows + r;
        for (int c = 0; c < kDim; ++c)
          bad += got_x[step * per_step + std::size_t(r) * kDim + c] != feature(step, r, c);
      }
    EXPECT_EQ(bad, 0) << be->name();
  }
}

}  // namespace

// Device phase timing: markers around queued work measure it on the device
// (the host returns at once), and PhaseTimer reports that device time.
class CudaMarkers : public gpu_test::CpuAndGpu {};

TEST_F(CudaMarkers, MarkersTimeQueuedWorkAndPhaseTimerUsesThem) {
  dptrain::Backend& be = *gpu_;
#if defined(DPTRAIN_EMULATED_DEVICE)
  const int n = 128;  // milliseconds on the host emulation too
#else
  const int n = 2048;
#endif
  DeviceBuffer<float> a(be, std::size_t(n) * n), c(be, std::size_t(n) * n);
  be.synchronize();
  dptrain::PhaseTimer timer;
  timer.attach_device(&be);
  timer.start();
  timer.lap(dptrain::Phase::kData);
  for (int i = 0; i < 8; ++i)  // ~0.14 TFLOP: milliseconds on any GPU
    be.gemm(false, false, n, n, n, 1.0f, a.get(), n, a.get(), n, 0.0f, c.get(), n);
  timer.lap(dptrain::Phase::kForward);
  const double host_ms = timer.ms(dptrain::Phase::kForward);
  be.synchronize();
  timer.end_step();
  const double device_ms = timer.ms(dptrain::Phase::kForward);
  EXPECT_GT(device_ms, 0.0);
  EXPECT_NE(device_ms, host_ms);
  EXPECT_GE(be.marker_ms(1, 2), 0.0);
  EXPECT_LT(cpu_->marker_ms(0, 1), 0.0) << "the CPU backend has no device clock";
}
