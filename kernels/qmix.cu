/// \file qmix.cu
/// The Agent Q-Mix networks on the GPU; semantics are python/toporoute/backends/reference.py qmix_forward and
/// qmix_mix (float32, like the CPU kernels).
///
/// Design: one thread block per group of whole episodes (about kRowsPerBlock agent rows; grid-stride over the
/// groups), every activation of the group in shared memory, the weights in global memory (L2-resident: about
/// 1.4 MB at the default shapes), transposed so the threads of a warp computing consecutive outputs read
/// consecutive weights. A Linear gives each thread (output column, chunk of kRowChunk rows) items: one weight
/// load feeds kRowChunk FMAs, and the rows' inputs are shared-memory broadcasts. A GRUCell item keeps the r, z
/// and both n accumulators of kGruChunk rows and finishes the cell in registers. The neighbour sets are one
/// 64-bit mask per row (N <= 64), built once per group; LayerNorm is a warp per row.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda_check.cuh"
#include "launch.hpp"

namespace toporoute::cuda {
namespace {

using detail::warp_sum;

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 32;  // agent rows per forward group
constexpr int kMixRows = 16;       // episodes per mixer group
constexpr int kRowChunk = 8;       // rows per Linear item
constexpr int kGruChunk = 4;       // rows per GRUCell item
constexpr std::size_t kDefaultSmem = 48 * 1024;

__host__ __device__ constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

/// Everything a forward block needs, by value (kernels never see framework types).
struct ForwardParams {
  const float* w;
  QMixDeviceLayout L;
  int obs_dim, H, A, Hq, layers, adj_mode, self_loops;
  float ln_eps;
  QMixForwardArgs a;
  QMixForwardOut o;
  unsigned long long* err;
  int group;  // episodes per block
  int rpad;   // rows of every shared buffer (group N rounded up to kRowChunk)
  int uw;     // width of the multi-use buffer: max(obs_dim, H, Hq)
};

struct MixParams {
  const float* w;
  QMixDeviceLayout L;
  int n_agents, S, M, Hh, b1_hidden;
  QMixMixArgs a;
  float* q_tot;
  unsigned long long* err;
  int rpad;
};

// y[r, j] = act(b[j] + sum_k x[r, k] wt[k, j]) for r < rows, j < out. x and y in shared memory with rpad rows
// (rows past `rows` are read but their results dropped).
__device__ void linear(const float* w, const QMixDeviceLinear& d, const float* x, int ldx, int rows, float* y,
                       int ldy, bool relu) {
  const float* __restrict__ wt = w + d.w;
  const float* __restrict__ b = w + d.b;
  const int out = static_cast<int>(d.out), K = static_cast<int>(d.K);
  const int items = out * ((rows + kRowChunk - 1) / kRowChunk);
  for (int item = threadIdx.x; item < items; item += blockDim.x) {
    const int j = item % out, r0 = item / out * kRowChunk;
    float acc[kRowChunk];
    const float bj = __ldg(b + j);
#pragma unroll
    for (int r = 0; r < kRowChunk; ++r) acc[r] = bj;
    for (int k = 0; k < K; ++k) {
      const float wk = __ldg(wt + static_cast<std::size_t>(k) * out + j);
#pragma unroll
      for (int r = 0; r < kRowChunk; ++r) acc[r] = fmaf(x[(r0 + r) * ldx + k], wk, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < kRowChunk; ++r) {
      if (r0 + r < rows) y[(r0 + r) * ldy + j] = relu ? fmaxf(acc[r], 0.0f) : acc[r];
    }
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// One side of a GRUCell for output column j and rows r0 .. r0 + kGruChunk - 1: r, z and n accumulate
// in[r, k] * wt[k, g H + j] over k < K (wt: K x 3H).
__device__ __forceinline__ void gates(const float* __restrict__ wt, int K, int H, const float* in, int ld, int r0,
                                      int j, float (&r_acc)[kGruChunk], float (&z_acc)[kGruChunk],
                                      float (&n_acc)[kGruChunk]) {
  const std::size_t G = 3 * static_cast<std::size_t>(H);
  for (int k = 0; k < K; ++k) {
    const float* wk = wt + k * G;
    const float wr = __ldg(wk + j), wz = __ldg(wk + H + j), wn = __ldg(wk + 2 * H + j);
#pragma unroll
    for (int r = 0; r < kGruChunk; ++r) {
      const float v = in[(r0 + r) * ld + k];
      r_acc[r] = fmaf(v, wr, r_acc[r]);
      z_acc[r] = fmaf(v, wz, z_acc[r]);
      n_acc[r] = fmaf(v, wn, n_acc[r]);
    }
  }
}

// PyTorch GRUCell over the block's rows: out = (1 - z) n + z h; h null means a zero state.
__device__ void gru(const float* w, const QMixDeviceGru& g, int Kx, int H, const float* x, int ldx, const float* h,
                    int ldh, int rows, float* out, int ldo) {
  const float* __restrict__ wih = w + g.wih;
  const float* __restrict__ whh = w + g.whh;
  const float* __restrict__ bih = w + g.bih;
  const float* __restrict__ bhh = w + g.bhh;
  const int items = H * ((rows + kGruChunk - 1) / kGruChunk);
  for (int item = threadIdx.x; item < items; item += blockDim.x) {
    const int j = item % H, r0 = item / H * kGruChunk;
    float ar[kGruChunk], az[kGruChunk], an[kGruChunk], ah[kGruChunk];
    const float br = __ldg(bih + j) + __ldg(bhh + j), bz = __ldg(bih + H + j) + __ldg(bhh + H + j);
    const float bn = __ldg(bih + 2 * H + j), bhn = __ldg(bhh + 2 * H + j);
#pragma unroll
    for (int r = 0; r < kGruChunk; ++r) {
      ar[r] = br;
      az[r] = bz;
      an[r] = bn;
      ah[r] = bhn;
    }
    gates(wih, Kx, H, x, ldx, r0, j, ar, az, an);
    if (h != nullptr) gates(whh, H, H, h, ldh, r0, j, ar, az, ah);
#pragma unroll
    for (int r = 0; r < kGruChunk; ++r) {
      if (r0 + r >= rows) continue;
      const float rg = sigmoid(ar[r]), zg = sigmoid(az[r]);
      const float n = tanhf(fmaf(rg, ah[r], an[r]));
      const float prev = h != nullptr ? h[(r0 + r) * ldh + j] : 0.0f;
      out[(r0 + r) * ldo + j] = fmaf(zg, prev - n, n);
    }
  }
}

// In-place LayerNorm of the first H columns of each row, a warp per row.
__device__ void layer_norm(float* x, int ld, int rows, int H, const float* gamma, const float* beta, float eps) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int r = threadIdx.x >> 5; r < rows; r += warps) {
    float* row = x + r * ld;
    float s = 0.0f;
    for (int j = lane; j < H; j += 32) s += row[j];
    const float mean = warp_sum(s) / static_cast<float>(H);
    float v = 0.0f;
    for (int j = lane; j < H; j += 32) v = fmaf(row[j] - mean, row[j] - mean, v);
    const float rstd = 1.0f / sqrtf(warp_sum(v) / static_cast<float>(H) + eps);
    for (int j = lane; j < H; j += 32) row[j] = fmaf((row[j] - mean) * rstd, __ldg(gamma + j), __ldg(beta + j));
  }
}

__device__ __forceinline__ bool agent_active(const QMixForwardArgs& a, std::int64_t b, std::int64_t n) {
  return a.active == nullptr || a.active[b * a.act_sb + n * a.act_sn] != 0;
}

__device__ __forceinline__ bool edge(const QMixForwardArgs& a, std::int64_t b, std::int64_t src, std::int64_t dst) {
  return a.adj[b * a.adj_sb + src * a.adj_sr + dst * a.adj_sc] != 0;
}

// Copies `width` floats of each row into dst (row stride ld), lowering err for a non-finite one.
__device__ void load_rows(const ForwardParams& p, const float* src, std::int64_t sb, std::int64_t sn,
                          std::int64_t sd, int width, int which, std::int64_t b0, int rows, float* dst, int ld) {
  const std::int64_t N = p.a.N;
  for (int item = threadIdx.x; item < rows * width; item += blockDim.x) {
    const int r = item / width, d = item % width;
    const std::int64_t b = b0 + r / N, n = r % N;
    const float v = src[b * sb + n * sn + d * sd];
    if (!isfinite(v)) {
      atomicMin(p.err, static_cast<unsigned long long>((which * p.a.B + b) * N + n));
    }
    dst[r * ld + d] = v;
  }
}

__global__ void __launch_bounds__(kThreads) qmix_forward_kernel(const ForwardParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const QMixForwardArgs& a = p.a;
  const int N = static_cast<int>(a.N), H = p.H, R = p.rpad;
  auto* nbr = reinterpret_cast<unsigned long long*>(smem);
  float* U = reinterpret_cast<float*>(nbr + R);
  float* Hs = U + R * p.uw;
  float* M = Hs + R * H;
  float* Hn = M + R * H;
  float* Z = Hn + R * H;
  float* Q = Z + R * H;
  const std::int64_t groups = (a.B + p.group - 1) / p.group;
  for (std::int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const std::int64_t b0 = grp * p.group;
    const int rows = static_cast<int>(a.B - b0 < p.group ? a.B - b0 : p.group) * N;
    load_rows(p, a.obs, a.obs_sb, a.obs_sn, a.obs_sd, p.obs_dim, 0, b0, rows, U, p.uw);
    if (a.hidden != nullptr) load_rows(p, a.hidden, a.hid_sb, a.hid_sn, a.hid_sd, H, 1, b0, rows, Z, H);
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      const std::int64_t b = b0 + r / N;
      const int i = r % N;
      unsigned long long mask = 0;
      if (agent_active(a, b, i)) {
        for (int j = 0; j < N; ++j) {
          if (!agent_active(a, b, j)) continue;
          bool e = p.self_loops && i == j;
          if (p.adj_mode != static_cast<int>(QMixAdjMode::out_rows)) e = e || edge(a, b, j, i);
          if (p.adj_mode != static_cast<int>(QMixAdjMode::in)) e = e || edge(a, b, i, j);
          if (e) mask |= 1ull << j;
        }
      }
      nbr[r] = mask;
    }
    __syncthreads();
    linear(p.w, p.L.input, U, p.uw, rows, Hs, H, true);
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
      linear(p.w, msg, Hs, H, rows, M, H, true);
      __syncthreads();
      for (int item = threadIdx.x; item < rows * H; item += blockDim.x) {  // neighbour mean
        const int r = item / H, j = item % H, e0 = r / N * N;
        unsigned long long mask = nbr[r];
        const int cnt = __popcll(mask);
        float acc = 0.0f;
        while (mask != 0) {
          const int t = __ffsll(static_cast<long long>(mask)) - 1;
          mask &= mask - 1;
          acc += M[(e0 + t) * H + j];
        }
        U[r * p.uw + j] = cnt > 0 ? acc / static_cast<float>(cnt) : 0.0f;
      }
      __syncthreads();
      gru(p.w, upd, H, H, U, p.uw, Hs, H, rows, Hn, H);
      __syncthreads();
      layer_norm(Hn, H, rows, H, p.w + p.L.gamma, p.w + p.L.beta, p.ln_eps);
      __syncthreads();
      float* t = Hs;
      Hs = Hn;
      Hn = t;
    }
    gru(p.w, p.L.rnn, H, H, Hs, H, a.hidden != nullptr ? Z : nullptr, H, rows, M, H);
    __syncthreads();
    linear(p.w, p.L.head0, M, H, rows, U, p.uw, true);
    __syncthreads();
    linear(p.w, p.L.head2, U, p.uw, rows, Q, p.A, false);
    __syncthreads();
    for (int item = threadIdx.x; item < rows * H; item += blockDim.x) {
      const int r = item / H, j = item % H;
      const std::int64_t b = b0 + r / N, n = r % N;
      p.o.hidden[(b * N + n) * H + j] = agent_active(a, b, n) ? M[r * H + j] : 0.0f;
    }
    for (int item = threadIdx.x; item < rows * p.A; item += blockDim.x) {
      const int r = item / p.A, j = item % p.A;
      const std::int64_t b = b0 + r / N, n = r % N;
      p.o.q[(b * N + n) * p.A + j] = agent_active(a, b, n) ? Q[r * p.A + j] : 0.0f;
    }
    __syncthreads();  // the next group reuses the buffers
  }
}

__global__ void __launch_bounds__(kThreads) qmix_mix_kernel(const MixParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const QMixMixArgs& a = p.a;
  const int R = p.rpad, n = p.n_agents, S = p.S, M = p.M, Hh = p.Hh;
  const int ldy = (p.b1_hidden ? 4 : 3) * Hh;
  float* St = reinterpret_cast<float*>(smem);
  float* Y = St + R * S;
  float* W1 = Y + R * ldy;
  float* W2 = W1 + R * n * M;
  float* B1 = W2 + R * M;
  float* B2 = B1 + R * M;
  float* Qt = B2 + R;
  const std::int64_t groups = (a.B + kMixRows - 1) / kMixRows;
  for (std::int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const std::int64_t b0 = grp * kMixRows;
    const int rows = static_cast<int>(a.B - b0 < kMixRows ? a.B - b0 : kMixRows);
    for (int item = threadIdx.x; item < rows * (n + S); item += blockDim.x) {
      const int r = item / (n + S), c = item % (n + S);
      const std::int64_t b = b0 + r;
      const bool is_q = c < n;
      const float v = is_q ? a.q_taken[b * a.q_sb + c * a.q_sa] : a.state[b * a.s_sb + (c - n) * a.s_sd];
      if (!isfinite(v)) atomicMin(p.err, static_cast<unsigned long long>((is_q ? 0 : a.B) + b));
      if (is_q) {
        Qt[r * n + c] = v;
      } else {
        St[r * S + c - n] = v;
      }
    }
    __syncthreads();
    linear(p.w, p.L.w1a, St, S, rows, Y, ldy, true);
    linear(p.w, p.L.w2a, St, S, rows, Y + Hh, ldy, true);
    linear(p.w, p.L.b2a, St, S, rows, Y + 2 * Hh, ldy, true);
    if (p.b1_hidden) {
      linear(p.w, p.L.b1a, St, S, rows, Y + 3 * Hh, ldy, true);
    } else {
      linear(p.w, p.L.b1a, St, S, rows, B1, M, false);
    }
    __syncthreads();
    linear(p.w, p.L.w1b, Y, ldy, rows, W1, n * M, false);
    linear(p.w, p.L.w2b, Y + Hh, ldy, rows, W2, M, false);
    linear(p.w, p.L.b2b, Y + 2 * Hh, ldy, rows, B2, 1, false);
    if (p.b1_hidden) linear(p.w, p.L.b1b, Y + 3 * Hh, ldy, rows, B1, M, false);
    __syncthreads();
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (int r = threadIdx.x >> 5; r < rows; r += warps) {
      float part = 0.0f;
      for (int m = lane; m < M; m += 32) {
        float pre = B1[r * M + m];
        for (int ag = 0; ag < n; ++ag) pre = fmaf(Qt[r * n + ag], fabsf(W1[r * n * M + ag * M + m]), pre);
        const float hid = pre > 0.0f ? pre : expm1f(pre);
        part = fmaf(hid, fabsf(W2[r * M + m]), part);
      }
      part = warp_sum(part);
      if (lane == 0) p.q_tot[b0 + r] = part + B2[r];
    }
    __syncthreads();
  }
}

// Opts the kernel into `bytes` of dynamic shared memory when above the default, or says why it cannot.
template <typename Kernel>
Status prepare_smem(Kernel kernel, std::size_t bytes, const char* what) {
  if (bytes <= kDefaultSmem) return Status::success();
  int device = 0, limit = 0;
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(cudaGetDevice(&device), "cudaGetDevice"));
  TOPOROUTE_RETURN_IF_ERROR(detail::status_from_cuda(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute"));
  if (bytes > static_cast<std::size_t>(limit)) {
    return Status::error(StatusCode::unsupported, "params",
                         std::string(what) + " needs " + std::to_string(bytes) +
                             " bytes of shared memory per block at these shapes; this GPU has " +
                             std::to_string(limit) + " (use backend='cpu')");
  }
  return detail::status_from_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
      "cudaFuncSetAttribute");
}

unsigned grid_for(std::int64_t groups) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(groups, detail::kMaxGrid)));
}

}  // namespace

