/// \file toposort.cu
/// Greedy topological order with cycle breaking on the GPU; semantics are
/// python/toporoute/backends/reference.py::toposort.
///
/// One warp per graph. For N <= 64 every node set is a 64-bit mask and each lane keeps the in- and out-edge
/// masks of its nodes (lane l owns nodes l and l + 32) in registers: a step is a popcount per node and a
/// warp argmin, O(N) steps of O(1) warp instructions. Larger graphs (N <= 2048) keep per-node state in
/// shared memory and read the adjacency from global memory: O(N^2) per graph unweighted, O(N^3) worst case
/// weighted. Removed edges are written at the end from the placement positions: j -> v is removed iff j was
/// placed after v.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_check.cuh"
#include "launch.hpp"

namespace toporoute::cuda {
namespace {

using detail::kFullMask;

constexpr int kSmallN = 64;
constexpr int kSmallWarps = 4;
constexpr std::int64_t kMaxN = 2048;  // bounds the generic kernel's shared memory (16 bytes per node)

__device__ __forceinline__ bool node_active(const ToposortArgs& a, std::int64_t b, int v) {
  return a.active == nullptr || a.active[b * a.a_sb + v * a.a_sn] != 0;
}

__device__ __forceinline__ bool adj_entry(const ToposortArgs& a, std::int64_t b, int src, int dst) {
  return a.adj[b * a.adj_sb + src * a.adj_sr + dst * a.adj_sc] != 0;
}

__device__ __forceinline__ double weight(const ToposortArgs& a, std::int64_t b, int src, int dst) {
  return static_cast<double>(a.weights[b * a.w_sb + src * a.w_sr + dst * a.w_sc]);
}

__device__ __forceinline__ std::uint64_t ballot64(bool low, bool high) {
  return static_cast<std::uint64_t>(__ballot_sync(kFullMask, low)) |
         (static_cast<std::uint64_t>(__ballot_sync(kFullMask, high)) << 32);
}

// Weighted key of one node: in float64, over its in-neighbours in `sources` in ascending index order, the
// summation order every backend uses so the sums are bit-identical.
__device__ double weight_sum(const ToposortArgs& a, std::int64_t b, std::uint64_t sources, int v) {
  double s = 0.0;
  while (sources != 0) {
    const int j = __ffsll(static_cast<long long>(sources)) - 1;
    sources &= sources - 1;
    s += weight(a, b, j, v);
  }
  return s;
}

// Lexicographic (sum, node) minimum; weights are >= 0, so no sum is NaN or -0.
__device__ __forceinline__ void consider(double s, int v, double& best_s, int& best_v) {
  if (s < best_s || (s == best_s && v < best_v)) {
    best_s = s;
    best_v = v;
  }
}

__device__ __forceinline__ void warp_argmin(double& best_s, int& best_v) {
  for (int o = 16; o > 0; o >>= 1) {
    const double s = __shfl_xor_sync(kFullMask, best_s, o);
    const int v = __shfl_xor_sync(kFullMask, best_v, o);
    consider(s, v, best_s, best_v);
  }
}

// N <= 64. Per graph: in_m / out_m are the in-edge sources and out-edge targets of node v_m = lane + 32 m;
// rrow_m the targets of v_m's removed out-edges. All loops and branches that reach a shuffle are warp-uniform.
__global__ void __launch_bounds__(kSmallWarps * 32) toposort_small_kernel(const ToposortArgs a, const ToposortOut o) {
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  const int N = static_cast<int>(a.N);
  const int v0 = lane, v1 = lane + 32;
  const bool own0 = v0 < N, own1 = v1 < N;
  const std::uint64_t all = N == 64 ? ~0ull : (1ull << N) - 1;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * warps;

  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5); b < a.B; b += stride) {
    const bool act0 = own0 && node_active(a, b, v0);
    const bool act1 = own1 && node_active(a, b, v1);
    const std::uint64_t act = ballot64(act0, act1);

    std::uint64_t in0 = 0, in1 = 0, out0 = 0, out1 = 0;
    for (int j = 0; j < N; ++j) {
      const bool aj = (act >> j) & 1;
      const bool e0 = aj && act0 && j != v0 && adj_entry(a, b, j, v0);
      const bool e1 = aj && act1 && j != v1 && adj_entry(a, b, j, v1);
      in0 |= static_cast<std::uint64_t>(e0) << j;
      in1 |= static_cast<std::uint64_t>(e1) << j;
      const std::uint64_t row = ballot64(e0, e1);
      if (lane == (j & 31)) {
        if (j < 32) {
          out0 = row;
        } else {
          out1 = row;
        }
      }
    }

    const int n_active = __popcll(act);
    std::uint64_t unplaced = act;
    int lvl0 = -1, lvl1 = -1, pos0 = -1, pos1 = -1;
    std::uint64_t rrow0 = 0, rrow1 = 0;
    for (int t = 0; t < n_active; ++t) {
      const bool open0 = own0 && ((unplaced >> v0) & 1);
      const bool open1 = own1 && ((unplaced >> v1) & 1);
      // unweighted key (count of in-edges from unplaced nodes, index) packed as count << 8 | index
      unsigned key = UINT_MAX;
      if (open0) key = min(key, (static_cast<unsigned>(__popcll(in0 & unplaced)) << 8) | v0);
      if (open1) key = min(key, (static_cast<unsigned>(__popcll(in1 & unplaced)) << 8) | v1);
      key = detail::warp_min(key);
      int vs = static_cast<int>(key & 0xff);
      if (a.weights != nullptr && (key >> 8) != 0) {
        // no source left: the smallest weight sum of in-edges from unplaced nodes (all counts are > 0)
        double best_s = INFINITY;
        int best_v = INT_MAX;
        if (open0) consider(weight_sum(a, b, in0 & unplaced, v0), v0, best_s, best_v);
        if (open1) consider(weight_sum(a, b, in1 & unplaced, v1), v1, best_s, best_v);
        warp_argmin(best_s, best_v);
        if (best_v < N) vs = best_v;  // else NaN weights slipped past validation: keep the unweighted pick
      }
      const std::uint64_t placed = act & ~unplaced;
      int lv = -1;
      if (own0 && ((placed >> v0) & 1) && ((out0 >> vs) & 1)) lv = max(lv, lvl0);
      if (own1 && ((placed >> v1) & 1) && ((out1 >> vs) & 1)) lv = max(lv, lvl1);
      lv = detail::warp_max(lv) + 1;
      if (open0 && ((out0 >> vs) & 1)) rrow0 |= 1ull << vs;
      if (open1 && ((out1 >> vs) & 1)) rrow1 |= 1ull << vs;
      if (vs == v0) {
        lvl0 = lv;
        pos0 = t;
      }
      if (vs == v1) {
        lvl1 = lv;
        pos1 = t;
      }
      unplaced &= ~(1ull << vs);
    }

    // inactive nodes follow in index order
    const std::uint64_t inactive = all & ~act;
    if (own0 && !act0) pos0 = n_active + __popcll(inactive & ((1ull << v0) - 1));
    if (own1 && !act1) pos1 = n_active + __popcll(inactive & ((1ull << v1) - 1));
    std::int32_t* order_b = o.order + b * N;
    std::int32_t* level_b = o.level + b * N;
    if (own0) {
      order_b[pos0] = v0;
      level_b[v0] = lvl0;
    }
    if (own1) {
      order_b[pos1] = v1;
      level_b[v1] = lvl1;
    }

    // removed[b, j, v] in flat order so consecutive lanes write consecutive bytes; row j's mask comes from
    // its owner lane.
    std::uint8_t* removed_b = o.removed + b * N * N;
    const int nn = N * N;
    for (int base = 0; base < nn; base += 32) {
      const int p = base + lane;
      const bool in_range = p < nn;
      const int j = in_range ? p / N : 0;
      const int v = in_range ? p - j * N : 0;
      const std::uint64_t r0 = __shfl_sync(kFullMask, rrow0, j & 31);
      const std::uint64_t r1 = __shfl_sync(kFullMask, rrow1, j & 31);
      const std::uint64_t r = j < 32 ? r0 : r1;
      if (in_range) removed_b[p] = static_cast<std::uint8_t>((r >> v) & 1);
    }
    const bool cyclic = __any_sync(kFullMask, (rrow0 | rrow1) != 0);
    if (lane == 0) o.is_dag[b] = cyclic ? 0 : 1;
  }
}

