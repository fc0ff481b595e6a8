/// \file stats.cu
/// graph_stats and conductor_density on the GPU; semantics are python/toporoute/backends/reference.py's (and the
/// CPU core's, cpp/src/graph_stats.cpp and conductor_density.cpp).
///
/// graph_stats, N <= 32: one warp holds 32 / N graphs, one lane per node. The lanes walk the rows j together;
/// lane i reads cell (j, i) and a ballot gives every lane row j's edges, so each lane ends with its node's
/// in-edges (column) and out-edges (row) as bit masks and every count is a popcount: no shared memory, no atomics.
/// Larger N: one warp per graph, lanes over 32 columns at a time. Integer counts, then the CPU's float64
/// divisions: equal bit for bit.
///
/// bandit_select: two kernels. The first draws theta, one thread per node, with the CPU's own steps
/// (toporoute/bandit_draw.hpp: the same Philox counters, uniforms and Marsaglia-Tsang attempts); the second
/// selects, one thread per source, its top-k candidates in registers (k <= 8) or by rank (larger k), with the
/// CPU's ranking key. Faults are reported by both into one sink; only the second publishes it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_check.cuh"
#include "host_util.cuh"
#include "launch_stats.hpp"
#include "toporoute/bandit_draw.hpp"

namespace toporoute::cuda {
namespace {

using detail::kFullMask;

constexpr int kWarps = 8;  // warps per block of the graph kernels
constexpr int kSmallN = 32;

__device__ __forceinline__ bool node_active(const GraphStatsArgs& a, std::int64_t b, std::int64_t n) {
  return a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0;
}

// The CPU's float64 results from the integer counts of graph b.
__device__ __forceinline__ void write_graph(const GraphStatsArgs& a, const GraphStatsOut& o, std::int64_t b,
                                            std::int64_t n_active, std::int64_t edges, std::int64_t mutual,
                                            std::int64_t inter, std::int64_t uni) {
  const double pairs = static_cast<double>(n_active) * static_cast<double>(n_active - 1);
  o.edges[b] = edges;
  o.density[b] = pairs > 0 ? static_cast<double>(edges) / pairs : 0.0;
  o.reciprocity[b] = edges > 0 ? static_cast<double>(mutual) / static_cast<double>(edges) : 0.0;
  if (o.jaccard != nullptr) o.jaccard[b] = uni > 0 ? 1.0 - static_cast<double>(inter) / static_cast<double>(uni) : 0.0;
}

// 1 <= N <= 32: G = 32 / N graphs per warp; lane = g * N + i holds node i of graph base + g (lanes from G * N on
// idle). The loop bounds are warp-uniform, so every ballot has the whole warp.
__global__ void __launch_bounds__(kWarps * 32) graph_stats_small_kernel(const GraphStatsArgs a, const GraphStatsOut o) {
  const int N = static_cast<int>(a.N);
  const int G = kSmallN / N;
  const int lane = threadIdx.x & 31;
  const int g = lane / N;
  const int i = lane - g * N;
  const int shift = g < G ? g * N : 0;
  const unsigned low = N == 32 ? kFullMask : (1u << N) - 1u;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  for (std::int64_t base = warp * G; base < a.B; base += warps * G) {
    const std::int64_t b = base + g;
    const bool ok = g < G && b < a.B;
    const bool act_i = ok && node_active(a, b, i);
    const unsigned act = (__ballot_sync(kFullMask, act_i) >> shift) & low;  // this graph's active nodes
    unsigned col = 0, row = 0, prow = 0;  // bit j: edge j -> i; bit d: edge i -> d; the same in prev
    for (int j = 0; j < N; ++j) {
      const bool both = act_i && j != i && ((act >> j) & 1u);
      const bool e = both && a.adj[b * a.adj_sb + j * a.adj_sr + i * a.adj_sc] != 0;
      const unsigned er = (__ballot_sync(kFullMask, e) >> shift) & low;  // row j of this lane's graph
      col |= static_cast<unsigned>(e) << j;
      if (i == j) row = er;
      if (a.prev != nullptr) {
        const bool p = both && a.prev[b * a.p_sb + j * a.p_sr + i * a.p_sc] != 0;
        const unsigned pr = (__ballot_sync(kFullMask, p) >> shift) & low;
        if (i == j) prow = pr;
      }
    }
    if (ok) {
      o.in_degree[b * N + i] = __popc(col);
      o.out_degree[b * N + i] = __popc(row);
    }
    // per-lane counts (each <= 32, a graph's sums <= 1024) in four 16-bit fields, summed over the group's lanes
    // by an inclusive warp scan and the difference of its two ends
    unsigned long long x = 0;
    if (ok) {
      x = static_cast<unsigned long long>(__popc(row)) | static_cast<unsigned long long>(__popc(row & col)) << 16 |
          static_cast<unsigned long long>(__popc(row & prow)) << 32 |
          static_cast<unsigned long long>(__popc(row | prow)) << 48;
    }
    for (int d = 1; d < 32; d <<= 1) {
      const unsigned long long t = __shfl_up_sync(kFullMask, x, d);
      if (lane >= d) x += t;
    }
    const int last = min(shift + N - 1, 31);
    const unsigned long long hi = __shfl_sync(kFullMask, x, last);
    const unsigned long long lo = __shfl_sync(kFullMask, x, shift > 0 ? shift - 1 : 0);
    const unsigned long long sum = hi - (shift > 0 ? lo : 0ull);
    if (ok && i == 0) {
      write_graph(a, o, b, __popc(act), static_cast<std::int64_t>(sum & 0xFFFF),
                  static_cast<std::int64_t>(sum >> 16 & 0xFFFF), static_cast<std::int64_t>(sum >> 32 & 0xFFFF),
                  static_cast<std::int64_t>(sum >> 48 & 0xFFFF));
    }
  }
}

__device__ __forceinline__ long long warp_sum_ll(long long x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}

// Any N (used for N > 32 and N == 0): one warp per graph, lanes over 32 columns at a time, rows in order. Lane 0
// adds each row's count of the chunk to out_degree (its own earlier writes: no race).
__global__ void __launch_bounds__(kWarps * 32) graph_stats_kernel(const GraphStatsArgs a, const GraphStatsOut o) {
  const std::int64_t N = a.N;
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  for (std::int64_t b = warp; b < a.B; b += warps) {
    long long n_active = 0, edges = 0, mutual = 0, inter = 0, uni = 0;
    for (std::int64_t c0 = 0; c0 < N; c0 += 32) {
      const std::int64_t i = c0 + lane;
      const bool act_i = i < N && node_active(a, b, i);
      n_active += __popc(__ballot_sync(kFullMask, act_i));
      int in = 0;
      for (std::int64_t j = 0; j < N; ++j) {
        const bool both = act_i && j != i && node_active(a, b, j);
        const bool e = both && a.adj[b * a.adj_sb + j * a.adj_sr + i * a.adj_sc] != 0;
        const int count = __popc(__ballot_sync(kFullMask, e));
        if (lane == 0) {
          std::int32_t* out = o.out_degree + b * N + j;
          *out = c0 == 0 ? count : *out + count;
        }
        in += e;
        edges += e;
        mutual += e && a.adj[b * a.adj_sb + i * a.adj_sr + j * a.adj_sc] != 0;
        if (a.prev != nullptr) {
          const bool p = both && a.prev[b * a.p_sb + j * a.p_sr + i * a.p_sc] != 0;
          inter += e && p;
          uni += e || p;
        }
      }
      if (i < N) o.in_degree[b * N + i] = in;
    }
    edges = warp_sum_ll(edges);
    mutual = warp_sum_ll(mutual);
    inter = warp_sum_ll(inter);
    uni = warp_sum_ll(uni);
    if (lane == 0) write_graph(a, o, b, n_active, edges, mutual, inter, uni);
  }
}

// One thread per element; the checks of the CPU op, in its order.
__global__ void conductor_density_kernel(const DensityArgs a, const DensityOut o, const ErrorSink err) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t x = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < a.n; x += stride) {
    const std::int64_t V = a.nodes[x], E = a.edges[x], s = a.steps[x], cap = a.n_max[x];
    const int bad = V < 1 ? 0 : E < 0 ? 1 : (s < 1 || s > V) ? 2 : cap < 1 ? 3 : -1;
    if (bad >= 0) {
      detail::report(err, static_cast<unsigned long long>(x) * 4 + static_cast<unsigned long long>(bad));
      continue;
    }
    const double v = static_cast<double>(V), e = static_cast<double>(E), st = static_cast<double>(s);
    const double c = static_cast<double>(cap);
    const double s_node = exp(-v / c);
    const double s_edge = exp(-e / (v * (v - 0.5)));
    const double s_depth = 1.0 - st / v;
    const double s_complex = exp(s_node + 2.0 * s_edge + s_depth);
    o.s_node[x] = s_node;
    o.s_edge[x] = s_edge;
    o.s_depth[x] = s_depth;
    o.s_complex[x] = s_complex;
    o.reward[x] = V <= cap ? s_complex : tanh((c - v) / c);
  }
  detail::finish(err);
}

