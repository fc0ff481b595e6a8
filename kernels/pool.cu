/// \file pool.cu
/// mean_pool and route_indexed on the GPU; semantics are python/toporoute/backends/reference.py's.
///
/// mean_pool: one thread block per row of hidden (grid-stride over rows), each thread owning R float4 column
/// chunks of D with float64 accumulators in registers. Each warp turns 32 mask entries at a time into a ballot
/// and reads only the counted tokens (padding is never loaded), up to 4 tokens in flight. A row whose sum of
/// squares is not finite holds a non-finite counted token (finite float32 values cannot overflow the float64
/// sums), found then by a second pass over that row only.
/// A call that writes into the caller's array first checks everything the reference checks before its write:
/// rows in range (a claim pass over an M-entry scratch, uninitialised except at the claimed rows), distinct
/// rows (the smallest position that claims a row owns it; every other claimant is a repeat), finite tokens; the
/// rows are pooled into a staging buffer and scattered only when no check failed (the kernel reads the error
/// word), so a failed call leaves the array as it was, as on the CPU.
///
/// route_indexed: chunks of episodes are gathered from the table into a scratch (B, N, D) pair plus the active
/// mask (q_rows and k_rows not -1, and active), then routed by launch_route, whose kernel and decisions are
/// route's own: the results equal route() on the gathered rows bit for bit. The gather checks the indices and
/// the finiteness of every referenced row (the reference's messages need the row, so the route kernel's own
/// reports go to a scratch word). The gather costs one extra write and read of the gathered rows; a gather
/// variant of the route kernel would avoid it.
///
/// Error words: PoolCodes (launch_pool.hpp). Every kernel but the last of a call gets a report-only copy of the
/// sink (no host pair), so the call's last kernel publishes the final word.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_check.cuh"
#include "host_util.cuh"
#include "launch.hpp"
#include "launch_pool.hpp"

namespace toporoute::cuda {
namespace {

using detail::kFullMask;

constexpr int kMaxThreads = 1024;
constexpr unsigned kNoOwner = 0xffffffffu;
constexpr int kScatterWarps = 8;
constexpr int kGatherWarps = 8;
// bounds the gathered (q, k) rows of one chunk of episodes
constexpr std::size_t kGatherBytes = std::size_t{256} << 20;

// Element (i, j) of an index or mask view (1-D views: i = 0, the stride in s1).
__device__ __forceinline__ std::int64_t at(const IntView& v, std::int64_t i, std::int64_t j) {
  const std::int64_t off = i * v.s0 + j * v.s1;
  switch (v.type) {
    case IntType::u8:
      return static_cast<const std::uint8_t*>(v.data)[off];
    case IntType::i32:
      return static_cast<const std::int32_t*>(v.data)[off];
    case IntType::i64:
      break;
  }
  return static_cast<const std::int64_t*>(v.data)[off];
}

// Four elements of a row from `p` on; `room` = elements left in the row there (<= 0: none). Zeros outside.
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* p, std::int64_t room) {
  if constexpr (kVec) {
    // D % 4 == 0 and 16-byte aligned rows: a chunk lies entirely inside or outside the row
    if (room > 0) return __ldg(reinterpret_cast<const float4*>(p));
    return make_float4(0.f, 0.f, 0.f, 0.f);
  } else {
    float4 v;
    v.x = room > 0 ? __ldg(p) : 0.f;
    v.y = room > 1 ? __ldg(p + 1) : 0.f;
    v.z = room > 2 ? __ldg(p + 2) : 0.f;
    v.w = room > 3 ? __ldg(p + 3) : 0.f;
    return v;
  }
}

template <bool kVec>
__device__ __forceinline__ void store4(float* p, std::int64_t room, float4 v) {
  if constexpr (kVec) {
    if (room > 0) *reinterpret_cast<float4*>(p) = v;
  } else {
    if (room > 0) p[0] = v.x;
    if (room > 1) p[1] = v.y;
    if (room > 2) p[2] = v.z;
    if (room > 3) p[3] = v.w;
  }
}

__device__ __forceinline__ bool finite4(float4 v) {
  return isfinite(v.x) && isfinite(v.y) && isfinite(v.z) && isfinite(v.w);
}

// Sum over the block; every thread gets the same bits (a fixed order). `s`: 32 doubles of shared memory.
// Must be reached by every thread of the block.
__device__ double block_sum(double x, double* s) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = x;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += s[w];
  __syncthreads();  // s is reused by the next call
  return total;
}

// Minimum over the block, in every thread; same contract as block_sum.
__device__ long long block_min(long long x, long long* s) {
  for (int o = 16; o > 0; o >>= 1) x = min(x, __shfl_xor_sync(kFullMask, x, o));
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = x;
  __syncthreads();
  long long m = s[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) m = min(m, s[w]);
  __syncthreads();
  return m;
}

// ------------------------------------------------------------------------------------------ mean_pool

// Rows of a pool input: range check, and the claim scratch of every in-range row set to "no owner".
__global__ void rows_init_kernel(const PoolInput in, std::uint64_t pos0, std::int64_t M, unsigned* owner,
                                 const PoolCodes codes, const ErrorSink err) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < in.n; i += stride) {
    const std::int64_t r = at(in.rows, 0, i);
    if (r < 0 || r >= M) {
      detail::report(err, codes.with_value(PoolCheck::rows_range, pos0 + static_cast<std::uint64_t>(i), r));
    } else {
      owner[r] = kNoOwner;
    }
  }
  detail::finish(err);
}