// Any N <= kMaxN, one warp per block. Shared memory (ints): act[N], count[N] (in-edges from unplaced nodes),
// pos[N] (placement position, -1 while unplaced), level[N]. Lane l owns nodes l, l + 32, ...: it alone writes
// their act/count entries; pos/level are written by the owner of the placed node between __syncwarp()s.
__global__ void __launch_bounds__(32) toposort_generic_kernel(const ToposortArgs a, const ToposortOut o) {
  extern __shared__ int tsm[];
  const int lane = threadIdx.x & 31;
  const int N = static_cast<int>(a.N);
  int* s_act = tsm;
  int* s_count = tsm + N;
  int* s_pos = tsm + 2 * N;
  int* s_level = tsm + 3 * N;

  for (std::int64_t b = blockIdx.x; b < a.B; b += gridDim.x) {
    for (int v = lane; v < N; v += 32) {
      s_act[v] = node_active(a, b, v);
      s_pos[v] = -1;
      s_level[v] = -1;
    }
    __syncwarp();
    const auto edge = [&](int src, int dst) {
      return src != dst && s_act[src] && s_act[dst] && adj_entry(a, b, src, dst);
    };
    int my_active = 0;
    for (int v = lane; v < N; v += 32) {
      int c = 0;
      if (s_act[v]) {
        for (int j = 0; j < N; ++j) c += edge(j, v);
      }
      s_count[v] = c;
      my_active += s_act[v];
    }
    const int n_active = detail::warp_sum(my_active);

    for (int t = 0; t < n_active; ++t) {
      unsigned long long key = ULLONG_MAX;
      for (int v = lane; v < N; v += 32) {
        if (s_act[v] && s_pos[v] < 0) {
          key = min(key, (static_cast<unsigned long long>(s_count[v]) << 32) | static_cast<unsigned>(v));
        }
      }
      key = detail::warp_min(key);
      int vs = static_cast<int>(key & 0xffffffffu);
      if (a.weights != nullptr && (key >> 32) != 0) {
        double best_s = INFINITY;
        int best_v = INT_MAX;
        for (int v = lane; v < N; v += 32) {
          if (!s_act[v] || s_pos[v] >= 0) continue;
          double s = 0.0;
          for (int j = 0; j < N; ++j) {  // ascending sources: the shared summation order
            if (s_pos[j] < 0 && edge(j, v)) s += weight(a, b, j, v);
          }
          consider(s, v, best_s, best_v);
        }
        warp_argmin(best_s, best_v);
        if (best_v < N) vs = best_v;
      }
      int lv = -1;
      for (int j = lane; j < N; j += 32) {
        if (s_pos[j] >= 0 && edge(j, vs)) lv = max(lv, s_level[j]);
      }
      lv = detail::warp_max(lv) + 1;
      for (int w = lane; w < N; w += 32) {
        if (s_pos[w] < 0 && edge(vs, w)) --s_count[w];
      }
      __syncwarp();  // every lane has read pos[vs] for this step
      if (lane == (vs & 31)) {
        s_pos[vs] = t;
        s_level[vs] = lv;
      }
      __syncwarp();
    }

    std::int32_t* order_b = o.order + b * N;
    int inactive_before = 0;
    for (int base = 0; base < N; base += 32) {
      const int v = base + lane;
      const bool idle = v < N && !s_act[v];
      const unsigned mask = __ballot_sync(kFullMask, idle);
      if (idle) order_b[n_active + inactive_before + __popc(mask & ((1u << lane) - 1))] = v;
      inactive_before += __popc(mask);
    }
    for (int v = lane; v < N; v += 32) {
      if (s_act[v]) order_b[s_pos[v]] = v;
      o.level[b * N + v] = s_level[v];
    }
    std::uint8_t* removed_b = o.removed + b * N * N;
    bool cyclic = false;
    for (int p = lane; p < N * N; p += 32) {
      const int j = p / N, v = p - j * N;
      const bool r = edge(j, v) && s_pos[j] > s_pos[v];
      removed_b[p] = r ? 1 : 0;
      cyclic |= r;
    }
    cyclic = __any_sync(kFullMask, cyclic);
    if (lane == 0) o.is_dag[b] = cyclic ? 0 : 1;
    __syncwarp();  // shared memory is reused by the next graph
  }
}