// ------------------------------------------------------------------------------------------- bandit_select

constexpr int kTopCap = 8;  // largest k kept in registers; larger k ranks each candidate against the others

__device__ __forceinline__ bool bandit_active(const BanditSelectArgs& a, std::int64_t b, std::int64_t n) {
  return a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0;
}

// (fault * B + b) * P + where: the smallest code is the CPU's first error (launch_stats.hpp).
__device__ __forceinline__ unsigned long long bandit_code(const BanditSelectArgs& a, int fault, std::int64_t b,
                                                          std::int64_t where) {
  const auto P = static_cast<unsigned long long>(a.N * a.N > 0 ? a.N * a.N : 1);
  return (static_cast<unsigned long long>(fault) * static_cast<unsigned long long>(a.B) +
          static_cast<unsigned long long>(b)) * P + static_cast<unsigned long long>(where);
}

// Reports a Beta shape (alpha: fault 0, beta: fault 2) that is not finite (fault) or not > 0 (fault + 1).
__device__ __forceinline__ bool shape_ok(const BanditSelectArgs& a, float v, int fault, std::int64_t b,
                                         std::int64_t n, const ErrorSink& err) {
  if (!isfinite(v)) {
    detail::report(err, bandit_code(a, fault, b, n));
    return false;
  }
  if (!(v > 0.0f)) {
    detail::report(err, bandit_code(a, fault + 1, b, n));
    return false;
  }
  return true;
}

