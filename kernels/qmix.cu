/// \file qmix.cu
/// The Agent Q-Mix networks on the GPU; semantics are python/toporoute/backends/reference.py qmix_forward and
/// qmix_mix (float32 FFMA, like the CPU kernels; no TF32).
///
/// Design. One fused launch per call; a thread block owns a group of whole episodes (R agent rows, R <= 64, a
/// multiple of 4; grid-stride over the groups) and keeps every activation of the group in shared memory,
/// feature-major: X[f * Rs + r] (row stride Rs = R or R + 4, whichever is 4 times an odd number, so float4 reads
/// of 4 rows stay aligned and 8 features x 4 rows touch 32 distinct banks).
///
/// Every Linear / GRUCell is a small GEMM Y (R x out) = X (R x K) W (K x out) on those buffers:
/// - The block's 256 threads each own a register tile of TM rows x 4 output columns (TM = 4 when the block has
///   enough rows to keep most threads busy, else 1) of a pass of up to 128 columns; wider outputs take several
///   passes (so a block never holds more than its tile of accumulators).
/// - The weights (global, transposed K x out, L2-resident: about 1.4 MB at the default shapes) are staged into
///   shared memory in K-tiles of 16 rows with cp.async (16-byte copies when the rows allow it, 4-byte ones
///   otherwise; zero-filled past K and out) through kStages = 4 buffers: tiles t + 1 .. t + 3 are in flight
///   while tile t is used (one barrier per tile). With two buffers a tile's L2 round trip (~1 us under load)
///   was hidden behind one tile of FMAs only (~0.2 us for a GRUCell at 64 rows, less for a Linear).
/// - Per k a thread reads one float4 of x (TM rows) and one float4 of weights per gate, feeding 16 (Linear) or
///   48 (GRUCell: r, z, n) FFMAs. With TM = 4 and at least 8 row groups x 4 column groups (64 or 32 rows at
///   the default shapes) a warp is 8 row groups x 4 column groups, so each of those reads is a single
///   shared-memory wavefront (x: 128 contiguous bytes; weights: 64): 4 wavefronts per 12 warp-FFMAs in a
///   GRUCell instead of 7 with 2 x 16 (the 4 schedulers issue 4 FFMAs per wavefront the LSU serves, so shared
///   memory, not the FMA units, bounded the big GEMMs at about 40 % of the FP32 peak).
/// - A GRUCell pass runs two K loops into the same r and z accumulators (x W_ih, then h W_hh) and keeps the
///   two n accumulators apart; the cell is finished in registers.
/// - Padding rows (past the group's last episode) are computed like the others and never stored.
/// The neighbour sets are one 64-bit mask per row (N <= 64), built once per group; the neighbour mean is a
/// thread per (row, feature); LayerNorm and the mixer's last step use 8 lanes per row with shuffles.
///
/// Rows per block come from the batch and the SM count: ceil(B / SMs) episodes (at least one, at most 64 rows),
/// so small batches put a block on each SM and large ones amortise each block's weight stream over 64 rows.
/// The mixer does the same with at most 32 episodes per block (TM = 1, two blocks per SM), and from 64 episodes
/// per SM on with 64 (TM = 4, one block of ~156 KB per SM): half the K-tile round trips and barriers per
/// episode, one pass per 64-wide hypernetwork layer instead of two, 4x fewer shared-memory loads per FMA.
///
/// Large-batch changes (after the first H200 run: forward 2.08 ms at B = 16384 and 33.7 ms at 262144, mixer
/// 3.89 ms at 262144, all slower than PyTorch): the 4-stage weight pipeline, the 8 x 4 warp layout and the wide
/// mixer blocks above. Expected: forward ~1.6-1.9x faster at B >= 16384 (shared-memory wavefronts per FMA down
/// ~40 %, K-tile latency hidden), mixer ~2x at 262144. Results are bit-identical to before: every output keeps
/// its k order; only which thread computes it changes.
///
/// Costs at the default shapes, N = 3 (FLOPs ~ 2 x 342k weights per agent row = 684 kFLOP/row):
///   B = 64: 192 rows, 0.13 GFLOP, 64 blocks of 4 rows -> 88 MB of L2 weight reads (about 14 us of one SM's
///     L2 bandwidth per block: latency-bound, expected ~30-40 us for the kernel);
///   B = 1024: 3072 rows, 2.1 GFLOP, 128 blocks of 24 rows -> 175 MB of L2 reads, about 16 MFLOP per SM
///     (~40 us at the FP32 peak, expected ~60-90 us);
///   B = 16384: 49k rows, 34 GFLOP, 768 blocks of 64 rows -> 1.05 GB of L2 reads, expected ~0.8-1.0 ms;
///   B = 262144: 786k rows, 538 GFLOP, 12288 blocks -> 16.8 GB of L2 reads (~1.2 TB/s over the run), FP32
///     bound: ~8 ms at the 67 TFLOP/s peak, expected ~12-16 ms.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "cuda_check.cuh"
#include "launch.hpp"