// Every in-range row is claimed by its smallest global position (all rows_init_kernel launches ran before).
__global__ void rows_claim_kernel(const PoolInput in, std::uint64_t pos0, std::int64_t M, unsigned* owner) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < in.n; i += stride) {
    const std::int64_t r = at(in.rows, 0, i);
    if (r >= 0 && r < M) atomicMin(owner + r, static_cast<unsigned>(pos0 + static_cast<std::uint64_t>(i)));
  }
}

struct PoolRows {
  PoolInput in;
  float* dst = nullptr;            // pooled row i goes to dst + (row0 + i) * dst_sn
  std::int64_t dst_sn = 0, row0 = 0;
  std::int64_t* targets = nullptr;  // optional: target row of global position pos0 + i
  const unsigned* owner = nullptr;  // optional: the claims (repeat check)
  std::int64_t M = 0;
  std::uint64_t pos0 = 0, tok0 = 0;  // global position of row 0 and global token offset of its token 0
  PoolCodes codes;
};

// One block per row (grid-stride). R float4 chunks of D per thread: chunk r of thread x starts at column
// 4 (r * blockDim.x + x). kU tokens in flight per chunk.
template <bool kVec, int R>
__global__ void __launch_bounds__(kMaxThreads) pool_kernel(const PoolRows a, const ErrorSink err) {
  constexpr int kU = R == 1 ? 4 : (R == 2 ? 2 : 1);
  __shared__ double s_sum[32];
  __shared__ long long s_min[32];
  const PoolInput& in = a.in;
  const int lane = threadIdx.x & 31;
  const std::int64_t L = in.L, D = in.D;

  for (std::int64_t i = blockIdx.x; i < in.n; i += gridDim.x) {
    const std::uint64_t pos = a.pos0 + static_cast<std::uint64_t>(i);
    if (threadIdx.x == 0) {
      std::int64_t r = i;
      if (in.rows.data != nullptr) {
        r = at(in.rows, 0, i);
        if (a.owner != nullptr && r >= 0 && r < a.M && a.owner[r] != static_cast<unsigned>(pos)) {
          detail::report(err, a.codes.with_value(PoolCheck::rows_repeat, pos, r));
        }
      }
      if (a.targets != nullptr) a.targets[pos] = r;
    }
    const float* h = in.hidden + i * in.h_sn;
    double acc[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0;
    std::int64_t tokens = 0;
    // the token loop is uniform across the block: every lane of every warp reaches each ballot
    for (std::int64_t base = 0; base < L; base += 32) {
      const std::int64_t l = base + lane;
      unsigned bits = __ballot_sync(kFullMask, l < L && at(in.mask, i, l) != 0);
      tokens += __popc(bits);
      while (bits != 0) {
        const float* tok[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          tok[u] = nullptr;
          if (bits != 0) {
            tok[u] = h + (base + __ffs(bits) - 1) * in.h_sl;
            bits &= bits - 1;
          }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const std::int64_t c = (static_cast<std::int64_t>(r) * blockDim.x + threadIdx.x) * 4;
          float4 v[kU];
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            v[u] = tok[u] != nullptr ? load4<kVec>(tok[u] + c, D - c) : make_float4(0.f, 0.f, 0.f, 0.f);
          }
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            if (tok[u] == nullptr) continue;  // warp-uniform
            acc[r][0] += static_cast<double>(v[u].x);
            acc[r][1] += static_cast<double>(v[u].y);
            acc[r][2] += static_cast<double>(v[u].z);
            acc[r][3] += static_cast<double>(v[u].w);
          }
        }
      }
    }
    const double count = tokens > 0 ? static_cast<double>(tokens) : 1e-9;
    double ss = 0.0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[r][e] /= count;
        ss += acc[r][e] * acc[r][e];
      }
    }
    ss = block_sum(ss, s_sum);
    if (isfinite(ss)) {  // block-uniform
      const double norm = fmax(sqrt(ss), 1e-12);
      float* dst = a.dst + (a.row0 + i) * a.dst_sn;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const std::int64_t c = (static_cast<std::int64_t>(r) * blockDim.x + threadIdx.x) * 4;
        const float4 v = make_float4(static_cast<float>(acc[r][0] / norm), static_cast<float>(acc[r][1] / norm),
                                     static_cast<float>(acc[r][2] / norm), static_cast<float>(acc[r][3] / norm));
        store4<kVec>(dst + c, D - c, v);
      }
    } else {
      // the first counted token with a non-finite element in this thread's columns, then over the block
      long long first = L;
      for (std::int64_t base = 0; base < L; base += 32) {
        const std::int64_t l = base + lane;
        unsigned bits = __ballot_sync(kFullMask, l < L && at(in.mask, i, l) != 0);
        while (bits != 0) {
          const std::int64_t t = base + __ffs(bits) - 1;
          bits &= bits - 1;
          if (t >= first) continue;
          const float* row = h + t * in.h_sl;
          for (int r = 0; r < R; ++r) {
            const std::int64_t c = (static_cast<std::int64_t>(r) * blockDim.x + threadIdx.x) * 4;
            if (!finite4(load4<kVec>(row + c, D - c))) first = t;
          }
        }
      }
      first = block_min(first, s_min);
      if (threadIdx.x == 0) {
        // first == L cannot happen (see the file comment); report the row's first token rather than nothing
        const std::uint64_t t = first < L ? static_cast<std::uint64_t>(first) : 0;
        detail::report(err, PoolCodes::plain(PoolCheck::hidden_non_finite,
                                             a.tok0 + static_cast<std::uint64_t>(i * L) + t));
      }
    }
  }
  detail::finish(err);
}