// theta of node (b, n), one thread each: 0 when inactive; the checks of alpha and beta at active nodes (a node
// with bad shapes is not drawn: its rejection loop would never end). Reports only (err.host is null here).
__global__ void bandit_theta_kernel(const BanditSelectArgs a, float* theta, const ErrorSink err) {
  const std::int64_t total = a.B * a.N;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t x = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total; x += stride) {
    const std::int64_t b = x / a.N, n = x - b * a.N;
    float t = 0.0f;
    if (bandit_active(a, b, n)) {
      const float al = a.alpha[b * a.al_sb + n * a.al_sn];
      const float be = a.beta[b * a.be_sb + n * a.be_sn];
      const bool al_ok = shape_ok(a, al, 0, b, n, err);
      const bool be_ok = shape_ok(a, be, 2, b, n, err);
      if (al_ok && be_ok) {
        const double x64 = al, y64 = be;
        if (a.mode == BanditMode::thompson) {
          t = draw::beta_draw(x64, y64, a.seed, static_cast<std::uint32_t>(n),
                              a.graph_offset + static_cast<std::uint32_t>(b), a.step);
        } else {
          t = static_cast<float>(x64 / (x64 + y64));
        }
      }
    }
    theta[x] = t;
  }
}

// The CPU's key: score bits (>= 0, so ordered like the floats) over ~index; larger is better, 0 is empty.
__device__ __forceinline__ unsigned long long rank_key(float score, std::int64_t index) {
  const unsigned bits = __float_as_uint(score) & 0x7FFFFFFFu;
  return static_cast<unsigned long long>(bits) << 32 | static_cast<unsigned>(~static_cast<std::uint32_t>(index));
}