namespace toporoute::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRows = 64;          // agent rows per forward block (>= kQMixMaxAgents: one episode always fits)
constexpr int kMixMaxRows = 32;       // episodes per mixer block while B < kMixWideRows x SMs
constexpr int kMixWideRows = 64;      // episodes per mixer block from there on (TM = 4 at the default shapes)
constexpr int kKT = 16;               // weight rows per staged K-tile
constexpr int kStages = 4;            // staged K-tiles in flight or in use (accumulate's cp.async pipeline)
constexpr int kMaxColGroups = 32;     // 4-column groups per GEMM pass (128 columns)
constexpr int kLanesPerRow = 8;       // LayerNorm / mixer combine
constexpr std::size_t kDefaultSmem = 48 * 1024;
static_assert(kMaxRows >= kQMixMaxAgents, "one episode must fit a block");
static_assert(kThreads % 32 == 0 && kMixWideRows >= kMixMaxRows, "a wide mixer block holds more episodes");
static_assert(kStages >= 2 && kStages <= 8, "cp_wait_pipeline's immediate");

__host__ __device__ constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

/// Row stride of the feature-major buffers: R (a multiple of 4) or R + 4, whichever is 4 x odd.
__host__ __device__ constexpr int row_stride(int R) { return (R / 4) % 2 == 1 ? R : R + 4; }

/// Column groups per pass and passes of a GEMM with `rg` row groups and `cols` outputs (per gate).
struct Plan {
  int cg, passes;
};
__host__ __device__ inline Plan plan_gemm(int rg, int cols) {
  const int groups = (cols + 3) / 4;
  int cg = kThreads / rg;
  cg = cg < kMaxColGroups ? cg : kMaxColGroups;
  cg = cg < groups ? cg : groups;
  cg = cg < 1 ? 1 : cg;
  const int passes = (groups + cg - 1) / cg;
  return {(groups + passes - 1) / passes, passes};
}

/// Rows per thread tile: the one giving each thread fewer FMAs (passes x rows) on the typical output width, 4 on
/// a tie (fewer shared-memory loads per FMA). Small blocks get 1 (more threads busy), large ones 4.
int rows_per_thread(int R, std::int64_t typical_out) {
  const int cols = static_cast<int>(std::min<std::int64_t>(typical_out, 1 << 20));
  return plan_gemm(R / 4, cols).passes * 4 <= plan_gemm(R, cols).passes ? 4 : 1;
}

/// Floats of one staged weight tile for at most `gates` gates (a bound over every GEMM of the kernel).
int tile_floats(int rg, int gates) { return gates * kKT * 4 * std::min(kMaxColGroups, kThreads / rg); }

/// Everything a forward block needs, by value (kernels never see framework types).
struct ForwardParams {
  const float* w;
  QMixDeviceLayout L;
  int obs_dim, H, A, Hq, layers, adj_mode, self_loops;
  float ln_eps;
  QMixForwardArgs a;
  QMixForwardOut o;
  int group;  // episodes per block
  int R;      // rows of every buffer: group N rounded up to 4
  int rs;     // row stride of the buffers
  int uw;     // width of the multi-use buffer U: max(obs_dim, H, Hq)
  int hw;     // width of the two hidden buffers: max(H, A)
  int tile;   // floats of one weight tile buffer
};

struct MixParams {
  const float* w;
  QMixDeviceLayout L;
  int n_agents, S, M, Hh, b1_hidden;
  QMixMixArgs a;
  float* q_tot;
  int group;  // episodes per block (= R before rounding)
  int R, rs;
  int aw;   // width of region A: the state, then the second hypernetwork layer's outputs
  int ldy;  // width of Y: the first hypernetwork layer's outputs
  int tile;
};

// ------------------------------------------------------------------------------------------ staging

__device__ __forceinline__ void cp_async4(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0) : "memory");
#else
  *dst = valid ? __ldg(src) : 0.0f;
#endif
}

__device__ __forceinline__ void cp_async16(float* dst, const float* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
#else
  *reinterpret_cast<float4*>(dst) =
      valid ? __ldg(reinterpret_cast<const float4*>(src)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#endif
}

__device__ __forceinline__ void cp_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kStages - 2 committed groups of this thread are pending (the tiles still in flight).
__device__ __forceinline__ void cp_wait_pipeline() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2) : "memory");
#endif
}

/// Where a GEMM reads its weights: wt[k * ldw + g * goff + col] for gate g < G, k < K, col < cols.
struct WeightView {
  const float* wt;
  int ldw, goff, K, cols;
  bool vec;  // 16-byte copies: wt 16-byte aligned, ldw and goff multiples of 4 (then cols is too)
};

__host__ __device__ inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// tile[(g kKT + kk) cw + c] = wt[(k0 + kk) ldw + g goff + col0 + c], 0 past K or cols; cw a multiple of 4.
template <int G>
__device__ __forceinline__ void stage(float* tile, const WeightView& v, int k0, int col0, int cw) {
  if (v.vec) {
    const int q = cw / 4, n = G * kKT * q;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int c = i % q * 4, kk = i / q % kKT, g = i / (q * kKT);
      const int k = k0 + kk, col = col0 + c;
      const bool ok = k < v.K && col < v.cols;
      const float* src = ok ? v.wt + static_cast<std::size_t>(k) * v.ldw + g * v.goff + col : v.wt;
      cp_async16(tile + (g * kKT + kk) * cw + c, src, ok);
    }
  } else {
    const int n = G * kKT * cw;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int c = i % cw, kk = i / cw % kKT, g = i / (cw * kKT);
      const int k = k0 + kk, col = col0 + c;
      const bool ok = k < v.K && col < v.cols;
      const float* src = ok ? v.wt + static_cast<std::size_t>(k) * v.ldw + g * v.goff + col : v.wt;
      cp_async4(tile + (g * kKT + kk) * cw + c, src, ok);
    }
  }
}