// Staged rows to their targets, one warp per row, only when no check failed (the error word is still clear:
// the kernels that check ran before this one on the stream).
__global__ void scatter_kernel(const float* staging, std::int64_t total, std::int64_t D, const std::int64_t* targets,
                               float* out, std::int64_t sm, const ErrorSink err) {
  const bool clear = *reinterpret_cast<volatile const unsigned long long*>(err.word) == kNoError;
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
  if (clear) {
    for (std::int64_t p = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; p < total;
         p += warps) {
      float* dst = out + targets[p] * sm;
      const float* src = staging + p * D;
      for (std::int64_t d = lane; d < D; d += 32) dst[d] = src[d];
    }
  }
  detail::finish(err);
}

// Publishes the final word of a call whose last kernel takes no sink of ours (route_indexed: launch_route).
__global__ void finish_kernel(const ErrorSink err) { detail::finish(err); }

// ------------------------------------------------------------------------------------------ route_indexed

// Indices of every agent: -1, or a table row in [0, M) (reported with its value otherwise).
__global__ void index_check_kernel(const RouteArgs a, const PoolCodes codes, const ErrorSink err) {
  const std::int64_t BN = a.B * a.N;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < BN; e += stride) {
    const std::int64_t b = e / a.N, n = e - b * a.N;
    for (int which = 0; which < 2; ++which) {
      const std::int64_t r = at(which == 0 ? a.q_rows : a.k_rows, b, n);
      if (r < -1 || r >= a.M) {
        detail::report(err, codes.with_value(PoolCheck::index_range, static_cast<std::uint64_t>(which * BN + e), r));
      }
    }
  }
  detail::finish(err);
}

// One warp per gathered row (episode b0 + bl, which, agent n) of a chunk of `count` episodes: the table row
// (zeros for -1 and for a bad index) into gq / gk (count, N, D), its checks, and the agent's activity.
template <bool kVec>
__global__ void gather_kernel(const RouteArgs a, std::int64_t b0, std::int64_t count, float* gq, float* gk,
                              std::uint8_t* act, const PoolCodes codes, const ErrorSink err) {
  const int lane = threadIdx.x & 31;
  const std::int64_t N = a.N, D = a.D, BN = a.B * a.N;
  const std::int64_t rows = count * 2 * N;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (std::int64_t w = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; w < rows;
       w += warps) {
    const std::int64_t bl = w / (2 * N), rem = w - bl * 2 * N;
    const int which = rem >= N ? 1 : 0;
    const std::int64_t n = rem - which * N, b = b0 + bl;
    const std::int64_t r = at(which == 0 ? a.q_rows : a.k_rows, b, n);
    const bool bad_index = r < -1 || r >= a.M;
    const bool use = r >= 0 && !bad_index;
    if (bad_index && lane == 0) {
      detail::report(err, codes.with_value(PoolCheck::index_range, static_cast<std::uint64_t>(which * BN + b * N + n), r));
    }
    const float* src = a.q + (use ? r : 0) * a.q_sn;
    float* dst = (which == 0 ? gq : gk) + (bl * N + n) * D;
    bool finite = true;
    for (std::int64_t c = 4 * lane; c < D; c += 128) {
      const float4 v = use ? load4<kVec>(src + c, D - c) : make_float4(0.f, 0.f, 0.f, 0.f);
      finite = finite && finite4(v);
      store4<kVec>(dst + c, D - c, v);
    }
    if (__any_sync(kFullMask, !finite) && lane == 0) {
      detail::report(err, codes.with_value(PoolCheck::table_non_finite,
                                           static_cast<std::uint64_t>((b * 2 + which) * N + n), r));
    }
    if (which == 0 && lane == 0) {
      const std::int64_t rk = at(a.k_rows, b, n);
      const bool ok = use && rk >= 0 && rk < a.M && (a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0);
      act[bl * N + n] = ok ? 1 : 0;
    }
  }
  detail::finish(err);
}

// ------------------------------------------------------------------------------------------ host side

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
// A stride matters only along an axis of extent > 1.
bool stride_ok(std::int64_t extent, std::int64_t stride) { return extent <= 1 || stride % 4 == 0; }

unsigned grid_for(std::int64_t items, std::int64_t per_block) {
  const std::int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, std::int64_t{1} << 20));
}

ErrorSink report_only(const ErrorSink& e) {
  ErrorSink s;
  s.word = e.word;
  return s;
}

// Scratch of one call, carved from one stream-ordered allocation (256-byte aligned pieces).
struct ScratchPlan {
  std::size_t bytes = 0;
  std::size_t take(std::size_t n) {
    const std::size_t at = bytes;
    bytes += (n + 255) / 256 * 256;
    return at;
  }
};

