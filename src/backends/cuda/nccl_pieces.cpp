// Implements: NcclPieces (nccl_pieces.hpp), the two paths of a collective
// over pieces. NCCL's own collectives want P equal pieces, so near-equal
// ones (all non-empty) are padded to P of the largest one's size in a
// staging buffer and moved by one in-place ncclReduceScatter or
// ncclAllGather per window (the flat paths); any other cut is one rooted
// ncclReduce or ncclBroadcast per non-empty piece, all in one group.
#include "backends/cuda/nccl_pieces.hpp"

#include <algorithm>

#include "backends/cuda/error_cuda.hpp"
#include "dptrain/common/test_hooks.hpp"

namespace dptrain {
namespace {

std::size_t largest_piece(const std::size_t* bounds, int parts) {
  std::size_t m = 0;
  for (int r = 0; r < parts; ++r) m = std::max(m, bounds[r + 1] - bounds[r]);
  return m;
}

// Whether a reduce-scatter or all-gather over these pieces should be one
// ncclReduceScatter / ncclAllGather rather than one rooted ncclReduce /
// ncclBroadcast per non-empty piece. NCCL's own collectives want P equal
// pieces, so the call is padded to P pieces of the largest one's size m and
// staged through a buffer (a device copy of each piece in and out). That
// pays when every rank has a piece and the padding adds at most 12.5% to
// the n values moved: one collective then does the work of P, each of
// which pays its own setup and latency. When a piece is empty or the pieces
// are far from equal (the data lies mostly in one or two ranks' pieces),
// the rooted calls move no more bytes than the padded collective and need
// no staging.
bool equal_pieces_pay(const std::size_t* bounds, int parts) {
  if (parts <= 1) return false;
  for (int r = 0; r < parts; ++r)
    if (bounds[r + 1] == bounds[r]) return false;
  const std::size_t n = bounds[parts];
  return static_cast<std::size_t>(parts) * largest_piece(bounds, parts) <= n + n / 8;
}
// The flat paths run over windows of the pieces: window k is values
// [k*w, (k+1)*w) of every piece, piece r of it in slot r of the staging
// buffer (w values each, the slot's tail unused where the piece is
// shorter), one in-place collective per window. w is the largest piece
// while the P slots fit in kStagingFloats, else less, so the staging
// buffer stays at most 64 MiB whatever the call (a --shard-optimizer
// all-gather spans the whole arena).
constexpr std::size_t kStagingFloats = std::size_t(16) << 20;

// How many of piece r's values fall in the window of `count` from `at`.
std::size_t in_window(const std::size_t* bounds, int r, std::size_t at, std::size_t count) {
  const std::size_t len = bounds[r + 1] - bounds[r];
  return len > at ? std::min(count, len - at) : 0;
}

}  // namespace

// A call that fails leaves its error in the group, so ncclGroupEnd launches
// nothing; the group is closed all the same.
template <typename Piece>
void NcclPieces::grouped(const std::size_t* bounds, Piece piece) {
  DPT_NCCL_CHECK(ncclGroupStart());
  try {
    for (int r = 0; r < size_; ++r)
      if (bounds[r + 1] > bounds[r]) piece(bounds[r], bounds[r + 1] - bounds[r], r);
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  DPT_NCCL_CHECK(ncclGroupEnd());
}

void NcclPieces::reduce_scatter(float* buf, const std::size_t* bounds, ncclComm_t c) {
  if (equal_pieces_pay(bounds, size_)) {
    flat_reduce_scatter(buf, bounds, c);
    return;
  }
  grouped(bounds, [&](std::size_t at, std::size_t n, int root) {
    DPT_NCCL_CHECK(ncclReduce(buf + at, buf + at, n, ncclFloat, ncclSum, root, c, stream_));
  });
}

void NcclPieces::allgather(float* buf, const std::size_t* bounds, ncclComm_t c) {
  if (equal_pieces_pay(bounds, size_)) {
    flat_allgather(buf, bounds, c);
    return;
  }
  grouped(bounds, [&](std::size_t at, std::size_t n, int root) {
    DPT_NCCL_CHECK(
        ncclBroadcast(buf + at, buf + at, n * sizeof(float), ncclChar, root, c, stream_));
  });
}

std::size_t NcclPieces::window(std::size_t m) const {
  const std::size_t most = test_hooks::nccl_staging_floats(kStagingFloats);
  return std::min(m, std::max<std::size_t>(1, most / static_cast<std::size_t>(size_)));
}

// Each window: the pieces packed into their slots, one in-place
// ncclReduceScatter leaves the sum of slot `rank` there, and it is copied
// back into the own piece. Slot tails are summed too, unused.
void NcclPieces::flat_reduce_scatter(float* buf, const std::size_t* bounds, ncclComm_t c) {
  const std::size_t m = largest_piece(bounds, size_), w = window(m);
  float* staging = staging_for(w * static_cast<std::size_t>(size_));
  for (std::size_t at = 0; at < m; at += w) {
    const std::size_t count = std::min(w, m - at);
    for (int r = 0; r < size_; ++r)
      copy_on_stream(staging + r * count, buf + bounds[r] + at, in_window(bounds, r, at, count));
    float* own = staging + static_cast<std::size_t>(rank_) * count;
    DPT_NCCL_CHECK(ncclReduceScatter(staging, own, count, ncclFloat, ncclSum, c, stream_));
    copy_on_stream(buf + bounds[rank_] + at, own, in_window(bounds, rank_, at, count));
  }
}

// Each window: the own piece's values copied into slot `rank`, one
// in-place ncclAllGather fills every slot, and the other ranks' values are
// copied out.
void NcclPieces::flat_allgather(float* buf, const std::size_t* bounds, ncclComm_t c) {
  const std::size_t m = largest_piece(bounds, size_), w = window(m);
  float* staging = staging_for(w * static_cast<std::size_t>(size_));
  for (std::size_t at = 0; at < m; at += w) {
    const std::size_t count = std::min(w, m - at);
    float* own = staging + static_cast<std::size_t>(rank_) * count;
    copy_on_stream(own, buf + bounds[rank_] + at, in_window(bounds, rank_, at, count));
    DPT_NCCL_CHECK(ncclAllGather(own, staging, count, ncclFloat, c, stream_));
    for (int r = 0; r < size_; ++r)
      if (r != rank_)
        copy_on_stream(buf + bounds[r] + at, staging + r * count, in_window(bounds, r, at, count));
  }
}

// The staging buffer of the flat paths, at least `floats` long. It grows
// only when a call needs more than it has, so every size is reached in the
// first step (later steps repeat its calls) and a warmed-up step allocates
// nothing. A new buffer is zeroed on the communication stream, before any
// use, so its padding never holds garbage (summed there it would reach no
// piece, but it is a read of memory never written, which
// compute-sanitizer's initcheck reports).
float* NcclPieces::staging_for(std::size_t floats) {
  const std::size_t bytes = floats * sizeof(float);
  if (staging_.bytes() < bytes) {
    // Work queued on the communication stream may still use the old
    // buffer; let it finish before the buffer is freed (cudaFree waits for
    // the device anyway, this makes the wait explicit).
    if (staging_.get()) DPT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    staging_ = cuda::DeviceMemory();  // freed first: only one is held at a time
    staging_ = cuda::DeviceMemory(bytes);
    DPT_CUDA_CHECK(cudaMemsetAsync(staging_.get(), 0, bytes, stream_));
  }
  return static_cast<float*>(staging_.get());
}

void NcclPieces::copy_on_stream(float* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  DPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}

}  // namespace dptrain