// ------------------------------------------------------------------------------------------ GEMM core

/// A thread's place in a GEMM pass: rows r0 .. r0 + TM - 1, columns col0 + c .. + 3 of the pass.
struct Slot {
  int r0, c;
  bool active;
};

template <int TM, int G>
__device__ __forceinline__ void fma_step(const float* __restrict__ x, const float* __restrict__ w, int gate_stride,
                                         float (&acc)[G][TM][4]) {
  float xv[TM];
  if constexpr (TM == 4) {
    const float4 x4 = *reinterpret_cast<const float4*>(x);
    xv[0] = x4.x;
    xv[1] = x4.y;
    xv[2] = x4.z;
    xv[3] = x4.w;
  } else {
#pragma unroll
    for (int m = 0; m < TM; ++m) xv[m] = x[m];
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float4 w4 = *reinterpret_cast<const float4*>(w + g * gate_stride);
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      acc[g][m][0] = fmaf(xv[m], w4.x, acc[g][m][0]);
      acc[g][m][1] = fmaf(xv[m], w4.y, acc[g][m][1]);
      acc[g][m][2] = fmaf(xv[m], w4.z, acc[g][m][2]);
      acc[g][m][3] = fmaf(xv[m], w4.w, acc[g][m][3]);
    }
  }
}

/// acc[g][m][j] += sum_k X[k rs + r0 + m] wt[k, g, col0 + c + j] over k < v.K, the weights staged through
/// `tiles` (kStages buffers of `tile` floats: tile t lives in buffer t % kStages and is copied kStages - 1
/// iterations ahead, so the L2 latency of a copy is hidden behind kStages - 1 tiles of FMAs). Every thread of the
/// block must call it (it holds barriers); only active slots compute. Leaves the tile buffers free (ends with a
/// barrier, and every copy it committed has landed: the groups after tile T - 1 are empty).
template <int TM, int G>
__device__ __forceinline__ void accumulate(float* tiles, int tile, const WeightView& v, int col0, int cw,
                                           const float* X, int rs, const Slot& s, float (&acc)[G][TM][4]) {
  const int T = (v.K + kKT - 1) / kKT;
  const int gate_stride = kKT * cw;
  // the buffers are free here (the previous call, or the kernel's start): tiles 0 .. kStages - 2 go out now
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < T) stage<G>(tiles + t * tile, v, t * kKT, col0, cw);
    cp_commit();  // possibly empty: group t is tile t
  }
  for (int t = 0; t < T; ++t) {
    cp_wait_pipeline();  // kStages - 1 + t groups committed, at most kStages - 2 pending: tile t has landed
    // every thread's copies of tile t are visible, and every thread is done with tile t - 1 (iteration t - 1)
    __syncthreads();
    // tile t + kStages - 1 reuses the buffer of tile t - 1, which no thread reads any more
    const int ahead = t + kStages - 1;
    if (ahead < T) stage<G>(tiles + ahead % kStages * tile, v, ahead * kKT, col0, cw);
    cp_commit();  // possibly empty: group t + kStages - 1 is tile t + kStages - 1
    if (s.active) {
      const int k0 = t * kKT, kn = min(kKT, v.K - k0);
      const float* x = X + static_cast<std::size_t>(k0) * rs + s.r0;
      const float* w = tiles + t % kStages * tile + s.c;
      if (kn == kKT) {
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk) fma_step<TM, G>(x + kk * rs, w + kk * cw, gate_stride, acc);
      } else {
        for (int kk = 0; kk < kn; ++kk) fma_step<TM, G>(x + kk * rs, w + kk * cw, gate_stride, acc);
      }
    }
  }
  __syncthreads();  // the buffers of the last tiles are free for the next call
}

/// Thread -> (row group, column group) of a pass with rg x cg slots (rg cg <= kThreads). With 4-row tiles and
/// rg % 8 == 0, cg % 4 == 0, a warp takes 8 row groups x 4 column groups: per k it reads 32 consecutive floats of
/// x and 16 of each gate's weights (one shared-memory wavefront each) instead of 2 row groups x 16 column groups
/// (256 bytes of weights, two wavefronts per gate); shared-memory bandwidth is what bounds the big GEMMs. Which
/// thread owns an output changes nothing else: each output's k order is the same.
template <int TM>
__device__ __forceinline__ Slot slot_of(int rg, int cg) {
  const int item = threadIdx.x;
  if (TM == 4 && rg % 8 == 0 && cg % 4 == 0) {  // then rg cg is a multiple of 32: the active warps are full
    const int lane = item & 31, warp = item >> 5, wr = rg / 8;
    return {(warp % wr * 8 + (lane & 7)) * TM, (warp / wr * 4 + (lane >> 3)) * 4, item < rg * cg};
  }
  return {item / cg * TM, item % cg * 4, item < rg * cg};
}