class Scratch {
 public:
  Scratch(int device, void* stream) : device_(device), stream_(stream) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { device_free_async(device_, base_, stream_); }  // after the enqueued work: stream-ordered
  Status allocate(std::size_t bytes) { return device_alloc_async(device_, bytes, stream_, &base_); }
  template <typename T>
  T* at(std::size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + offset);
  }

 private:
  int device_;
  void* stream_;
  void* base_ = nullptr;
};

// What the pool stage of a call needs: totals and its scratch pieces.
struct PoolPlan {
  std::int64_t total = 0;   // rows over all inputs
  bool claims = false;      // some input has rows: the claim scratch (M entries) is used
  bool direct = false;      // out.fresh: rows written straight into out
  std::size_t owner = 0, staging = 0, targets = 0;
};

Status check_pool(const PoolInput* in, std::int64_t count, const PoolTarget& out, PoolPlan* plan) {
  if (count < 0 || out.M < 0 || out.D < 0 || (out.out == nullptr && out.M * out.D != 0)) {
    return detail::invalid("out", "mean_pool: out must be an (M, D) array");
  }
  if (out.D > kPoolMaxD) {
    return Status::error(StatusCode::unsupported, "hidden",
                         "the CUDA mean_pool kernel supports D <= " + std::to_string(kPoolMaxD) + "; got D = " +
                             std::to_string(out.D) + " (use backend='cpu')");
  }
  plan->total = 0;
  plan->claims = false;
  for (std::int64_t b = 0; b < count; ++b) {
    const PoolInput& a = in[b];
    if (a.n < 0 || a.L < 0 || a.D != out.D) return detail::invalid("hidden", "mean_pool: bad hidden dimensions");
    if ((a.hidden == nullptr && a.n * a.L * a.D != 0) || (a.mask.data == nullptr && a.n * a.L != 0)) {
      return detail::invalid("hidden", "mean_pool: null device pointer");
    }
    if (a.rows.data == nullptr && a.n > out.M) return detail::invalid("out", "mean_pool: out has fewer rows than hidden");
    // the claims that find repeated rows cover inputs with rows only
    if (a.rows.data == nullptr && a.n > 0 && count > 1) {
      return detail::invalid("rows", "mean_pool: several inputs need rows");
    }
    plan->claims = plan->claims || a.rows.data != nullptr;
    plan->total += a.n;
  }
  if (plan->total >= static_cast<std::int64_t>(kNoOwner)) {
    return Status::error(StatusCode::unsupported, "hidden", "the CUDA mean_pool kernels take fewer than 2^32 - 1 rows");
  }
  plan->direct = out.fresh;
  if (out.fresh && (count != 1 || in[0].rows.data != nullptr || out.M != in[0].n)) {
    return detail::invalid("out", "mean_pool: a fresh out takes one input without rows");
  }
  return Status::success();
}

void reserve_pool(PoolPlan& p, const PoolTarget& out, ScratchPlan& s) {
  if (p.direct || p.total == 0) return;
  if (p.claims) p.owner = s.take(static_cast<std::size_t>(out.M) * sizeof(unsigned));
  p.staging = s.take(static_cast<std::size_t>(p.total) * static_cast<std::size_t>(out.D) * sizeof(float));
  p.targets = s.take(static_cast<std::size_t>(p.total) * sizeof(std::int64_t));
}