// The reference's weight checks on the device: every non-finite weight reports ((0 * B + b) * N + src) * N + dst
// and every negative one ((1 * B + b) * N + src) * N + dst, so the final word is the first non-finite weight
// in C order, else the first negative one (the reference's order of checks).
__global__ void __launch_bounds__(256) toposort_weights_kernel(const ToposortArgs a, const ErrorSink err) {
  const std::int64_t N = a.N, total = a.B * N * N;
  const auto B = static_cast<unsigned long long>(a.B);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::int64_t b = i / (N * N), src = i / N % N, dst = i % N;
    const float w = a.weights[b * a.w_sb + src * a.w_sr + dst * a.w_sc];
    const auto cell = static_cast<unsigned long long>(i);
    if (!isfinite(w)) {
      detail::report(err, cell);
    } else if (w < 0.0f) {
      detail::report(err, B * static_cast<unsigned long long>(N * N) + cell);
    }
  }
  detail::finish(err);
}

}  // namespace

Status launch_toposort(const ToposortArgs& a, const ToposortOut& o, const ErrorSink& err, void* stream) {
  if (a.B < 0 || a.N < 0) {
    return Status::error(StatusCode::invalid_argument, "adj", "toposort: B and N must be >= 0");
  }
  if (a.N > kMaxN) {
    return Status::error(StatusCode::unsupported, "adj",
                         "the CUDA toposort kernel supports at most " + std::to_string(kMaxN) +
                             " nodes per graph; got N = " + std::to_string(a.N) + " (use backend='cpu')");
  }
  if (a.B == 0) return Status::success();
  const auto s = static_cast<cudaStream_t>(stream);
  if (o.is_dag == nullptr) return Status::error(StatusCode::invalid_argument, "", "toposort: null device pointer");
  if (a.N == 0) {
    return detail::status_from_cuda(cudaMemsetAsync(o.is_dag, 1, static_cast<std::size_t>(a.B), s),
                                    "cudaMemsetAsync");
  }
  if (a.adj == nullptr || o.order == nullptr || o.level == nullptr || o.removed == nullptr) {
    return Status::error(StatusCode::invalid_argument, "", "toposort: null device pointer");
  }
  if (a.weights != nullptr && err.word != nullptr) {
    const std::int64_t cells = a.B * a.N * a.N;
    const auto grid = static_cast<unsigned>(std::min<std::int64_t>((cells + 255) / 256, 4096));
    toposort_weights_kernel<<<grid, 256, 0, s>>>(a, err);
    TOPOROUTE_RETURN_IF_ERROR(detail::launch_status("toposort_weights_kernel"));
    if (err.launched != nullptr) *err.launched = true;
  }
  if (a.N <= kSmallN) {
    const std::int64_t blocks = (a.B + kSmallWarps - 1) / kSmallWarps;
    const auto grid = static_cast<unsigned>(std::min(blocks, detail::kMaxGrid));
    toposort_small_kernel<<<grid, kSmallWarps * 32, 0, s>>>(a, o);
    return detail::launch_status("toposort_small_kernel");
  }
  const std::size_t smem = static_cast<std::size_t>(a.N) * 4 * sizeof(int);
  const auto grid = static_cast<unsigned>(std::min(a.B, detail::kMaxGrid));
  toposort_generic_kernel<<<grid, 32, smem, s>>>(a, o);
  return detail::launch_status("toposort_generic_kernel");
}

}  // namespace toporoute::cuda