/// Y[j rs + r] = act(b[j] + sum_k X[k rs + r] wt[k, j]) for r < R, j < out (a Linear; X and Y distinct).
/// Every thread of the block must call it.
template <int TM>
__device__ void linear(float* tiles, int tile, const float* w, const QMixDeviceLinear& d, const float* X, float* Y,
                       int R, int rs, bool relu) {
  const int out = static_cast<int>(d.out);
  const float* __restrict__ b = w + d.b;
  const WeightView v{w + d.w, out, 0, static_cast<int>(d.K), out, out % 4 == 0 && aligned16(w + d.w)};
  const int rg = R / TM;
  const Plan pl = plan_gemm(rg, out);
  const int cw = 4 * pl.cg;
  const Slot s = slot_of<TM>(rg, pl.cg);
  for (int pass = 0; pass < pl.passes; ++pass) {
    const int col0 = pass * cw;
    float acc[1][TM][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = col0 + s.c + j;
      const float bj = s.active && col < out ? __ldg(b + col) : 0.0f;
#pragma unroll
      for (int m = 0; m < TM; ++m) acc[0][m][j] = bj;
    }
    accumulate<TM, 1>(tiles, tile, v, col0, cw, X, rs, s, acc);
    if (s.active) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = col0 + s.c + j;
        if (col >= out) continue;
        float y[TM];
#pragma unroll
        for (int m = 0; m < TM; ++m) y[m] = relu ? fmaxf(acc[0][m][j], 0.0f) : acc[0][m][j];
        float* dst = Y + static_cast<std::size_t>(col) * rs + s.r0;
        if constexpr (TM == 4) {
          *reinterpret_cast<float4*>(dst) = make_float4(y[0], y[1], y[2], y[3]);
        } else {
#pragma unroll
          for (int m = 0; m < TM; ++m) dst[m] = y[m];
        }
      }
    }
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/// PyTorch GRUCell over the block's rows: Y = (1 - z) n + z h with x (Kx features) and h (H features; null:
/// a zero state). X, Hp and Y distinct. Every thread of the block must call it.
template <int TM>
__device__ void gru(float* tiles, int tile, const float* w, const QMixDeviceGru& g, int Kx, int H, const float* X,
                    const float* Hp, float* Y, int R, int rs) {
  const float* __restrict__ bih = w + g.bih;
  const float* __restrict__ bhh = w + g.bhh;
  const bool vec = H % 4 == 0;
  const WeightView vx{w + g.wih, 3 * H, H, Kx, H, vec && aligned16(w + g.wih)};
  const WeightView vh{w + g.whh, 3 * H, H, H, H, vec && aligned16(w + g.whh)};
  const int rg = R / TM;
  const Plan pl = plan_gemm(rg, H);
  const int cw = 4 * pl.cg;
  const Slot s = slot_of<TM>(rg, pl.cg);
  for (int pass = 0; pass < pl.passes; ++pass) {
    const int col0 = pass * cw;
    float acc[3][TM][4];  // r, z, n of x (then n of h)
    float ni[TM][4];
    float bhn[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = col0 + s.c + j;
      const bool ok = s.active && col < H;
      const float br = ok ? __ldg(bih + col) + __ldg(bhh + col) : 0.0f;
      const float bz = ok ? __ldg(bih + H + col) + __ldg(bhh + H + col) : 0.0f;
      const float bn = ok ? __ldg(bih + 2 * H + col) : 0.0f;
      bhn[j] = ok ? __ldg(bhh + 2 * H + col) : 0.0f;
#pragma unroll
      for (int m = 0; m < TM; ++m) {
        acc[0][m][j] = br;
        acc[1][m][j] = bz;
        acc[2][m][j] = bn;
      }
    }
    accumulate<TM, 3>(tiles, tile, vx, col0, cw, X, rs, s, acc);
#pragma unroll
    for (int m = 0; m < TM; ++m) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ni[m][j] = acc[2][m][j];
        acc[2][m][j] = bhn[j];
      }
    }
    if (Hp != nullptr) accumulate<TM, 3>(tiles, tile, vh, col0, cw, Hp, rs, s, acc);
    if (s.active) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = col0 + s.c + j;
        if (col >= H) continue;
        const std::size_t at = static_cast<std::size_t>(col) * rs + s.r0;
        float y[TM];
#pragma unroll
        for (int m = 0; m < TM; ++m) {
          const float rgate = sigmoid(acc[0][m][j]), zgate = sigmoid(acc[1][m][j]);
          const float n = tanhf(fmaf(rgate, acc[2][m][j], ni[m][j]));
          const float prev = Hp != nullptr ? Hp[at + m] : 0.0f;
          y[m] = fmaf(zgate, prev - n, n);
        }
        if constexpr (TM == 4) {
          *reinterpret_cast<float4*>(Y + at) = make_float4(y[0], y[1], y[2], y[3]);
        } else {
#pragma unroll
          for (int m = 0; m < TM; ++m) Y[at + m] = y[m];
        }
      }
    }
  }
}

// ------------------------------------------------------------------------------------------ row helpers

/// Sum over the kLanesPerRow lanes of a row (all 32 lanes of the warp must call it).
__device__ __forceinline__ float row_sum(float x) {
#pragma unroll
  for (int o = kLanesPerRow / 2; o > 0; o >>= 1) x += __shfl_xor_sync(detail::kFullMask, x, o);
  return x;
}