// Enqueues the pool stage (nothing when no row); `last`: its final kernel publishes err.
Status enqueue_pool(const PoolInput* in, std::int64_t count, const PoolTarget& out, const PoolPlan& p,
                    const Scratch& scratch, const PoolCodes& codes, const ErrorSink& err, bool last,
                    cudaStream_t st) {
  if (p.total == 0) return Status::success();
  const ErrorSink quiet = report_only(err);
  unsigned* owner = p.claims ? scratch.at<unsigned>(p.owner) : nullptr;
  std::uint64_t pos0 = 0;
  if (p.claims) {
    for (std::int64_t b = 0; b < count; pos0 += static_cast<std::uint64_t>(in[b].n), ++b) {
      if (in[b].n == 0 || in[b].rows.data == nullptr) continue;
      rows_init_kernel<<<grid_for(in[b].n, 256), 256, 0, st>>>(in[b], pos0, out.M, owner, codes, quiet);
      TOPOROUTE_RETURN_IF_ERROR(detail::launch_status("rows_init_kernel"));
    }
    pos0 = 0;
    for (std::int64_t b = 0; b < count; pos0 += static_cast<std::uint64_t>(in[b].n), ++b) {
      if (in[b].n == 0 || in[b].rows.data == nullptr) continue;
      rows_claim_kernel<<<grid_for(in[b].n, 256), 256, 0, st>>>(in[b], pos0, out.M, owner);
      TOPOROUTE_RETURN_IF_ERROR(detail::launch_status("rows_claim_kernel"));
    }
  }
  const std::int64_t D = out.D;
  float* staging = p.direct ? out.out : scratch.at<float>(p.staging);
  const std::int64_t dst_sn = p.direct ? out.sm : D;
  const std::int64_t chunks = (D + 3) / 4;
  const int R = chunks <= 1024 ? 1 : chunks <= 2048 ? 2 : chunks <= 4096 ? 4 : 8;
  const auto threads = static_cast<int>(std::clamp<std::int64_t>(((chunks + R - 1) / R + 31) / 32 * 32, 32, kMaxThreads));
  pos0 = 0;
  std::uint64_t tok0 = 0;
  // the last input with rows: its pool kernel publishes when it ends the call
  std::int64_t final_input = -1;
  for (std::int64_t b = 0; b < count; ++b) final_input = in[b].n > 0 ? b : final_input;
  for (std::int64_t b = 0; b < count; ++b) {
    const PoolInput& a = in[b];
    PoolRows args;
    args.in = a;
    args.dst = staging;
    args.dst_sn = dst_sn;
    args.row0 = p.direct ? 0 : static_cast<std::int64_t>(pos0);
    args.targets = p.direct ? nullptr : scratch.at<std::int64_t>(p.targets);
    args.owner = owner;
    args.M = out.M;
    args.pos0 = pos0;
    args.tok0 = tok0;
    args.codes = codes;
    pos0 += static_cast<std::uint64_t>(a.n);
    tok0 += static_cast<std::uint64_t>(a.n) * static_cast<std::uint64_t>(a.L);
    if (a.n == 0) continue;
    const bool vec = D % 4 == 0 && aligned16(a.hidden) && aligned16(staging) && stride_ok(a.n, a.h_sn) &&
                     stride_ok(a.L, a.h_sl) && stride_ok(2, dst_sn);
    const ErrorSink sink = last && p.direct && b == final_input ? err : quiet;
    const auto grid = static_cast<unsigned>(std::min(a.n, detail::kMaxGrid));
    if (vec) {
      switch (R) {
        case 1: pool_kernel<true, 1><<<grid, threads, 0, st>>>(args, sink); break;
        case 2: pool_kernel<true, 2><<<grid, threads, 0, st>>>(args, sink); break;
        case 4: pool_kernel<true, 4><<<grid, threads, 0, st>>>(args, sink); break;
        default: pool_kernel<true, 8><<<grid, threads, 0, st>>>(args, sink); break;
      }
    } else {
      switch (R) {
        case 1: pool_kernel<false, 1><<<grid, threads, 0, st>>>(args, sink); break;
        case 2: pool_kernel<false, 2><<<grid, threads, 0, st>>>(args, sink); break;
        case 4: pool_kernel<false, 4><<<grid, threads, 0, st>>>(args, sink); break;
        default: pool_kernel<false, 8><<<grid, threads, 0, st>>>(args, sink); break;
      }
    }
    TOPOROUTE_RETURN_IF_ERROR(detail::launch_status("pool_kernel"));
  }
  if (p.direct) return Status::success();
  const unsigned grid = grid_for(p.total, kScatterWarps);
  scatter_kernel<<<grid, kScatterWarps * 32, 0, st>>>(staging, p.total, D, scratch.at<std::int64_t>(p.targets),
                                                      out.out, out.sm, last ? err : quiet);
  return detail::launch_status("scatter_kernel");
}

}  // namespace

PoolCodes pool_codes(std::int64_t B, std::int64_t N, const PoolInput* inputs, std::int64_t count) {
  std::uint64_t rows = 0;
  for (std::int64_t b = 0; b < count; ++b) rows += static_cast<std::uint64_t>(std::max<std::int64_t>(inputs[b].n, 0));
  const std::uint64_t agents = 2 * static_cast<std::uint64_t>(std::max<std::int64_t>(B, 0)) *
                               static_cast<std::uint64_t>(std::max<std::int64_t>(N, 0));
  return PoolCodes::for_keys(std::max(rows, agents));
}

Status launch_mean_pool(int device, const PoolInput* in, std::int64_t count, const PoolTarget& out,
                        const ErrorSink& err, void* stream) {
  PoolPlan plan;
  TOPOROUTE_RETURN_IF_ERROR(check_pool(in, count, out, &plan));
  if (plan.total == 0) return Status::success();
  if (err.word == nullptr) return detail::invalid("", "mean_pool: null error word");
  const auto st = static_cast<cudaStream_t>(stream);
  ScratchPlan sp;
  reserve_pool(plan, out, sp);
  Scratch scratch(device, stream);
  TOPOROUTE_RETURN_IF_ERROR(scratch.allocate(sp.bytes));
  const Status s = enqueue_pool(in, count, out, plan, scratch, pool_codes(0, 0, in, count), err, true, st);
  if (err.launched != nullptr) *err.launched = true;
  return s;
}