Status launch_qmix_forward(const QMixDeviceWeights& w, const QMixForwardArgs& a, const QMixForwardOut& o,
                           unsigned long long* err, void* stream) {
  const QMixConfig& c = w.config();
  if (a.B < 0 || a.N < 0) return Status::error(StatusCode::invalid_argument, "obs", "qmix: B and N must be >= 0");
  if (a.N > kQMixMaxAgents) {
    return Status::error(StatusCode::unsupported, "obs",
                         "the CUDA qmix kernel supports at most " + std::to_string(kQMixMaxAgents) +
                             " agents per episode; got N = " + std::to_string(a.N) + " (use backend='cpu')");
  }
  if (a.B == 0 || a.N == 0) return Status::success();
  if (a.obs == nullptr || a.adj == nullptr || o.q == nullptr || o.hidden == nullptr || err == nullptr) {
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
  p.err = err;
  const int N = static_cast<int>(a.N);
  p.group = std::max(1, kRowsPerBlock / N);
  p.rpad = round_up(p.group * N, kRowChunk);
  p.uw = std::max({p.obs_dim, p.H, p.Hq});
  const std::size_t bytes = static_cast<std::size_t>(p.rpad) *
                            (sizeof(unsigned long long) + sizeof(float) * (p.uw + 4 * p.H + p.A));
  TOPOROUTE_RETURN_IF_ERROR(prepare_smem(qmix_forward_kernel, bytes, "the CUDA qmix forward"));
  const std::int64_t groups = (a.B + p.group - 1) / p.group;
  qmix_forward_kernel<<<grid_for(groups), kThreads, bytes, static_cast<cudaStream_t>(stream)>>>(p);
  return detail::launch_status("qmix_forward_kernel");
}

Status launch_qmix_mix(const QMixDeviceWeights& w, const QMixMixArgs& a, float* q_tot, unsigned long long* err,
                       void* stream) {
  const QMixConfig& c = w.config();
  if (!w.has_mixer()) {
    return Status::error(StatusCode::invalid_argument, "params",
                         "these qmix weights hold no mixer (an inference-only checkpoint)");
  }
  if (a.B < 0) return Status::error(StatusCode::invalid_argument, "q_taken", "qmix_mix: B must be >= 0");
  if (a.B == 0) return Status::success();
  if (a.q_taken == nullptr || a.state == nullptr || q_tot == nullptr || err == nullptr) {
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
  p.err = err;
  p.rpad = round_up(kMixRows, kRowChunk);
  const std::size_t per_row = static_cast<std::size_t>(p.S) + (p.b1_hidden ? 4 : 3) * p.Hh +
                              static_cast<std::size_t>(p.n_agents + 2) * p.M + 1 + p.n_agents;
  const std::size_t bytes = static_cast<std::size_t>(p.rpad) * per_row * sizeof(float);
  TOPOROUTE_RETURN_IF_ERROR(prepare_smem(qmix_mix_kernel, bytes, "the CUDA qmix mixer"));
  const std::int64_t groups = (a.B + kMixRows - 1) / kMixRows;
  qmix_mix_kernel<<<grid_for(groups), kThreads, bytes, static_cast<cudaStream_t>(stream)>>>(p);
  return detail::launch_status("qmix_mix_kernel");
}

}  // namespace toporoute::cuda