/// In-place LayerNorm over the H features of each of the R rows, kLanesPerRow lanes per row.
__device__ void layer_norm(float* X, int R, int rs, int H, const float* __restrict__ gamma,
                           const float* __restrict__ beta, float eps) {
  const int sub = static_cast<int>(threadIdx.x) % kLanesPerRow;
  for (int base = 0; base < R; base += kThreads / kLanesPerRow) {  // uniform trip count: shuffles are safe
    const int r = base + static_cast<int>(threadIdx.x) / kLanesPerRow;
    const bool ok = r < R;
    float s = 0.0f;
    if (ok) {
      for (int j = sub; j < H; j += kLanesPerRow) s += X[static_cast<std::size_t>(j) * rs + r];
    }
    const float mean = row_sum(s) / static_cast<float>(H);
    float v = 0.0f;
    if (ok) {
      for (int j = sub; j < H; j += kLanesPerRow) {
        const float d = X[static_cast<std::size_t>(j) * rs + r] - mean;
        v = fmaf(d, d, v);
      }
    }
    const float rstd = 1.0f / sqrtf(row_sum(v) / static_cast<float>(H) + eps);
    if (ok) {
      for (int j = sub; j < H; j += kLanesPerRow) {
        float* x = X + static_cast<std::size_t>(j) * rs + r;
        *x = fmaf((*x - mean) * rstd, __ldg(gamma + j), __ldg(beta + j));
      }
    }
  }
}

/// dst[d rs + r] = src[b, n, d] for the group's rows r < rows (b = b0 + r / N, n = r % N) and 0 for the
/// padding rows up to R; a non-finite element reports (which B + b) N + n. Tiles of 4 rows x 8 features per
/// warp: coalesced enough in global memory, free of bank conflicts in shared memory.
__device__ void load_rows(const float* src, std::int64_t sb, std::int64_t sn, std::int64_t sd, int width,
                          int which, std::int64_t B, std::int64_t N, std::int64_t b0, int rows, int R, float* dst,
                          int rs, const ErrorSink& err) {
  const int wt = (width + 7) / 8, n_items = R / 4 * wt * 32;
  for (int i = threadIdx.x; i < n_items; i += kThreads) {
    const int lane = i & 31, t = i >> 5;
    const int r = t / wt * 4 + (lane >> 3), d = t % wt * 8 + (lane & 7);
    if (d >= width) continue;
    float v = 0.0f;
    if (r < rows) {
      const std::int64_t b = b0 + r / N, n = r % N;
      v = src[b * sb + n * sn + d * sd];
      if (!isfinite(v)) detail::report(err, static_cast<unsigned long long>((which * B + b) * N + n));
    }
    dst[static_cast<std::size_t>(d) * rs + r] = v;
  }
}

__device__ __forceinline__ bool agent_active(const QMixForwardArgs& a, std::int64_t b, std::int64_t n) {
  return a.active == nullptr || a.active[b * a.act_sb + n * a.act_sn] != 0;
}

__device__ __forceinline__ bool edge(const QMixForwardArgs& a, std::int64_t b, std::int64_t src, std::int64_t dst) {
  return a.adj[b * a.adj_sb + src * a.adj_sr + dst * a.adj_sc] != 0;
}

/// out[(b0 N + r) width + j] = active ? src[j rs + r] : 0 for r < rows, j < width (C-contiguous output).
__device__ void store_rows(const QMixForwardArgs& a, const float* src, int width, float* out, std::int64_t b0,
                           int rows, int rs) {
  const std::int64_t N = a.N;
  const int wt = (width + 7) / 8, n_items = (rows + 3) / 4 * wt * 32;
  for (int i = threadIdx.x; i < n_items; i += kThreads) {
    const int lane = i & 31, t = i >> 5;
    const int r = t / wt * 4 + (lane >> 3), j = t % wt * 8 + (lane & 7);
    if (r >= rows || j >= width) continue;
    const std::int64_t b = b0 + r / N, n = r % N;
    out[(b0 * N + r) * width + j] = agent_active(a, b, n) ? src[static_cast<std::size_t>(j) * rs + r] : 0.0f;
  }
}

// ------------------------------------------------------------------------------------------ kernels

