/// \file route.cu
/// Cosine routing on the GPU; semantics are python/toporoute/backends/reference.py::route.
///
/// Design: one thread block per episode (grid-stride over the batch), 32 * W threads with W = 1 for N <= 8
/// and up to 8 warps for larger N. The N x N dot products k_j . q_i are computed in 8 x 8 tiles, one warp
/// per tile, with the FP64 tensor-core instruction mma.m8n8k4 (sm_80+). Each lane converts every float it
/// loads to double once and feeds it to the tile's mma: a warp-per-dot design would convert each element
/// N times, and float->double conversion runs at a quarter of the load rate needed to stay memory-bound
/// at N = 8, D = 384. Loads are 16-byte, 4 per matrix in flight per lane, 8 rows x 64 contiguous bytes per
/// warp instruction. Shared memory holds only O(N) data (row sums of squares and the active flags); the
/// selection of providers re-reads the block's own scores from global memory after a barrier.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_check.cuh"
#include "launch.hpp"

namespace toporoute::cuda {
namespace {

using detail::kFullMask;

constexpr int kTile = 8;        // rows of one mma tile
constexpr int kSteps = 4;       // float4 loads per lane and matrix in flight: 64 elements of D per iteration
constexpr int kMaxWarps = 8;
constexpr std::int64_t kMaxN = 2048;  // bounds the O(N) shared memory (17 bytes per padded row)
constexpr std::int64_t kMaxD = INT32_MAX - 16 * kSteps;  // 32-bit element indices inside a row
constexpr std::int64_t kNoCap = INT64_MAX;

// D += A * B for an 8x4 A (row-major) and a 4x8 B (column-major), in double. Fragment contract of
// mma.m8n8k4.f64 (PTX ISA): lane l holds a = A[l / 4][l % 4], b = B[l % 4][l / 4] and the accumulators
// d0, d1 = D[l / 4][2 (l % 4)], D[l / 4][2 (l % 4) + 1]. Must be reached by all 32 lanes together.
__device__ __forceinline__ void mma_8x8x4(double& d0, double& d1, double a, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d0), "+d"(d1)
               : "d"(a), "d"(b));
#else
  // GPUs before sm_80 have no FP64 tensor cores: the same contract through shuffles (slow but exact).
  const int lane = threadIdx.x & 31, row = lane >> 2, col = (lane & 3) * 2;
  for (int t = 0; t < 4; ++t) {
    const double at = __shfl_sync(kFullMask, a, row * 4 + t);
    const double b0 = __shfl_sync(kFullMask, b, col * 4 + t);
    const double b1 = __shfl_sync(kFullMask, b, (col + 1) * 4 + t);
    d0 = fma(at, b0, d0);
    d1 = fma(at, b1, d1);
  }
#endif
}

// Four consecutive elements of a row at `row` (this lane's chunk); `room` = elements left in the row from there
// (<= 0: none). Zeros outside the row and for padding rows.
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* row, bool row_ok, int room) {
  if constexpr (kVec) {
    // D % 4 == 0 and 16-byte aligned rows: a chunk lies entirely inside or outside the row.
    if (row_ok && room > 0) return __ldg(reinterpret_cast<const float4*>(row));
    return make_float4(0.f, 0.f, 0.f, 0.f);
  } else {
    float4 v;
    v.x = row_ok && room > 0 ? __ldg(row) : 0.f;
    v.y = row_ok && room > 1 ? __ldg(row + 1) : 0.f;
    v.z = row_ok && room > 2 ? __ldg(row + 2) : 0.f;
    v.w = row_ok && room > 3 ? __ldg(row + 3) : 0.f;
    return v;
  }
}

struct TileAcc {
  double d0 = 0.0, d1 = 0.0;    // dots of this lane's two tile cells
  double kss = 0.0, qss = 0.0;  // partial sums of squares of this lane's k row and q row
};

template <bool kDots, bool kNorms>
__device__ __forceinline__ void accumulate(TileAcc& acc, float kf, float qf) {
  const double a = kf, b = qf;
  if constexpr (kDots) mma_8x8x4(acc.d0, acc.d1, a, b);
  if constexpr (kNorms) {
    acc.kss = fma(a, a, acc.kss);
    acc.qss = fma(b, b, acc.qss);
  }
}