Status launch_route_indexed(int device, const RouteArgs& a, const PoolInput* pool, std::int64_t count,
                            const PoolTarget& pool_out, const RouteOut& o, const ErrorSink& err, void* stream) {
  if (a.B < 0 || a.N < 0 || a.D < 0 || a.M < 0) {
    return detail::invalid("table", "route_indexed: B, N, M and D must be >= 0");
  }
  if (!(a.tau >= -1.0f && a.tau <= 1.0f)) {
    return Status::error(StatusCode::out_of_range, "tau", "tau must be in [-1, 1]; got " + std::to_string(a.tau));
  }
  if (a.k_in < 0) {
    return Status::error(StatusCode::out_of_range, "k_in", "k_in must be >= 0; got " + std::to_string(a.k_in));
  }
  const std::int64_t want_k = a.k_in > 0 ? a.k_in : std::max<std::int64_t>(a.N - 1, 0);
  if (a.K != want_k) return detail::invalid("k_in", "route_indexed: inbox width K must be " + std::to_string(want_k));
  // launch_route's limits, checked before anything is enqueued so a refused call writes nothing
  TOPOROUTE_RETURN_IF_ERROR(check_route_limits(a.N, a.D, "q_rows", "table"));
  PoolPlan plan;
  if (count > 0) {
    if (pool_out.out != a.q || pool_out.M != a.M || pool_out.D != a.D || pool_out.fresh) {
      return detail::invalid("table", "route_indexed: pool= writes into the table");
    }
    TOPOROUTE_RETURN_IF_ERROR(check_pool(pool, count, pool_out, &plan));
  }
  const std::int64_t BN = a.B * a.N;
  if (BN == 0 && plan.total == 0) return Status::success();
  // empty arrays may have null data (a (0, D) table, (0, N) indices)
  if (err.word == nullptr || (a.M * a.D > 0 && a.q == nullptr) ||
      (BN > 0 && (!a.q_rows.present() || !a.k_rows.present() || o.scores == nullptr || o.adjacency == nullptr ||
                  o.in_degree == nullptr || (a.K > 0 && o.inbox == nullptr)))) {
    return detail::invalid("", "route_indexed: null device pointer");
  }
  const PoolCodes codes = pool_codes(a.B, a.N, pool, count);
  const auto st = static_cast<cudaStream_t>(stream);

  ScratchPlan sp;
  reserve_pool(plan, pool_out, sp);
  const std::size_t per_episode =
      static_cast<std::size_t>(a.N) * (2 * static_cast<std::size_t>(a.D) * sizeof(float) + 1);
  const std::int64_t chunk =
      BN == 0 ? 0
              : std::clamp<std::int64_t>(static_cast<std::int64_t>(kGatherBytes / std::max<std::size_t>(per_episode, 1)),
                                         1, a.B);
  const auto rows = static_cast<std::size_t>(chunk * a.N);
  const std::size_t gq = sp.take(rows * static_cast<std::size_t>(a.D) * sizeof(float));
  const std::size_t gk = sp.take(rows * static_cast<std::size_t>(a.D) * sizeof(float));
  const std::size_t act = sp.take(rows);
  const std::size_t route_word = sp.take(sizeof(unsigned long long));
  Scratch scratch(device, stream);
  TOPOROUTE_RETURN_IF_ERROR(scratch.allocate(sp.bytes));
  if (err.launched != nullptr) *err.launched = true;  // from here on something may be enqueued
  const ErrorSink quiet = report_only(err);

  if (plan.total > 0) {
    // the indices are checked before the table is written (the scatter reads the word)
    if (BN > 0) {
      index_check_kernel<<<grid_for(BN, 256), 256, 0, st>>>(a, codes, quiet);
      TOPOROUTE_RETURN_IF_ERROR(detail::launch_status("index_check_kernel"));
    }
    TOPOROUTE_RETURN_IF_ERROR(enqueue_pool(pool, count, pool_out, plan, scratch, codes, err, false, st));
  }
  if (BN > 0) {
    RouteArgs g = a;
    g.q = scratch.at<const float>(gq);
    g.k = scratch.at<const float>(gk);
    g.active = scratch.at<const std::uint8_t>(act);
    g.q_sb = g.k_sb = a.N * a.D;
    g.q_sn = g.k_sn = a.D;
    g.a_sb = a.N;
    g.a_sn = 1;
    g.q_rows = IntView{};
    g.k_rows = IntView{};
    ErrorSink route_sink;  // route's own reports (chunk-local episodes) are not the reference's: not kept
    route_sink.word = scratch.at<unsigned long long>(route_word);
    const bool vec = a.D % 4 == 0 && aligned16(a.q) && stride_ok(a.M, a.q_sn);
    for (std::int64_t b0 = 0; b0 < a.B; b0 += chunk) {
      const std::int64_t n = std::min(chunk, a.B - b0);
      const unsigned grid = grid_for(n * 2 * a.N, kGatherWarps);
      float* dq = scratch.at<float>(gq);
      float* dk = scratch.at<float>(gk);
      std::uint8_t* da = scratch.at<std::uint8_t>(act);
      if (vec) {
        gather_kernel<true><<<grid, kGatherWarps * 32, 0, st>>>(a, b0, n, dq, dk, da, codes, quiet);
      } else {
        gather_kernel<false><<<grid, kGatherWarps * 32, 0, st>>>(a, b0, n, dq, dk, da, codes, quiet);
      }
      TOPOROUTE_RETURN_IF_ERROR(detail::launch_status("gather_kernel"));
      g.B = n;
      const std::int64_t NN = a.N * a.N;
      const RouteOut oc{o.scores + b0 * NN, o.adjacency + b0 * NN, a.K > 0 ? o.inbox + b0 * a.N * a.K : o.inbox,
                        o.in_degree + b0 * a.N};
      TOPOROUTE_RETURN_IF_ERROR(launch_route(g, oc, route_sink, stream));
    }
  }
  finish_kernel<<<1, 32, 0, st>>>(err);
  return detail::launch_status("finish_kernel");
}

Status launch_mean_pool_on(int device, const PoolInput* inputs, std::int64_t count, const PoolTarget& out,
                           const ErrorSink& err, void* stream) {
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  return launch_mean_pool(device, inputs, count, out, err, stream);
}