// Candidate d of source s (not s itself, an edge, d active, weight > 0): its key, or 0.
__device__ __forceinline__ unsigned long long candidate(const BanditSelectArgs& a, std::int64_t b, std::int64_t s,
                                                        std::int64_t d, const std::uint8_t* row, const float* wrow,
                                                        const float* theta_b) {
  if (d == s || row[d * a.adj_sc] == 0 || !bandit_active(a, b, d)) return 0;
  if (wrow == nullptr) return rank_key(theta_b[d], d);
  const float w = wrow[d * a.w_sc];
  return w > 0.0f ? rank_key(theta_b[d] * w, d) : 0;
}

// One thread per source (b, s): the weights' checks of row s, then its chosen row and its k choices.
__global__ void bandit_choose_kernel(const BanditSelectArgs a, const BanditSelectOut o, const ErrorSink err) {
  const std::int64_t N = a.N, K = a.k, total = a.B * a.N;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t x = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total; x += stride) {
    const std::int64_t b = x / N, s = x - b * N;
    const float* wrow = a.weights == nullptr ? nullptr : a.weights + b * a.w_sb + s * a.w_sr;
    if (wrow != nullptr) {
      for (std::int64_t d = 0; d < N; ++d) {
        const float w = wrow[d * a.w_sc];
        if (!isfinite(w)) {
          detail::report(err, bandit_code(a, 4, b, s * N + d));
        } else if (w < 0.0f) {
          detail::report(err, bandit_code(a, 5, b, s * N + d));
        }
      }
    }
    std::uint8_t* chosen = o.chosen + x * N;
    std::int32_t* choices = o.choices + x * K;
    for (std::int64_t d = 0; d < N; ++d) chosen[d] = 0;
    const std::uint8_t* row = a.adj + b * a.adj_sb + s * a.adj_sr;
    const float* theta_b = o.theta + b * N;
    std::int64_t kept = 0;
    if (bandit_active(a, b, s)) {
      if (K <= kTopCap) {
        unsigned long long top[kTopCap];
#pragma unroll
        for (int r = 0; r < kTopCap; ++r) top[r] = 0;
        for (std::int64_t d = 0; d < N; ++d) {
          unsigned long long key = candidate(a, b, s, d, row, wrow, theta_b);
          if (key == 0) continue;
          // insertion, best first: the loser of each slot moves on down
#pragma unroll
          for (int r = 0; r < kTopCap; ++r) {
            if (r < K && key > top[r]) {
              const unsigned long long t = top[r];
              top[r] = key;
              key = t;
            }
          }
        }
#pragma unroll
        for (int r = 0; r < kTopCap; ++r) {
          if (r < K && top[r] != 0) {
            const auto d = static_cast<std::int32_t>(~static_cast<std::uint32_t>(top[r]));
            choices[r] = d;
            chosen[d] = 1;
            kept = r + 1;
          }
        }
      } else {
        // each candidate's rank = the candidates with a larger key; keys are distinct (they hold the index)
        for (std::int64_t d = 0; d < N; ++d) {
          const unsigned long long key = candidate(a, b, s, d, row, wrow, theta_b);
          if (key == 0) continue;
          std::int64_t rank = 0;
          for (std::int64_t t = 0; t < N; ++t) rank += candidate(a, b, s, t, row, wrow, theta_b) > key;
          ++kept;
          if (rank < K) {
            choices[rank] = static_cast<std::int32_t>(d);
            chosen[d] = 1;
          }
        }
        kept = kept < K ? kept : K;
      }
    }
    for (std::int64_t r = kept; r < K; ++r) choices[r] = -1;
  }
  detail::finish(err);
}

unsigned grid_for(std::int64_t items, std::int64_t per_block) {
  return static_cast<unsigned>(std::min((items + per_block - 1) / per_block, detail::kMaxGrid));
}