// One warp, one tile: k rows jt*8 .. jt*8+7 against q rows it*8 .. it*8+7. Lane (r, c) = (lane / 4, lane % 4)
// loads k row jt*8 + r as A's row r and q row it*8 + r as B's column r; in every mma both its values are
// element d = base + 16 u + 4 c + e of their rows, so A's column c and B's row c always name the same d
// and the tile accumulates dots[j][i] = sum_d k[j][d] q[i][d]. Rows >= N load zeros. Warp-uniform arguments.
template <bool kVec, bool kDots, bool kNorms>
__device__ TileAcc tile_pass(const float* kb, const float* qb, std::int64_t k_sn, std::int64_t q_sn, int N, int D,
                             int jt, int it) {
  const int lane = threadIdx.x & 31, r = lane >> 2, c = lane & 3;
  const int j = jt * kTile + r, i = it * kTile + r;
  const bool j_ok = j < N, i_ok = i < N;
  // this lane's chunks start at element 4 c of its rows
  const float* krow = kb + (j_ok ? j : 0) * k_sn + 4 * c;
  const float* qrow = qb + (i_ok ? i : 0) * q_sn + 4 * c;
  const int room = D - 4 * c;
  TileAcc acc;
  __syncwarp();  // mma.sync.aligned needs the whole warp converged
  for (int base = 0; base < D; base += 16 * kSteps) {
    float4 kv[kSteps], qv[kSteps];
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int d = base + 16 * u;  // + 4 c, folded into the row pointers and room
      kv[u] = load4<kVec>(krow + d, j_ok, room - d);
      qv[u] = load4<kVec>(qrow + d, i_ok, room - d);
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      accumulate<kDots, kNorms>(acc, kv[u].x, qv[u].x);
      accumulate<kDots, kNorms>(acc, kv[u].y, qv[u].y);
      accumulate<kDots, kNorms>(acc, kv[u].z, qv[u].z);
      accumulate<kDots, kNorms>(acc, kv[u].w, qv[u].w);
    }
  }
  return acc;
}

// Sum over the 4 lanes sharing a tile row; every lane of the group gets the same bits.
__device__ __forceinline__ double row_group_sum(double x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  x += __shfl_xor_sync(kFullMask, x, 2);
  return x;
}

// Lanes with c == 0 publish the row sums of squares of tile rows (g*8 + r) to shared memory.
__device__ __forceinline__ void publish_norms(const TileAcc& acc, int g, int N, double* s_ksq, double* s_qsq) {
  const double kss = row_group_sum(acc.kss), qss = row_group_sum(acc.qss);
  const int lane = threadIdx.x & 31, row = g * kTile + (lane >> 2);
  if ((lane & 3) == 0 && row < N) {
    s_ksq[row] = kss;
    s_qsq[row] = qss;
  }
}

__device__ __forceinline__ float cosine(double dot, double k_sumsq, double q_sumsq) {
  double s = dot / (sqrt(k_sumsq) * sqrt(q_sumsq));
  s = s > 1.0 ? 1.0 : (s < -1.0 ? -1.0 : s);
  return static_cast<float>(s);  // the one rounding to float32; every decision is taken on this value
}

struct EpisodeRows {
  const double* ksq;
  const double* qsq;
  const unsigned char* act;
  // A provider row (k) or recipient row (q) takes part iff it is active and non-zero.
  __device__ bool k_ok(int n) const { return act[n] && ksq[n] > 0.0; }
  __device__ bool q_ok(int n) const { return act[n] && qsq[n] > 0.0; }
};

__device__ __forceinline__ void store_tile_scores(const TileAcc& acc, int jt, int it, int N, const EpisodeRows& rows,
                                                  float* scores_b) {
  const int lane = threadIdx.x & 31;
  const int j = jt * kTile + (lane >> 2);
  const int i0 = it * kTile + (lane & 3) * 2;
  if (j >= N) return;
  const bool kval = rows.k_ok(j);
  float* out = scores_b + static_cast<std::int64_t>(j) * N;
  if (i0 < N) out[i0] = kval && rows.q_ok(i0) ? cosine(acc.d0, rows.ksq[j], rows.qsq[i0]) : 0.0f;
  if (i0 + 1 < N) out[i0 + 1] = kval && rows.q_ok(i0 + 1) ? cosine(acc.d1, rows.ksq[j], rows.qsq[i0 + 1]) : 0.0f;
}