Status launch_route_indexed_on(int device, const RouteArgs& args, const PoolInput* pool, std::int64_t count,
                               const PoolTarget& pool_out, const RouteOut& out, const ErrorSink& err, void* stream) {
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  return launch_route_indexed(device, args, pool, count, pool_out, out, err, stream);
}

// ------------------------------------------------------------------------------------------ host memory

namespace {

std::size_t int_size(IntType t) { return t == IntType::u8 ? 1 : t == IntType::i32 ? 4 : 8; }

// The device copies of a call's host arrays: one arena, every piece copied in on `st`.
class HostCopies {
 public:
  explicit HostCopies(cudaStream_t st) : st_(st) {}
  std::size_t add(const void* host, std::size_t bytes) {
    const std::size_t at = arena_.reserve(bytes);
    pieces_.push_back({host, bytes, at});
    return at;
  }
  Status allocate(const char* op) { return arena_.allocate(op, "the device copies of the inputs and outputs"); }
  Status copy_in() {
    for (const Piece& p : pieces_) {
      if (p.host == nullptr || p.bytes == 0) continue;
      TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
          cudaMemcpyAsync(arena_.at<void>(p.at), p.host, p.bytes, cudaMemcpyHostToDevice, st_), "cudaMemcpyAsync"));
    }
    return Status::success();
  }
  Status copy_out(void* host, std::size_t at, std::size_t bytes) {
    if (host == nullptr || bytes == 0) return Status::success();
    return detail::status_from_cuda(cudaMemcpyAsync(host, arena_.at<void>(at), bytes, cudaMemcpyDeviceToHost, st_),
                                    "cudaMemcpyAsync");
  }
  template <typename T>
  T* at(std::size_t offset) const {
    return arena_.at<T>(offset);
  }

 private:
  struct Piece {
    const void* host;
    std::size_t bytes, at;
  };
  cudaStream_t st_;
  detail::DeviceArena arena_;
  std::vector<Piece> pieces_;
};

// Device copies of C-contiguous pool inputs; `dev` gets their device views once allocated (finish()).
struct PoolCopies {
  std::vector<std::size_t> hidden, mask, rows;
  void add(HostCopies& c, const PoolInput* in, std::int64_t count) {
    for (std::int64_t b = 0; b < count; ++b) {
      const PoolInput& a = in[b];
      const auto n = static_cast<std::size_t>(a.n), L = static_cast<std::size_t>(a.L);
      hidden.push_back(c.add(a.hidden, n * L * static_cast<std::size_t>(a.D) * sizeof(float)));
      mask.push_back(c.add(a.mask.data, n * L * int_size(a.mask.type)));
      rows.push_back(c.add(a.rows.data, a.rows.data == nullptr ? 0 : n * int_size(a.rows.type)));
    }
  }
  std::vector<PoolInput> device(const HostCopies& c, const PoolInput* in, std::int64_t count) const {
    std::vector<PoolInput> dev(in, in + count);
    for (std::size_t b = 0; b < dev.size(); ++b) {
      PoolInput& d = dev[b];
      d.hidden = c.at<const float>(hidden[b]);
      d.h_sn = d.L * d.D;
      d.h_sl = d.D;
      d.mask.data = c.at<const void>(mask[b]);
      d.mask.s0 = d.L;
      d.mask.s1 = 1;
      if (d.rows.data != nullptr) {
        d.rows.data = c.at<const void>(rows[b]);
        d.rows.s0 = 0;
        d.rows.s1 = 1;
      }
    }
    return dev;
  }
};

Status read_word(const unsigned long long* word, cudaStream_t st, const char* op, unsigned long long* code) {
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
      cudaMemcpyAsync(code, word, sizeof(*code), cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync"));
  return detail::status_from_cuda(cudaStreamSynchronize(st), op);
}

}  // namespace

Status mean_pool_host(const PoolInput* in, std::int64_t count, const PoolTarget& out, int device,
                      unsigned long long* code) {
  *code = kNoError;
  PoolPlan plan;
  TOPOROUTE_RETURN_IF_ERROR(check_pool(in, count, out, &plan));
  if (plan.total == 0) return Status::success();
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  const cudaStream_t st = cudaStreamPerThread;
  HostCopies c(st);
  PoolCopies pc;
  pc.add(c, in, count);
  const std::size_t out_bytes = static_cast<std::size_t>(out.M) * static_cast<std::size_t>(out.D) * sizeof(float);
  // a fresh out is only written; the caller's is copied in so that the rows not pooled come back unchanged
  const std::size_t dout = c.add(out.fresh ? nullptr : out.out, out_bytes);
  const std::size_t word = c.add(nullptr, sizeof(unsigned long long));
  TOPOROUTE_RETURN_IF_ERROR(c.allocate("mean_pool"));
  TOPOROUTE_RETURN_IF_ERROR(c.copy_in());
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
      cudaMemsetAsync(c.at<void>(word), 0xff, sizeof(unsigned long long), st), "cudaMemsetAsync"));
  const std::vector<PoolInput> dev = pc.device(c, in, count);
  PoolTarget t = out;
  t.out = c.at<float>(dout);
  t.sm = out.D;
  TOPOROUTE_RETURN_IF_ERROR(
      launch_mean_pool(device, dev.data(), count, t, ErrorSink{c.at<unsigned long long>(word)}, st));
  TOPOROUTE_RETURN_IF_ERROR(read_word(c.at<unsigned long long>(word), st, "pool_kernel", code));
  if (*code != kNoError) return Status::success();
  TOPOROUTE_RETURN_IF_ERROR(c.copy_out(out.out, dout, out_bytes));
  return detail::status_from_cuda(cudaStreamSynchronize(st), "cudaMemcpyAsync");
}