Status invalid(const char* arg, const std::string& message) {
  return Status::error(StatusCode::invalid_argument, arg, message);
}

}  // namespace

// ------------------------------------------------------------------------------------------------ graph_stats

Status launch_graph_stats(const GraphStatsArgs& a, const GraphStatsOut& o, void* stream) {
  if (a.B < 0 || a.N < 0) return invalid("adj", "graph_stats: B and N must be >= 0");
  if (a.N >= (std::int64_t{1} << 31)) return invalid("adj", "graph_stats: N must be < 2^31");
  if (a.B == 0) return Status::success();  // N == 0 still writes the per-graph zeros
  if ((a.N > 0 && (a.adj == nullptr || o.in_degree == nullptr || o.out_degree == nullptr)) || o.edges == nullptr ||
      o.density == nullptr || o.reciprocity == nullptr || (a.prev != nullptr && o.jaccard == nullptr)) {
    return invalid("", "graph_stats: null device pointer");
  }
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.N >= 1 && a.N <= kSmallN) {
    const std::int64_t per_warp = kSmallN / a.N;
    graph_stats_small_kernel<<<grid_for(a.B, per_warp * kWarps), kWarps * 32, 0, s>>>(a, o);
  } else {
    graph_stats_kernel<<<grid_for(a.B, kWarps), kWarps * 32, 0, s>>>(a, o);
  }
  return detail::launch_status("graph_stats kernel");
}

Status launch_graph_stats_on(int device, const GraphStatsArgs& a, const GraphStatsOut& o, void* stream) {
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  return launch_graph_stats(a, o, stream);
}

Status graph_stats_host(const GraphStatsArgs& args, const GraphStatsOut& out, int device) {
  TOPOROUTE_RETURN_IF_ERROR(
      detail::check_graph_layout(args, "graph_stats", "prev", args.prev, args.p_sb, args.p_sr, args.p_sc));
  const std::int64_t B = args.B, N = args.N;
  if (B == 0) return Status::success();

  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  const auto n = static_cast<std::size_t>(N);
  detail::ChunkedTransfer t;
  const int adj = t.input(args.adj, n * n), prev = t.input(args.prev, n * n), active = t.input(args.active, n);
  const int edges = t.output(out.edges, sizeof(std::int64_t)), density = t.output(out.density, sizeof(double));
  const int in = t.output(out.in_degree, n * sizeof(std::int32_t));
  const int outd = t.output(out.out_degree, n * sizeof(std::int32_t));
  const int recip = t.output(out.reciprocity, sizeof(double));
  const int jac = t.output(args.prev != nullptr ? out.jaccard : nullptr, sizeof(double));
  TOPOROUTE_RETURN_IF_ERROR(t.allocate("graph_stats", B));

  GraphStatsArgs dev = args;
  dev.adj = t.device<const std::uint8_t>(adj);
  dev.prev = args.prev != nullptr ? t.device<const std::uint8_t>(prev) : nullptr;
  dev.active = args.active != nullptr ? t.device<const std::uint8_t>(active) : nullptr;
  dev.adj_sb = dev.p_sb = N * N;
  dev.adj_sr = dev.p_sr = N;
  dev.adj_sc = dev.p_sc = 1;
  dev.a_sb = N;
  dev.a_sn = 1;
  const GraphStatsOut dout{t.device<std::int64_t>(edges), t.device<double>(density), t.device<std::int32_t>(in),
                           t.device<std::int32_t>(outd),  t.device<double>(recip),   t.device<double>(jac)};
  const cudaStream_t st = cudaStreamPerThread;
  return t.run(
      B, st, "graph_stats kernel",
      [&](std::int64_t, std::int64_t count) {
        dev.B = count;
        return launch_graph_stats(dev, dout, st);
      },
      [](std::int64_t, std::int64_t, unsigned long long) { return Status::success(); });
}

// ------------------------------------------------------------------------------------------ conductor_density