// Candidates of column i: j != i, both rows ok, score > tau. Each kept pair (j, i) writes its own inbox slot
// (its rank) and adjacency cell; each column writes its count and the -1 padding after the kept slots, so
// no two threads write the same address. O(N) reads per candidate pair.
__device__ void select_providers(const RouteArgs& a, const RouteOut& o, std::int64_t b, const EpisodeRows& rows,
                                 const float* scores_b) {
  const int N = static_cast<int>(a.N);
  const std::int64_t NN = static_cast<std::int64_t>(N) * N;
  const std::int64_t kcap = a.k_in > 0 ? a.k_in : kNoCap;
  const float tau = a.tau;
  std::int32_t* inbox_b = o.inbox + b * N * a.K;
  for (int p = threadIdx.x; p < NN; p += blockDim.x) {
    const int j = p / N, i = p - j * N;
    bool kept = false;
    if (j != i && rows.k_ok(j) && rows.q_ok(i)) {
      const float s = scores_b[p];
      if (s > tau) {
        // rank = number of candidates ahead of j: higher score, or the same score and a lower index. No early
        // exit at kcap: independent iterations let the loads of a column overlap.
        int rank = 0;
#pragma unroll 4
        for (int t = 0; t < N; ++t) {
          const float st = scores_b[static_cast<std::int64_t>(t) * N + i];
          rank += t != i && t != j && rows.k_ok(t) && st > tau && (st > s || (st == s && t < j));
        }
        kept = rank < kcap;
        if (kept && rank < a.K) inbox_b[static_cast<std::int64_t>(i) * a.K + rank] = j;
      }
    }
    o.adjacency[b * NN + p] = kept ? 1 : 0;
  }
  for (int i = threadIdx.x; i < N; i += blockDim.x) {
    std::int64_t count = 0;
    if (rows.q_ok(i)) {
      for (int t = 0; t < N; ++t) {
        count += t != i && rows.k_ok(t) && scores_b[static_cast<std::int64_t>(t) * N + i] > tau;
      }
    }
    const std::int64_t kept = count < kcap ? count : kcap;
    o.in_degree[b * N + i] = static_cast<std::int32_t>(kept);
    for (std::int64_t r = kept; r < a.K; ++r) inbox_b[static_cast<std::int64_t>(i) * a.K + r] = -1;
  }
}

// Dynamic shared memory: double ksq[n_pad], double qsq[n_pad], unsigned char act[n_pad].
template <bool kVec>
__global__ void __launch_bounds__(kMaxWarps * 32, 4)
    route_kernel(const RouteArgs a, const RouteOut o, const ErrorSink err) {
  extern __shared__ double smem[];
  const int N = static_cast<int>(a.N);
  const int tiles_1d = (N + kTile - 1) / kTile;
  const int n_pad = tiles_1d * kTile;
  const int n_tiles = tiles_1d * tiles_1d;
  double* s_ksq = smem;
  double* s_qsq = smem + n_pad;
  unsigned char* s_act = reinterpret_cast<unsigned char*>(smem + 2 * n_pad);
  const EpisodeRows rows{s_ksq, s_qsq, s_act};
  const int D = static_cast<int>(a.D);
  const int tid = threadIdx.x, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const std::int64_t NN = static_cast<std::int64_t>(N) * N;

  for (std::int64_t b = blockIdx.x; b < a.B; b += gridDim.x) {
    const float* qb = a.q + b * a.q_sb;
    const float* kb = a.k + b * a.k_sb;
    float* scores_b = o.scores + b * NN;
    for (int n = tid; n < N; n += blockDim.x) {
      s_act[n] = a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0;
    }
    if (n_tiles == 1) {
      // N <= 8: norms and dots in one pass over the data, read exactly once.
      TileAcc acc;
      if (warp == 0) {
        acc = tile_pass<kVec, true, true>(kb, qb, a.k_sn, a.q_sn, N, D, 0, 0);
        publish_norms(acc, 0, N, s_ksq, s_qsq);
      }
      __syncthreads();
      if (warp == 0) store_tile_scores(acc, 0, 0, N, rows, scores_b);
    } else {
      // Every tile needs the norms of its rows, computed by other warps: a norms pass over row groups first.
      for (int g = warp; g < tiles_1d; g += nwarps) {
        const TileAcc acc = tile_pass<kVec, false, true>(kb, qb, a.k_sn, a.q_sn, N, D, g, g);
        publish_norms(acc, g, N, s_ksq, s_qsq);
      }
      __syncthreads();
      for (int t = warp; t < n_tiles; t += nwarps) {
        const int jt = t / tiles_1d, it = t - jt * tiles_1d;
        const TileAcc acc = tile_pass<kVec, true, false>(kb, qb, a.k_sn, a.q_sn, N, D, jt, it);
        store_tile_scores(acc, jt, it, N, rows, scores_b);
      }
    }
    // A finite float row has a finite sum of squares in double, so this is exactly "row has NaN/inf".
    for (int n = tid; n < N; n += blockDim.x) {
      const unsigned long long base = static_cast<unsigned long long>(b) * 2;
      if (!isfinite(s_qsq[n])) detail::report(err, base * N + n);
      if (!isfinite(s_ksq[n])) detail::report(err, (base + 1) * N + n);
    }
    __syncthreads();  // the episode's scores are in global memory and visible to the whole block
    select_providers(a, o, b, rows, scores_b);
    __syncthreads();  // shared memory is reused by the next episode
  }
  detail::finish(err);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// A stride matters only along an axis of extent > 1.
bool stride_ok(std::int64_t extent, std::int64_t stride) { return extent <= 1 || stride % 4 == 0; }

}  // namespace