template <int TM>
__global__ void __launch_bounds__(kThreads, 1) qmix_forward_kernel(const ForwardParams p, const ErrorSink err) {
  extern __shared__ __align__(16) unsigned char smem[];
  const QMixForwardArgs& a = p.a;
  const int N = static_cast<int>(a.N), H = p.H, R = p.R, rs = p.rs;
  auto* nbr = reinterpret_cast<unsigned long long*>(smem);
  float* tiles = reinterpret_cast<float*>(nbr + R);  // R * 8 bytes: a multiple of 32
  float* U = tiles + kStages * p.tile;
  float* buf0 = U + static_cast<std::size_t>(p.uw) * rs;
  float* buf1 = buf0 + static_cast<std::size_t>(p.hw) * rs;
  const std::int64_t groups = (a.B + p.group - 1) / p.group;
  for (std::int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const std::int64_t b0 = grp * p.group;
    const int rows = static_cast<int>(a.B - b0 < p.group ? a.B - b0 : p.group) * N;
    for (int r = threadIdx.x; r < R; r += kThreads) nbr[r] = 0;  // padding rows keep no neighbours
    load_rows(a.obs, a.obs_sb, a.obs_sn, a.obs_sd, p.obs_dim, 0, a.B, N, b0, rows, R, U, rs, err);
    __syncthreads();
    // a thread per (row, candidate): the byte loads are independent; read next after the input Linear's barriers
    for (int item = threadIdx.x; item < rows * N; item += kThreads) {
      const int r = item / N, j = item % N, i = r % N;
      const std::int64_t b = b0 + r / N;
      bool e = p.self_loops && i == j;
      if (!e && p.adj_mode != static_cast<int>(QMixAdjMode::out_rows)) e = edge(a, b, j, i);
      if (!e && p.adj_mode != static_cast<int>(QMixAdjMode::in)) e = edge(a, b, i, j);
      if (e && agent_active(a, b, i) && agent_active(a, b, j)) atomicOr(nbr + r, 1ull << j);
    }
    float* Hs = buf0;  // the node states
    float* Mb = buf1;  // messages, then the GRUCell's output
    linear<TM>(tiles, p.tile, p.w, p.L.input, U, Hs, R, rs, true);
    __syncthreads();
    for (int l = 0; l < p.layers; ++l) {
      const std::size_t base = p.L.layer0 + static_cast<std::size_t>(l) * p.L.layer_stride;
      QMixDeviceLinear msg = p.L.message;
      msg.w += base;
      msg.b += base;
      QMixDeviceGru upd = p.L.update;
      upd.wih += base;
      upd.whh += base;
      upd.bih += base;
      upd.bhh += base;
      linear<TM>(tiles, p.tile, p.w, msg, Hs, Mb, R, rs, true);
      __syncthreads();
      for (int item = threadIdx.x; item < R * H; item += kThreads) {  // neighbour mean -> U
        const int r = item % R, j = item / R, e0 = r / N * N;
        unsigned long long mask = nbr[r];
        const int cnt = __popcll(mask);
        const float* m = Mb + static_cast<std::size_t>(j) * rs + e0;
        float acc = 0.0f;
        while (mask != 0) {
          const int t = __ffsll(static_cast<long long>(mask)) - 1;
          mask &= mask - 1;
          acc += m[t];
        }
        U[static_cast<std::size_t>(j) * rs + r] = cnt > 0 ? acc / static_cast<float>(cnt) : 0.0f;
      }
      __syncthreads();
      gru<TM>(tiles, p.tile, p.w, upd, H, H, U, Hs, Mb, R, rs);
      __syncthreads();
      layer_norm(Mb, R, rs, H, p.w + p.L.gamma, p.w + p.L.beta, p.ln_eps);
      __syncthreads();
      float* t = Hs;
      Hs = Mb;
      Mb = t;
    }
    if (a.hidden != nullptr) {  // the memory's state -> U (U's messages are spent)
      load_rows(a.hidden, a.hid_sb, a.hid_sn, a.hid_sd, H, 1, a.B, N, b0, rows, R, U, rs, err);
      __syncthreads();
    }
    gru<TM>(tiles, p.tile, p.w, p.L.rnn, H, H, Hs, a.hidden != nullptr ? U : nullptr, Mb, R, rs);
    __syncthreads();
    linear<TM>(tiles, p.tile, p.w, p.L.head0, Mb, U, R, rs, true);
    __syncthreads();
    linear<TM>(tiles, p.tile, p.w, p.L.head2, U, Hs, R, rs, false);
    __syncthreads();
    store_rows(a, Mb, H, p.o.hidden, b0, rows, rs);
    store_rows(a, Hs, p.A, p.o.q, b0, rows, rs);
    __syncthreads();  // the next group reuses the buffers
  }
  detail::finish(err);
}

template <int TM>
__global__ void __launch_bounds__(kThreads, 1) qmix_mix_kernel(const MixParams p, const ErrorSink err) {
  extern __shared__ __align__(16) unsigned char smem[];
  const QMixMixArgs& a = p.a;
  const int R = p.R, rs = p.rs, n = p.n_agents, M = p.M, Hh = p.Hh;
  float* tiles = reinterpret_cast<float*>(smem);
  float* A = tiles + kStages * p.tile;  // the state; then W1 (n M), W2 (M), B2 (1) and, with b1_hidden, B1 (M)
  float* Y = A + static_cast<std::size_t>(p.aw) * rs;  // hidden w1 | w2 | b2 (Hh each) | b1 (Hh or final M)
  float* Qt = Y + static_cast<std::size_t>(p.ldy) * rs;
  auto at = [rs](float* base, int feature) { return base + static_cast<std::size_t>(feature) * rs; };
  const std::int64_t groups = (a.B + p.group - 1) / p.group;
  for (std::int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const std::int64_t b0 = grp * p.group;
    const int rows = static_cast<int>(a.B - b0 < p.group ? a.B - b0 : p.group);
    load_rows(a.q_taken, a.q_sb, 0, a.q_sa, n, 0, a.B, 1, b0, rows, R, Qt, rs, err);
    load_rows(a.state, a.s_sb, 0, a.s_sd, p.S, 1, a.B, 1, b0, rows, R, A, rs, err);
    __syncthreads();
    linear<TM>(tiles, p.tile, p.w, p.L.w1a, A, at(Y, 0), R, rs, true);
    linear<TM>(tiles, p.tile, p.w, p.L.w2a, A, at(Y, Hh), R, rs, true);
    linear<TM>(tiles, p.tile, p.w, p.L.b2a, A, at(Y, 2 * Hh), R, rs, true);
    linear<TM>(tiles, p.tile, p.w, p.L.b1a, A, at(Y, 3 * Hh), R, rs, p.b1_hidden != 0);
    __syncthreads();
    linear<TM>(tiles, p.tile, p.w, p.L.w1b, at(Y, 0), at(A, 0), R, rs, false);
    linear<TM>(tiles, p.tile, p.w, p.L.w2b, at(Y, Hh), at(A, n * M), R, rs, false);
    linear<TM>(tiles, p.tile, p.w, p.L.b2b, at(Y, 2 * Hh), at(A, n * M + M), R, rs, false);
    if (p.b1_hidden) linear<TM>(tiles, p.tile, p.w, p.L.b1b, at(Y, 3 * Hh), at(A, n * M + M + 1), R, rs, false);
    __syncthreads();
    const float* B1 = p.b1_hidden ? at(A, n * M + M + 1) : at(Y, 3 * Hh);
    const float* W2 = at(A, n * M);
    const float* B2 = at(A, n * M + M);
    const int sub = static_cast<int>(threadIdx.x) % kLanesPerRow;
    for (int base = 0; base < R; base += kThreads / kLanesPerRow) {  // uniform trip count: shuffles are safe
      const int r = base + static_cast<int>(threadIdx.x) / kLanesPerRow;
      float part = 0.0f;
      if (r < rows) {
        for (int m = sub; m < M; m += kLanesPerRow) {
          float pre = B1[static_cast<std::size_t>(m) * rs + r];
          for (int ag = 0; ag < n; ++ag) {
            pre = fmaf(Qt[static_cast<std::size_t>(ag) * rs + r],
                       fabsf(A[static_cast<std::size_t>(ag * M + m) * rs + r]), pre);
          }
          const float hid = pre > 0.0f ? pre : expm1f(pre);
          part = fmaf(hid, fabsf(W2[static_cast<std::size_t>(m) * rs + r]), part);
        }
      }
      part = row_sum(part);
      if (sub == 0 && r < rows) p.q_tot[b0 + r] = part + B2[r];
    }
    __syncthreads();  // the next group reuses the buffers
  }
  detail::finish(err);
}