Status launch_conductor_density(const DensityArgs& a, const DensityOut& o, const ErrorSink& err, void* stream) {
  if (a.n < 0) return invalid("nodes", "conductor_density: n must be >= 0");
  if (a.n == 0) return Status::success();
  if (a.nodes == nullptr || a.edges == nullptr || a.steps == nullptr || a.n_max == nullptr || o.s_node == nullptr ||
      o.s_edge == nullptr || o.s_depth == nullptr || o.s_complex == nullptr || o.reward == nullptr) {
    return invalid("", "conductor_density: null device pointer");
  }
  constexpr int kThreads = 256;
  conductor_density_kernel<<<grid_for(a.n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, o, err);
  if (err.launched != nullptr) *err.launched = true;
  return detail::launch_status("conductor_density_kernel");
}

Status launch_conductor_density_on(int device, const DensityArgs& a, const DensityOut& o, const ErrorSink& err,
                                   void* stream) {
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  return launch_conductor_density(a, o, err, stream);
}

Status conductor_density_host(const DensityArgs& args, const DensityOut& out, int device) {
  if (args.n < 0) return invalid("nodes", "conductor_density: n must be >= 0");
  if (args.n == 0) return Status::success();
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  detail::ChunkedTransfer t;
  constexpr std::size_t kI = sizeof(std::int64_t), kD = sizeof(double);
  const int nodes = t.input(args.nodes, kI), edges = t.input(args.edges, kI), steps = t.input(args.steps, kI);
  const int n_max = t.input(args.n_max, kI);
  const int s_node = t.output(out.s_node, kD), s_edge = t.output(out.s_edge, kD), s_depth = t.output(out.s_depth, kD);
  const int s_complex = t.output(out.s_complex, kD), reward = t.output(out.reward, kD);
  const int err = t.error_word();
  TOPOROUTE_RETURN_IF_ERROR(t.allocate("conductor_density", args.n));
  DensityArgs dev;
  dev.nodes = t.device<const std::int64_t>(nodes);
  dev.edges = t.device<const std::int64_t>(edges);
  dev.steps = t.device<const std::int64_t>(steps);
  dev.n_max = t.device<const std::int64_t>(n_max);
  const DensityOut dout{t.device<double>(s_node), t.device<double>(s_edge), t.device<double>(s_depth),
                        t.device<double>(s_complex), t.device<double>(reward)};
  const cudaStream_t st = cudaStreamPerThread;
  return t.run(
      args.n, st, "conductor_density_kernel",
      [&](std::int64_t, std::int64_t count) {
        dev.n = count;
        return launch_conductor_density(dev, dout, ErrorSink{t.device<unsigned long long>(err)}, st);
      },
      [&](std::int64_t, std::int64_t, unsigned long long code) {
        if (code == kNoError) return Status::success();
        // chunks run in order, so no earlier element is bad: the CPU op finds this first error and words it
        const Status s = toporoute::conductor_density(args, out);
        return s.ok() ? Status::error(StatusCode::runtime, "nodes", "conductor_density: inconsistent input check")
                      : s;
      });
}

// --------------------------------------------------------------------------------------------- bandit_select

Status launch_bandit_select(const BanditSelectArgs& a, const BanditSelectOut& o, const ErrorSink& err,
                            void* stream) {
  if (a.B < 0 || a.N < 0 || a.k < 1) return invalid("k", "bandit_select: negative dimensions or k < 1");
  if (a.N >= (std::int64_t{1} << 31)) return invalid("adj", "bandit_select: N must be < 2^31");
  if (a.B == 0 || a.N == 0) return Status::success();
  if (a.adj == nullptr || a.alpha == nullptr || a.beta == nullptr || o.chosen == nullptr || o.choices == nullptr ||
      o.theta == nullptr) {
    return invalid("", "bandit_select: null device pointer");
  }
  constexpr int kThreads = 128;
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned grid = grid_for(a.B * a.N, kThreads);
  ErrorSink report_only = err;  // the second kernel publishes the word both lowered (stream order)
  report_only.host = nullptr;
  report_only.launched = nullptr;
  bandit_theta_kernel<<<grid, kThreads, 0, s>>>(a, o.theta, report_only);
  TOPOROUTE_RETURN_IF_ERROR(detail::launch_status("bandit_theta_kernel"));
  bandit_choose_kernel<<<grid, kThreads, 0, s>>>(a, o, err);
  if (err.launched != nullptr) *err.launched = true;
  return detail::launch_status("bandit_choose_kernel");
}