Status check_route_limits(std::int64_t N, std::int64_t D, const char* n_arg, const char* d_arg) {
  if (N > kMaxN) {
    return Status::error(StatusCode::unsupported, n_arg,
                         "the CUDA route kernel supports at most " + std::to_string(kMaxN) +
                             " agents per episode; got N = " + std::to_string(N) + " (use backend='cpu')");
  }
  if (D > kMaxD) {
    return Status::error(StatusCode::unsupported, d_arg,
                         "the CUDA route kernel supports D < 2^31; got D = " + std::to_string(D));
  }
  return Status::success();
}

Status launch_route(const RouteArgs& a, const RouteOut& o, const ErrorSink& err, void* stream) {
  if (a.B < 0 || a.N < 0 || a.D < 0) {
    return Status::error(StatusCode::invalid_argument, "q", "route: B, N and D must be >= 0");
  }
  const std::int64_t want_k = a.k_in > 0 ? a.k_in : std::max<std::int64_t>(a.N - 1, 0);
  if (a.K != want_k) {
    return Status::error(StatusCode::invalid_argument, "k_in",
                         "route: inbox width K must be " + std::to_string(want_k) + " for k_in = " +
                             std::to_string(a.k_in) + "; got " + std::to_string(a.K));
  }
  TOPOROUTE_RETURN_IF_ERROR(check_route_limits(a.N, a.D, "q", "q"));
  if (a.B == 0 || a.N == 0) return Status::success();
  if ((a.D > 0 && (a.q == nullptr || a.k == nullptr)) || o.scores == nullptr || o.adjacency == nullptr ||
      o.in_degree == nullptr || (a.K > 0 && o.inbox == nullptr) || err.word == nullptr) {
    return Status::error(StatusCode::invalid_argument, "", "route: null device pointer");
  }
  const bool vec = a.D % 4 == 0 && aligned16(a.q) && aligned16(a.k) && stride_ok(a.B, a.q_sb) &&
                   stride_ok(a.B, a.k_sb) && stride_ok(a.N, a.q_sn) && stride_ok(a.N, a.k_sn);
  const int tiles_1d = static_cast<int>((a.N + kTile - 1) / kTile);
  const int n_tiles = tiles_1d * tiles_1d;
  const int warps = n_tiles == 1 ? 1 : std::min(n_tiles, kMaxWarps);
  const std::size_t smem = static_cast<std::size_t>(tiles_1d) * kTile * (2 * sizeof(double) + 1);
  const auto grid = static_cast<unsigned>(std::min(a.B, detail::kMaxGrid));
  const auto s = static_cast<cudaStream_t>(stream);
  if (vec) {
    route_kernel<true><<<grid, warps * 32, smem, s>>>(a, o, err);
  } else {
    route_kernel<false><<<grid, warps * 32, smem, s>>>(a, o, err);
  }
  if (err.launched != nullptr) *err.launched = true;
  return detail::launch_status("route_kernel");
}

}  // namespace toporoute::cuda