// ------------------------------------------------------------------------------------------ launchers

/// The current device, its SM count and its opt-in shared memory limit per block.
struct DeviceLimits {
  int device = 0, sms = 1, smem = 0;
};
Status device_limits(DeviceLimits* d) {
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(cudaGetDevice(&d->device), "cudaGetDevice"));
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
      cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, d->device), "cudaDeviceGetAttribute"));
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
      cudaDeviceGetAttribute(&d->smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, d->device),
      "cudaDeviceGetAttribute"));
  d->sms = std::max(d->sms, 1);
  return Status::success();
}

/// Lets `Kernel` use up to the device's opt-in limit of dynamic shared memory (once per device and kernel: the
/// attribute only caps, so every caller sets the same value and concurrent first calls are harmless).
template <auto Kernel>
Status allow_smem(std::size_t bytes, int device, int limit) {
  static std::atomic<unsigned long long> done{0};  // bit d: set on device d (< 64)
  if (bytes <= kDefaultSmem) return Status::success();
  const unsigned long long bit = device >= 0 && device < 64 ? 1ull << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return Status::success();
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
      cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit), "cudaFuncSetAttribute"));
  done.fetch_or(bit, std::memory_order_release);
  return Status::success();
}

Status too_big(const char* what, std::size_t bytes, int limit) {
  return Status::error(StatusCode::unsupported, "params",
                       std::string(what) + " needs " + std::to_string(bytes) +
                           " bytes of shared memory per block at these shapes; this GPU has " +
                           std::to_string(limit) + " (use backend='cpu')");
}

unsigned grid_for(std::int64_t groups) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(groups, detail::kMaxGrid)));
}

/// Launches K4 (4 rows per thread, when `four`) or K1 over `groups` blocks with `bytes` of dynamic shared memory
/// (allowed first) on `stream`, marks the call launched and returns the launch status named `name`.
template <auto K4, auto K1, class Params>
Status launch_rows(bool four, const Params& p, std::int64_t groups, std::size_t bytes, const DeviceLimits& dev,
                   const ErrorSink& err, void* stream, const char* name) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (four) {
    TOPOROUTE_RETURN_IF_ERROR(allow_smem<K4>(bytes, dev.device, dev.smem));
    K4<<<grid_for(groups), kThreads, bytes, s>>>(p, err);
  } else {
    TOPOROUTE_RETURN_IF_ERROR(allow_smem<K1>(bytes, dev.device, dev.smem));
    K1<<<grid_for(groups), kThreads, bytes, s>>>(p, err);
  }
  if (err.launched != nullptr) *err.launched = true;
  return detail::launch_status(name);
}

/// Episodes per block: enough blocks for every SM, at most max_rows rows, never below one episode.
int group_for(std::int64_t B, std::int64_t N, int sms, int max_rows) {
  const std::int64_t cap = std::max<std::int64_t>(1, max_rows / N);
  const std::int64_t want = (B + sms - 1) / sms;
  return static_cast<int>(std::max<std::int64_t>(1, std::min(want, cap)));
}

/// Fills the forward's tiling for `group` episodes per block and returns its shared memory bytes.
std::size_t forward_tiling(ForwardParams* p, int group, int N) {
  p->group = group;
  p->R = round_up(group * N, 4);
  p->rs = row_stride(p->R);
  const int tm = rows_per_thread(p->R, p->H);
  p->tile = tile_floats(p->R / tm, 3);
  return static_cast<std::size_t>(p->R) * sizeof(unsigned long long) +
         sizeof(float) * (kStages * static_cast<std::size_t>(p->tile) +
                          static_cast<std::size_t>(p->rs) * (p->uw + 2 * static_cast<std::size_t>(p->hw)));
}

std::size_t mix_tiling(MixParams* p, int group) {
  p->group = group;
  p->R = round_up(group, 4);
  p->rs = row_stride(p->R);
  const int tm = rows_per_thread(p->R, p->Hh);
  p->tile = tile_floats(p->R / tm, 1);
  return sizeof(float) * (kStages * static_cast<std::size_t>(p->tile) +
                          static_cast<std::size_t>(p->rs) * (p->aw + p->ldy + static_cast<std::size_t>(p->n_agents)));
}

}  // namespace