Status launch_bandit_select_on(int device, const BanditSelectArgs& a, const BanditSelectOut& o,
                               const ErrorSink& err, void* stream) {
  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter_fast(device));
  return launch_bandit_select(a, o, err, stream);
}

Status bandit_select_host(const BanditSelectArgs& args, const BanditSelectOut& out, int device) {
  using detail::require_c_contiguous;
  const std::int64_t B = args.B, N = args.N;
  if (B < 0 || N < 0 || args.k < 1) return invalid("k", "bandit_select: negative dimensions or k < 1");
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("adj", {{B, args.adj_sb}, {N, args.adj_sr}, {N, args.adj_sc}}));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("alpha", {{B, args.al_sb}, {N, args.al_sn}}));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("beta", {{B, args.be_sb}, {N, args.be_sn}}));
  TOPOROUTE_RETURN_IF_ERROR(
      require_c_contiguous("weights", {{B, args.w_sb}, {N, args.w_sr}, {N, args.w_sc}}, args.weights != nullptr));
  TOPOROUTE_RETURN_IF_ERROR(require_c_contiguous("active", {{B, args.a_sb}, {N, args.a_sn}}, args.active != nullptr));
  if (B == 0 || N == 0) return Status::success();

  detail::DeviceScope scope;
  TOPOROUTE_RETURN_IF_ERROR(scope.enter(device));
  const auto n = static_cast<std::size_t>(N), k = static_cast<std::size_t>(args.k);
  detail::ChunkedTransfer t;
  const int adj = t.input(args.adj, n * n), alpha = t.input(args.alpha, n * sizeof(float));
  const int beta = t.input(args.beta, n * sizeof(float)), weights = t.input(args.weights, n * n * sizeof(float));
  const int active = t.input(args.active, n);
  const int chosen = t.output(out.chosen, n * n), choices = t.output(out.choices, n * k * sizeof(std::int32_t));
  const int theta = t.output(out.theta, n * sizeof(float));
  const int err = t.error_word();
  TOPOROUTE_RETURN_IF_ERROR(t.allocate("bandit_select", B));

  BanditSelectArgs dev = args;
  dev.adj = t.device<const std::uint8_t>(adj);
  dev.alpha = t.device<const float>(alpha);
  dev.beta = t.device<const float>(beta);
  dev.weights = args.weights != nullptr ? t.device<const float>(weights) : nullptr;
  dev.active = args.active != nullptr ? t.device<const std::uint8_t>(active) : nullptr;
  dev.adj_sb = dev.w_sb = N * N;
  dev.adj_sr = dev.w_sr = N;
  dev.adj_sc = dev.w_sc = 1;
  dev.al_sb = dev.be_sb = dev.a_sb = N;
  dev.al_sn = dev.be_sn = dev.a_sn = 1;
  const BanditSelectOut dout{t.device<std::uint8_t>(chosen), t.device<std::int32_t>(choices), t.device<float>(theta)};
  const cudaStream_t st = cudaStreamPerThread;
  return t.run(
      B, st, "bandit_select kernels",
      [&](std::int64_t b0, std::int64_t count) {
        dev.B = count;
        dev.graph_offset = args.graph_offset + static_cast<std::uint32_t>(b0);  // the draws' graph counter
        return launch_bandit_select(dev, dout, ErrorSink{t.device<unsigned long long>(err)}, st);
      },
      [&](std::int64_t, std::int64_t, unsigned long long code) {
        if (code == kNoError) return Status::success();
        // faults are ordered by kind over the whole batch: the CPU's serial check names the first
        const Status s = check_bandit_select(args);
        return s.ok() ? Status::error(StatusCode::runtime, "alpha", "bandit_select: inconsistent input check") : s;
      });
}

}  // namespace toporoute::cuda