Status route_indexed_host(const RouteArgs& a, const PoolInput* pool, std::int64_t count, const PoolTarget& pool_out,
                          const RouteOut& out, int device, unsigned long long* code) {
  *code = kNoError;
  if (a.B < 0 || a.N < 0 || a.D < 0 || a.M < 0 || count < 0) {
    return detail::invalid("table", "route_indexed: B, N, M and D must be >= 0");
  }
  std::int64_t rows = 0;
  for (std::int64_t b = 0; b < count; ++b) rows += pool[b].n;
  const std::int64_t BN = a.B * a.N;
  if (BN == 0 && rows == 0) {
    // nothing to gather or pool: only the argument checks of the launcher
    return launch_route_indexed(device, a, pool, count, pool_out, out, ErrorSink{}, nullptr);
  }
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  const cudaStream_t st = cudaStreamPerThread;
  HostCopies c(st);
  const auto bn = static_cast<std::size_t>(BN), N = static_cast<std::size_t>(a.N);
  const std::size_t table_bytes = static_cast<std::size_t>(a.M) * static_cast<std::size_t>(a.D) * sizeof(float);
  const std::size_t table = c.add(a.q, table_bytes);
  const std::size_t q_rows = c.add(a.q_rows.data, bn * int_size(a.q_rows.type));
  const std::size_t k_rows = c.add(a.k_rows.data, bn * int_size(a.k_rows.type));
  const std::size_t active = c.add(a.active, a.active == nullptr ? 0 : bn);
  PoolCopies pc;
  pc.add(c, pool, count);
  const std::size_t scores_bytes = bn * N * sizeof(float), adj_bytes = bn * N;
  const std::size_t inbox_bytes = bn * static_cast<std::size_t>(a.K) * sizeof(std::int32_t);
  const std::size_t deg_bytes = bn * sizeof(std::int32_t);
  const std::size_t scores = c.add(nullptr, scores_bytes), adjacency = c.add(nullptr, adj_bytes);
  const std::size_t inbox = c.add(nullptr, inbox_bytes), in_degree = c.add(nullptr, deg_bytes);
  const std::size_t word = c.add(nullptr, sizeof(unsigned long long));
  TOPOROUTE_RETURN_IF_ERROR(c.allocate("route_indexed"));
  TOPOROUTE_RETURN_IF_ERROR(c.copy_in());
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
      cudaMemsetAsync(c.at<void>(word), 0xff, sizeof(unsigned long long), st), "cudaMemsetAsync"));

  RouteArgs d = a;
  d.q = d.k = c.at<const float>(table);
  d.q_sn = d.k_sn = a.D;
  d.q_sb = d.k_sb = 0;
  d.q_rows.data = c.at<const void>(q_rows);
  d.k_rows.data = c.at<const void>(k_rows);
  d.q_rows.s0 = d.k_rows.s0 = a.N;
  d.q_rows.s1 = d.k_rows.s1 = 1;
  d.active = a.active == nullptr ? nullptr : c.at<const std::uint8_t>(active);
  d.a_sb = a.N;
  d.a_sn = 1;
  const std::vector<PoolInput> dev = pc.device(c, pool, count);
  PoolTarget t = pool_out;
  t.out = c.at<float>(table);
  t.sm = a.D;
  const RouteOut dout{c.at<float>(scores), c.at<std::uint8_t>(adjacency), c.at<std::int32_t>(inbox),
                      c.at<std::int32_t>(in_degree)};
  TOPOROUTE_RETURN_IF_ERROR(launch_route_indexed(device, d, dev.data(), count, t, dout,
                                                 ErrorSink{c.at<unsigned long long>(word)}, st));
  TOPOROUTE_RETURN_IF_ERROR(c.copy_out(out.scores, scores, scores_bytes));
  TOPOROUTE_RETURN_IF_ERROR(c.copy_out(out.adjacency, adjacency, adj_bytes));
  TOPOROUTE_RETURN_IF_ERROR(c.copy_out(out.inbox, inbox, inbox_bytes));
  TOPOROUTE_RETURN_IF_ERROR(c.copy_out(out.in_degree, in_degree, deg_bytes));
  TOPOROUTE_RETURN_IF_ERROR(read_word(c.at<unsigned long long>(word), st, "route_indexed kernels", code));
  // the reference writes the pooled table before it checks the table's rows
  const bool pooled = *code == kNoError || PoolCodes::check_of(*code) == PoolCheck::table_non_finite;
  if (rows == 0 || !pooled) return Status::success();
  TOPOROUTE_RETURN_IF_ERROR(c.copy_out(pool_out.out, table, table_bytes));
  return detail::status_from_cuda(cudaStreamSynchronize(st), "cudaMemcpyAsync");
}

}  // namespace toporoute::cuda