Status launch_qmix_forward(const QMixDeviceWeights& w, const QMixForwardArgs& a, const QMixForwardOut& o,
                           const ErrorSink& err, void* stream) {
  const QMixConfig& c = w.config();
  if (a.B < 0 || a.N < 0) return Status::error(StatusCode::invalid_argument, "obs", "qmix: B and N must be >= 0");
  if (a.N > kQMixMaxAgents) {
    return Status::error(StatusCode::unsupported, "obs",
                         "the CUDA qmix kernel supports at most " + std::to_string(kQMixMaxAgents) +
                             " agents per episode; got N = " + std::to_string(a.N) + " (use backend='cpu')");
  }
  if (a.B == 0 || a.N == 0) return Status::success();
  if (a.obs == nullptr || a.adj == nullptr || o.q == nullptr || o.hidden == nullptr || err.word == nullptr) {
    return Status::error(StatusCode::invalid_argument, "", "qmix: null device pointer");
  }
  ForwardParams p{};
  p.w = w.data();
  p.L = w.layout();
  p.obs_dim = static_cast<int>(c.obs_dim);
  p.H = static_cast<int>(c.hidden);
  p.A = static_cast<int>(c.n_actions);
  p.Hq = static_cast<int>(c.head_hidden);
  p.layers = static_cast<int>(c.gnn_layers);
  p.adj_mode = static_cast<int>(c.adj_mode);
  p.self_loops = c.self_loops ? 1 : 0;
  p.ln_eps = c.ln_eps;
  p.a = a;
  p.o = o;
  p.uw = std::max({p.obs_dim, p.H, p.Hq});
  p.hw = std::max(p.H, p.A);
  const int N = static_cast<int>(a.N);
  DeviceLimits dev;
  TOPOROUTE_RETURN_IF_ERROR(device_limits(&dev));
  const int limit = dev.smem;
  int group = group_for(a.B, N, dev.sms, kMaxRows);
  std::size_t bytes = forward_tiling(&p, group, N);
  while (bytes > static_cast<std::size_t>(limit) && group > 1) bytes = forward_tiling(&p, --group, N);
  if (bytes > static_cast<std::size_t>(limit)) return too_big("the CUDA qmix forward", bytes, limit);
  const std::int64_t groups = (a.B + p.group - 1) / p.group;
  const bool four = rows_per_thread(p.R, p.H) == 4;
  return launch_rows<qmix_forward_kernel<4>, qmix_forward_kernel<1>>(four, p, groups, bytes, dev, err, stream,
                                                                     "qmix_forward_kernel");
}

Status launch_qmix_mix(const QMixDeviceWeights& w, const QMixMixArgs& a, float* q_tot, const ErrorSink& err,
                       void* stream) {
  const QMixConfig& c = w.config();
  if (!w.has_mixer()) {
    return Status::error(StatusCode::invalid_argument, "params",
                         "these qmix weights hold no mixer (an inference-only checkpoint)");
  }
  if (a.B < 0) return Status::error(StatusCode::invalid_argument, "q_taken", "qmix_mix: B must be >= 0");
  if (a.B == 0) return Status::success();
  if (a.q_taken == nullptr || a.state == nullptr || q_tot == nullptr || err.word == nullptr) {
    return Status::error(StatusCode::invalid_argument, "", "qmix_mix: null device pointer");
  }
  MixParams p{};
  p.w = w.data();
  p.L = w.layout();
  p.n_agents = static_cast<int>(c.n_agents);
  p.S = static_cast<int>(c.state_dim);
  p.M = static_cast<int>(c.mix_hidden);
  p.Hh = static_cast<int>(c.hyper_hidden);
  p.b1_hidden = c.b1_hidden ? 1 : 0;
  p.a = a;
  p.q_tot = q_tot;
  p.aw = std::max(p.S, (p.n_agents + 1 + p.b1_hidden) * p.M + 1);
  p.ldy = 3 * p.Hh + (p.b1_hidden ? p.Hh : p.M);
  DeviceLimits dev;
  TOPOROUTE_RETURN_IF_ERROR(device_limits(&dev));
  const int limit = dev.smem;
  // Below kMixWideRows episodes per SM the blocks stay small (a block per SM, two resident per SM); from there on
  // every block is wide: 64 episodes take 4-row tiles (TM = 4 at the default shapes), so each weight K-tile's
  // L2 round trip and barrier serve twice the episodes and a pass covers all 64 columns of a hypernetwork layer.
  const int max_rows = a.B >= static_cast<std::int64_t>(kMixWideRows) * dev.sms ? kMixWideRows : kMixMaxRows;
  int group = group_for(a.B, 1, dev.sms, max_rows);
  std::size_t bytes = mix_tiling(&p, group);
  while (bytes > static_cast<std::size_t>(limit) && group > 1) bytes = mix_tiling(&p, --group);
  if (bytes > static_cast<std::size_t>(limit)) return too_big("the CUDA qmix mixer", bytes, limit);
  const std::int64_t groups = (a.B + p.group - 1) / p.group;
  const bool four = rows_per_thread(p.R, p.Hh) == 4;
  return launch_rows<qmix_mix_kernel<4>, qmix_mix_kernel<1>>(four, p, groups, bytes, dev, err, stream,
                                                             "qmix_mix_kernel");
}

}  // namespace toporoute::cuda
