// qmix_forward() / qmix_mix(): weight packing (QMixWeights) and the tile loop around the per-ISA kernels.
// A tile is a run of whole episodes (about kTileRows agent rows) that goes through every layer before the next
// tile starts, so its activations (a few x 128 rows x H floats) and one layer's weights stay in L2; OpenMP
// hands tiles to threads only when the batch is large enough to pay for waking them, so B = 1 never touches
// the thread team. Each thread keeps one scratch buffer for the life of the thread.
#include "toporoute/qmix.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "parallel.hpp"
#include "simd/qmix_kernels.hpp"
#include "thread_scratch.hpp"
#include "toporoute/build_info.hpp"

namespace toporoute {

namespace detail {

using simd::kPanel;

inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
inline std::int64_t panels_of(std::int64_t n) { return (n + kPanel - 1) / kPanel; }

/// No copy of a layer's weights in the AMX layout (the CPU has no AMX).
constexpr std::size_t kNoAmx = static_cast<std::size_t>(-1);

/// A packed Linear: `panels` panels of K x kPanel floats at w, panels * kPanel bias floats at b; the same
/// weights in the AMX layout (simd::amx_pack, bf16 values) at amx unless kNoAmx.
struct DenseLayer {
  std::size_t w = 0, b = 0, amx = kNoAmx;
  std::int64_t K = 0, panels = 0, relu_panels = 0;
};

/// A packed GRUCell: panels of Kx x 3 kPanel (input side) and H x 3 kPanel (hidden side), 4 kPanel biases each;
/// both sides in the AMX layout at amx_x and amx_h unless kNoAmx.
struct GruLayer {
  std::size_t wx = 0, wh = 0, b = 0, amx_x = kNoAmx, amx_h = kNoAmx;
  std::int64_t Kx = 0, H = 0, panels = 0;
};

/// Offsets (floats) into the packed buffer; every piece starts on a 64-byte boundary.
class Layout {
 public:
  std::size_t take(std::int64_t floats) {
    const std::size_t at = size_;
    size_ += static_cast<std::size_t>(round_up(floats, kPanel));
    return at;
  }
  DenseLayer dense(std::int64_t K, std::int64_t cols, bool relu) {
    DenseLayer d;
    d.K = K;
    d.panels = panels_of(cols);
    d.relu_panels = relu ? d.panels : 0;
    d.w = take(d.panels * K * kPanel);
    d.b = take(d.panels * kPanel);
    return d;
  }
  GruLayer gru(std::int64_t Kx, std::int64_t H) {
    GruLayer g;
    g.Kx = Kx;
    g.H = H;
    g.panels = panels_of(H);
    g.wx = take(g.panels * Kx * 3 * kPanel);
    g.wh = take(g.panels * H * 3 * kPanel);
    g.b = take(g.panels * 4 * kPanel);
    return g;
  }
  /// Room for the AMX copies of d's (g's) weights.
  void amx(DenseLayer& d) { d.amx = take_bf16(simd::amx_pack_size(d.K, d.panels)); }
  void amx(GruLayer& g) {
    g.amx_x = take_bf16(simd::amx_pack_size(g.Kx, 3 * g.panels));
    g.amx_h = take_bf16(simd::amx_pack_size(g.H, 3 * g.panels));
  }
  std::size_t size() const { return size_; }

 private:
  std::size_t take_bf16(std::int64_t values) { return take((values + 1) / 2); }
  std::size_t size_ = 0;
};

// Linear weight (out x K, row-major) and bias into panel layout; output o goes to packed column col(o).
template <class ColFn>
void fill_dense_mapped(float* base, const DenseLayer& d, const float* weight, const float* bias, std::int64_t out,
                ColFn col) {
  float* w = base + d.w;
  for (std::int64_t o = 0; o < out; ++o) {
    const std::int64_t c = col(o), p = c / kPanel, cc = c % kPanel;
    for (std::int64_t k = 0; k < d.K; ++k) w[(p * d.K + k) * kPanel + cc] = weight[o * d.K + k];
    base[d.b + static_cast<std::size_t>(c)] = bias[o];
  }
}

// The AMX copies from the float32 panels (after fill_dense / fill_gru).
void pack_amx(float* base, const DenseLayer& d) {
  if (d.amx == kNoAmx) return;
  simd::amx_pack(base + d.w, d.K, d.panels, 1, reinterpret_cast<std::uint16_t*>(base + d.amx));
}

void pack_amx(float* base, const GruLayer& g) {
  if (g.amx_x == kNoAmx) return;
  simd::amx_pack(base + g.wx, g.Kx, 3 * g.panels, 3, reinterpret_cast<std::uint16_t*>(base + g.amx_x));
  simd::amx_pack(base + g.wh, g.H, 3 * g.panels, 3, reinterpret_cast<std::uint16_t*>(base + g.amx_h));
}

void fill_dense(float* base, const DenseLayer& d, const float* weight, const float* bias, std::int64_t out,
                std::int64_t col0 = 0) {
  fill_dense_mapped(base, d, weight, bias, out, [col0](std::int64_t o) { return col0 + o; });
}

// GRUCell weight_ih (3H x Kx), weight_hh (3H x H), bias_ih, bias_hh (3H) with gates r, z, n.
void fill_gru(float* base, const GruLayer& g, const float* wih, const float* whh, const float* bih, const float* bhh) {
  const std::int64_t H = g.H, G = 3 * kPanel;
  for (std::int64_t gate = 0; gate < 3; ++gate) {
    for (std::int64_t j = 0; j < H; ++j) {
      const std::int64_t p = j / kPanel, cc = gate * kPanel + j % kPanel, row = gate * H + j;
      for (std::int64_t k = 0; k < g.Kx; ++k) base[g.wx + static_cast<std::size_t>((p * g.Kx + k) * G + cc)] = wih[row * g.Kx + k];
      for (std::int64_t k = 0; k < H; ++k) base[g.wh + static_cast<std::size_t>((p * H + k) * G + cc)] = whh[row * H + k];
    }
  }
  float* b = base + g.b;
  for (std::int64_t j = 0; j < H; ++j) {
    float* bp = b + (j / kPanel) * 4 * kPanel + j % kPanel;
    bp[0] = bih[j] + bhh[j];
    bp[kPanel] = bih[H + j] + bhh[H + j];
    bp[2 * kPanel] = bih[2 * H + j];
    bp[3 * kPanel] = bhh[2 * H + j];
  }
}

}  // namespace detail

struct QMixWeights::Impl {
  detail::DenseLayer input;
  std::vector<detail::DenseLayer> message;
  std::vector<detail::GruLayer> update;
  std::size_t gamma = 0, beta = 0;
  detail::GruLayer rnn;
  detail::DenseLayer head0, head2;
  // Mixer: one Linear from the state to [hyper_w1.0 | hyper_w2.0 | hyper_b2.0 | hyper_b1(.0)], each segment
  // padded to whole panels (ReLU on all but a single-Linear hyper_b1), then the second layers. hyper_w1.2's
  // outputs are regrouped so agent a's M weights start at column a Mp.
  detail::DenseLayer hyper, w1, w2, b2, b1;
  std::int64_t Hhp = 0, Mp = 0;
};

namespace {

using detail::kPanel;
using detail::round_up;

constexpr std::int64_t kTileRows = 128;
/// Below this many multiply-adds (about 40 us of one core: B = 2 episodes of 3 agents at the default shapes) a
/// call runs on the calling thread. Waking sleeping OpenMP workers costs tens of microseconds, so a thread only
/// pays for itself with a tile of this size (with warm workers even B = 2 would gain a third).
constexpr std::int64_t kParallelMacs = std::int64_t{1} << 21;

Status invalid(const char* arg, const std::string& message) {
  return Status::error(StatusCode::invalid_argument, arg, message);
}

// -------------------------------------------------------------------------------------------- scratch

thread_local detail::ThreadScratch tls_scratch;

// ----------------------------------------------------------------------------------------- tile schedule

struct Schedule {
  std::int64_t per_tile = 1;  ///< episodes per tile
  std::int64_t tiles = 0;
  bool parallel = false;
};

Schedule schedule(std::int64_t B, std::int64_t rows_per_episode, std::int64_t macs_per_episode) {
  Schedule s;
  const std::int64_t cap = std::max<std::int64_t>(1, kTileRows / std::max<std::int64_t>(rows_per_episode, 1));
  s.per_tile = std::min(cap, std::max<std::int64_t>(B, 1));
  const int threads = openmp_max_threads();
  s.parallel = threads > 1 && B >= 2 && B * macs_per_episode >= kParallelMacs;
  if (s.parallel) {
    // whole rounds of tiles over the threads, tiles as equal as possible
    const std::int64_t t = threads;
    const std::int64_t rounds = (B + t * cap - 1) / (t * cap);
    s.per_tile = std::max<std::int64_t>(1, (B + t * rounds - 1) / (t * rounds));
  }
  s.tiles = B > 0 ? (B + s.per_tile - 1) / s.per_tile : 0;
  return s;
}

/// Runs body(b0, nb, scratch) for every tile (false: the tile holds a non-finite input); returns
/// non_finite() when any tile failed, StatusCode::out_of_memory naming `op` when a thread could not get its
/// scratch (allocated without throwing: an exception must not escape the OpenMP region).
template <class Body, class NonFinite>
Status run_tiles(const char* op, std::int64_t B, const Schedule& s, std::size_t scratch_floats, Body body,
                 NonFinite non_finite) {
  detail::FirstError bad(B);
  auto tile = [&](std::int64_t t) {
    auto* scratch = static_cast<float*>(tls_scratch.get(scratch_floats * sizeof(float)));
    if (scratch == nullptr) return false;
    const std::int64_t b0 = t * s.per_tile;
    if (!body(b0, std::min(s.per_tile, B - b0), scratch)) bad.record(b0);
    return true;
  };
  int no_memory = 0;
  if (!s.parallel) {
    for (std::int64_t t = 0; t < s.tiles && !bad.any() && no_memory == 0; ++t) no_memory = tile(t) ? 0 : 1;
  } else {
#pragma omp parallel for schedule(dynamic, 1) reduction(| : no_memory)
    for (std::int64_t t = 0; t < s.tiles; ++t) {
      if (!bad.any() && !tile(t)) no_memory = 1;
    }
  }
  if (no_memory != 0) {
    return Status::out_of_memory(op,
                                 "the per-thread scratch of a tile (" + std::to_string(s.per_tile) +
                                     (s.per_tile == 1 ? " episode)" : " episodes)"),
                                 static_cast<std::uint64_t>(scratch_floats) * sizeof(float));
  }
  return bad.any() ? non_finite() : Status::success();
}

// ------------------------------------------------------------------------------------------ row helpers

// Copies n floats (element stride `stride`) into dst and zeroes dst[n, ld); false when one is NaN or infinite.
bool copy_row(const float* src, std::int64_t stride, std::int64_t n, std::int64_t ld, float* dst) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
  } else {
    for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
  }
  std::uint32_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, dst + i, sizeof(bits));
    bad |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  std::fill(dst + n, dst + ld, 0.0f);
  return bad == 0;
}

bool row_finite(const float* src, std::int64_t stride, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(src[i * stride])) return false;
  }
  return true;
}

simd::DenseCall dense_call(const float* wd, const detail::DenseLayer& d, const float* x, std::int64_t ldx,
                           std::int64_t rows, float* y, std::int64_t ldy) {
  const auto* amx = d.amx != detail::kNoAmx ? reinterpret_cast<const std::uint16_t*>(wd + d.amx) : nullptr;
  return {x, ldx, rows, d.K, wd + d.w, wd + d.b, d.panels, d.relu_panels, y, ldy, amx};
}

simd::GruCall gru_call(const float* wd, const detail::GruLayer& g, const float* x, std::int64_t ldx, const float* h,
                       std::int64_t ldh, std::int64_t rows, float* out, std::int64_t ldo, float* work) {
  const float* wh = h != nullptr ? wd + g.wh : nullptr;
  const bool amx = g.amx_x != detail::kNoAmx;
  const auto* ax = amx ? reinterpret_cast<const std::uint16_t*>(wd + g.amx_x) : nullptr;
  const auto* ah = amx && h != nullptr ? reinterpret_cast<const std::uint16_t*>(wd + g.amx_h) : nullptr;
  return {x, ldx, g.Kx, h, ldh, g.H, rows, wd + g.wx, wh, wd + g.b, g.panels, out, ldo, work, ax, ah};
}

// ------------------------------------------------------------------------------------------ agent network

bool agent_active(const QMixForwardArgs& a, std::int64_t b, std::int64_t n) {
  return a.active == nullptr || a.active[b * a.act_sb + n * a.act_sn] != 0;
}

bool edge(const QMixForwardArgs& a, std::int64_t b, std::int64_t src, std::int64_t dst) {
  return a.adj[b * a.adj_sb + src * a.adj_sr + dst * a.adj_sc] != 0;
}

// Neighbour lists of episode b: nbr[i N + t], t < cnt[i], the j node i averages (reference qmix_neighbours).
void neighbours(const QMixConfig& c, const QMixForwardArgs& a, std::int64_t b, std::int32_t* nbr,
                std::int32_t* cnt) {
  const std::int64_t N = a.N;
  for (std::int64_t i = 0; i < N; ++i) {
    std::int32_t count = 0;
    if (agent_active(a, b, i)) {
      for (std::int64_t j = 0; j < N; ++j) {
        if (!agent_active(a, b, j)) continue;
        bool e = c.self_loops && i == j;
        if (c.adj_mode != QMixAdjMode::out_rows) e = e || edge(a, b, j, i);
        if (c.adj_mode != QMixAdjMode::in) e = e || edge(a, b, i, j);
        if (e) nbr[i * N + count++] = static_cast<std::int32_t>(j);
      }
    }
    cnt[i] = count;
  }
}

/// Scratch of one forward tile (offsets in floats).
struct ForwardPlan {
  std::int64_t rows = 0, ldx = 0, ldh = 0, ldq1 = 0, ldq2 = 0;
  std::size_t x = 0, h = 0, m = 0, agg = 0, hn = 0, z = 0, q1 = 0, q2 = 0, gru = 0, nbr = 0, cnt = 0, floats = 0;
};

ForwardPlan forward_plan(const QMixConfig& c, std::int64_t per_tile, std::int64_t N) {
  ForwardPlan p;
  p.rows = per_tile * N;
  p.ldx = round_up(c.obs_dim, kPanel);
  p.ldh = round_up(c.hidden, kPanel);
  p.ldq1 = round_up(c.head_hidden, kPanel);
  p.ldq2 = round_up(c.n_actions, kPanel);
  detail::Layout l;
  p.x = l.take(p.rows * p.ldx);
  p.h = l.take(p.rows * p.ldh);
  p.m = l.take(p.rows * p.ldh);
  p.agg = l.take(p.rows * p.ldh);
  p.hn = l.take(p.rows * p.ldh);
  p.z = l.take(p.rows * p.ldh);
  p.q1 = l.take(p.rows * p.ldq1);
  p.q2 = l.take(p.rows * p.ldq2);
  p.gru = l.take(p.rows * 3 * kPanel);
  p.nbr = l.take(per_tile * N * N);  // int32, same size as float
  p.cnt = l.take(per_tile * N);
  p.floats = l.size();
  return p;
}

bool forward_tile(const QMixWeights& w, const simd::QmixKernels& k, const QMixForwardArgs& a,
                  const QMixForwardOut& o, const ForwardPlan& p, std::int64_t b0, std::int64_t nb, float* s) {
  const QMixConfig& c = w.config();
  const QMixWeights::Impl& L = w.impl();
  const float* wd = w.data();
  const std::int64_t N = a.N, R = nb * N, H = c.hidden, ld = p.ldh;
  float *x = s + p.x, *h = s + p.h, *m = s + p.m, *agg = s + p.agg, *hn = s + p.hn, *z = s + p.z;
  float *q1 = s + p.q1, *q2 = s + p.q2, *gw = s + p.gru;
  auto* nbr = reinterpret_cast<std::int32_t*>(s + p.nbr);
  auto* cnt = reinterpret_cast<std::int32_t*>(s + p.cnt);

  for (std::int64_t e = 0; e < nb; ++e) {
    const std::int64_t b = b0 + e;
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int64_t r = e * N + n;
      if (!copy_row(a.obs + b * a.obs_sb + n * a.obs_sn, a.obs_sd, c.obs_dim, p.ldx, x + r * p.ldx)) return false;
      if (a.hidden != nullptr && !copy_row(a.hidden + b * a.hid_sb + n * a.hid_sn, a.hid_sd, H, ld, z + r * ld)) {
        return false;
      }
    }
    neighbours(c, a, b, nbr + e * N * N, cnt + e * N);
  }

  k.dense(dense_call(wd, L.input, x, p.ldx, R, h, ld));
  for (std::int64_t layer = 0; layer < c.gnn_layers; ++layer) {
    const auto l = static_cast<std::size_t>(layer);
    k.dense(dense_call(wd, L.message[l], h, ld, R, m, ld));
    for (std::int64_t e = 0; e < nb; ++e) {
      k.aggregate({m + e * N * ld, ld, N, ld, nbr + e * N * N, cnt + e * N, agg + e * N * ld, ld});
    }
    k.gru(gru_call(wd, L.update[l], agg, ld, h, ld, R, hn, ld, gw));
    k.layer_norm({hn, ld, R, H, wd + L.gamma, wd + L.beta, c.ln_eps});
    std::swap(h, hn);
  }
  k.gru(gru_call(wd, L.rnn, h, ld, a.hidden != nullptr ? z : nullptr, ld, R, m, ld, gw));
  k.dense(dense_call(wd, L.head0, m, ld, R, q1, p.ldq1));
  k.dense(dense_call(wd, L.head2, q1, p.ldq1, R, q2, p.ldq2));

  const std::int64_t A = c.n_actions;
  for (std::int64_t r = 0; r < R; ++r) {
    const std::int64_t b = b0 + r / N, n = r % N, out = b * N + n;
    float* qo = o.q + out * A;
    float* ho = o.hidden + out * H;
    if (agent_active(a, b, n)) {
      std::memcpy(qo, q2 + r * p.ldq2, static_cast<std::size_t>(A) * sizeof(float));
      std::memcpy(ho, m + r * ld, static_cast<std::size_t>(H) * sizeof(float));
    } else {
      std::fill(qo, qo + A, 0.0f);
      std::fill(ho, ho + H, 0.0f);
    }
  }
  return true;
}

// The reference's error: the first non-finite obs row over the batch, else the first hidden row.
Status forward_non_finite(const QMixConfig& c, const QMixForwardArgs& a) {
  for (const char* name : {"obs", "hidden"}) {
    const bool obs = name[0] == 'o';
    if (!obs && a.hidden == nullptr) break;
    for (std::int64_t b = 0; b < a.B; ++b) {
      for (std::int64_t n = 0; n < a.N; ++n) {
        const bool ok = obs ? row_finite(a.obs + b * a.obs_sb + n * a.obs_sn, a.obs_sd, c.obs_dim)
                            : row_finite(a.hidden + b * a.hid_sb + n * a.hid_sn, a.hid_sd, c.hidden);
        if (!ok) {
          return Status::error(StatusCode::non_finite, name,
                               std::string(name) + " must be finite; got NaN or infinity at episode " +
                                   std::to_string(b) + ", agent " + std::to_string(n));
        }
      }
    }
  }
  return Status::error(StatusCode::non_finite, "obs", "obs must be finite");
}

std::int64_t agent_macs_per_row(const QMixConfig& c) {
  const std::int64_t H = c.hidden;
  return c.obs_dim * H + c.gnn_layers * 7 * H * H + 6 * H * H + H * c.head_hidden + c.head_hidden * c.n_actions;
}

// ---------------------------------------------------------------------------------------------- mixer

struct MixPlan {
  std::int64_t rows = 0, lds = 0, ldq = 0, ldy = 0, ldw1 = 0;
  std::size_t q = 0, s = 0, y = 0, w1 = 0, w2 = 0, b2 = 0, b1 = 0, floats = 0;
};

MixPlan mix_plan(const QMixConfig& c, const QMixWeights::Impl& L, std::int64_t per_tile) {
  MixPlan p;
  p.rows = per_tile;
  p.lds = round_up(c.state_dim, kPanel);
  p.ldq = c.n_agents;
  p.ldy = L.hyper.panels * kPanel;
  p.ldw1 = L.w1.panels * kPanel;
  detail::Layout l;
  p.q = l.take(p.rows * p.ldq);
  p.s = l.take(p.rows * p.lds);
  p.y = l.take(p.rows * p.ldy);
  p.w1 = l.take(p.rows * p.ldw1);
  p.w2 = l.take(p.rows * L.Mp);
  p.b2 = l.take(p.rows * kPanel);
  p.b1 = l.take(c.b1_hidden ? p.rows * L.Mp : 0);
  p.floats = l.size();
  return p;
}

bool mix_tile(const QMixWeights& w, const simd::QmixKernels& k, const QMixMixArgs& a, float* q_tot,
              const MixPlan& p, std::int64_t b0, std::int64_t nb, float* s) {
  const QMixConfig& c = w.config();
  const QMixWeights::Impl& L = w.impl();
  const float* wd = w.data();
  float *q = s + p.q, *st = s + p.s, *y = s + p.y, *w1 = s + p.w1, *w2 = s + p.w2, *b2 = s + p.b2;
  for (std::int64_t e = 0; e < nb; ++e) {
    const std::int64_t b = b0 + e;
    if (!copy_row(a.q_taken + b * a.q_sb, a.q_sa, c.n_agents, p.ldq, q + e * p.ldq)) return false;
    if (!copy_row(a.state + b * a.s_sb, a.s_sd, c.state_dim, p.lds, st + e * p.lds)) return false;
  }
  const std::int64_t Hhp = L.Hhp;
  k.dense(dense_call(wd, L.hyper, st, p.lds, nb, y, p.ldy));
  k.dense(dense_call(wd, L.w1, y, p.ldy, nb, w1, p.ldw1));
  k.dense(dense_call(wd, L.w2, y + Hhp, p.ldy, nb, w2, L.Mp));
  k.dense(dense_call(wd, L.b2, y + 2 * Hhp, p.ldy, nb, b2, kPanel));
  const float* b1 = y + 3 * Hhp;
  std::int64_t ldb1 = p.ldy;
  if (c.b1_hidden) {
    k.dense(dense_call(wd, L.b1, y + 3 * Hhp, p.ldy, nb, s + p.b1, L.Mp));
    b1 = s + p.b1;
    ldb1 = L.Mp;
  }
  k.mix_combine({nb, c.n_agents, L.Mp, q, p.ldq, w1, p.ldw1, b1, ldb1, w2, L.Mp, b2, kPanel, q_tot + b0});
  return true;
}

Status mix_non_finite(const QMixConfig& c, const QMixMixArgs& a) {
  for (const char* name : {"q_taken", "state"}) {
    const bool qt = name[0] == 'q';
    for (std::int64_t b = 0; b < a.B; ++b) {
      const bool ok = qt ? row_finite(a.q_taken + b * a.q_sb, a.q_sa, c.n_agents)
                         : row_finite(a.state + b * a.s_sb, a.s_sd, c.state_dim);
      if (!ok) {
        return Status::error(StatusCode::non_finite, name,
                             std::string(name) + " must be finite; got NaN or infinity at episode " +
                                 std::to_string(b));
      }
    }
  }
  return Status::error(StatusCode::non_finite, "q_taken", "q_taken must be finite");
}

std::int64_t mix_macs_per_row(const QMixConfig& c) {
  const std::int64_t Hh = c.hyper_hidden, M = c.mix_hidden;
  return c.state_dim * (3 * Hh + (c.b1_hidden ? Hh : M)) + Hh * (c.n_agents * M + M + 1 + (c.b1_hidden ? M : 0));
}

}  // namespace

// ---------------------------------------------------------------------------------------------- public

bool parse_qmix_adj_mode(const std::string& name, QMixAdjMode* out) noexcept {
  if (name == "in") {
    *out = QMixAdjMode::in;
  } else if (name == "out_rows") {
    *out = QMixAdjMode::out_rows;
  } else if (name == "sym") {
    *out = QMixAdjMode::sym;
  } else {
    return false;
  }
  return true;
}

Status check_qmix_config(const QMixConfig& c) {
  const std::pair<const char*, std::int64_t> dims[] = {
      {"obs_dim", c.obs_dim},     {"hidden", c.hidden},         {"n_actions", c.n_actions},
      {"head_hidden", c.head_hidden}, {"n_agents", c.n_agents}, {"state_dim", c.state_dim},
      {"mix_hidden", c.mix_hidden},   {"hyper_hidden", c.hyper_hidden}};
  for (const auto& [name, v] : dims) {
    if (v < 1) return invalid(name, std::string(name) + " must be >= 1; got " + std::to_string(v));
  }
  if (c.gnn_layers < 0) return invalid("gnn_layers", "gnn_layers must be >= 0; got " + std::to_string(c.gnn_layers));
  if (!(c.ln_eps > 0.0f)) return invalid("ln_eps", "ln_eps must be > 0");
  return Status::success();
}

std::vector<QMixTensorSpec> qmix_agent_specs(const QMixConfig& c) {
  const std::int64_t H = c.hidden;
  std::vector<QMixTensorSpec> s = {{"agent.input.weight", {H, c.obs_dim}}, {"agent.input.bias", {H}}};
  auto gru = [&](const std::string& p) {
    s.push_back({p + ".weight_ih", {3 * H, H}});
    s.push_back({p + ".weight_hh", {3 * H, H}});
    s.push_back({p + ".bias_ih", {3 * H}});
    s.push_back({p + ".bias_hh", {3 * H}});
  };
  for (std::int64_t l = 0; l < c.gnn_layers; ++l) {
    const std::string p = "agent.gnn." + std::to_string(l);
    s.push_back({p + ".message.weight", {H, H}});
    s.push_back({p + ".message.bias", {H}});
    gru(p + ".update");
  }
  s.push_back({"agent.norm.weight", {H}});
  s.push_back({"agent.norm.bias", {H}});
  gru("agent.rnn");
  s.push_back({"agent.head.0.weight", {c.head_hidden, H}});
  s.push_back({"agent.head.0.bias", {c.head_hidden}});
  s.push_back({"agent.head.2.weight", {c.n_actions, c.head_hidden}});
  s.push_back({"agent.head.2.bias", {c.n_actions}});
  return s;
}

std::vector<QMixTensorSpec> qmix_mixer_specs(const QMixConfig& c) {
  const std::int64_t S = c.state_dim, M = c.mix_hidden, Hh = c.hyper_hidden;
  std::vector<QMixTensorSpec> s;
  auto mlp = [&](const std::string& p, std::int64_t out) {
    s.push_back({p + ".0.weight", {Hh, S}});
    s.push_back({p + ".0.bias", {Hh}});
    s.push_back({p + ".2.weight", {out, Hh}});
    s.push_back({p + ".2.bias", {out}});
  };
  mlp("mixer.hyper_w1", c.n_agents * M);
  if (c.b1_hidden) {
    mlp("mixer.hyper_b1", M);
  } else {
    s.push_back({"mixer.hyper_b1.weight", {M, S}});
    s.push_back({"mixer.hyper_b1.bias", {M}});
  }
  mlp("mixer.hyper_w2", M);
  mlp("mixer.hyper_b2", 1);
  return s;
}

void QMixWeights::Free::operator()(float* p) const noexcept { ::operator delete(p, std::align_val_t{64}); }

QMixWeights::QMixWeights() = default;
QMixWeights::~QMixWeights() = default;

Status QMixWeights::create(const QMixConfig& c, const std::vector<const float*>& agent,
                           const std::vector<const float*>& mixer, std::shared_ptr<const QMixWeights>* out) {
  TOPOROUTE_RETURN_IF_ERROR(check_qmix_config(c));
  const std::size_t n_agent = qmix_agent_specs(c).size(), n_mixer = qmix_mixer_specs(c).size();
  if (agent.size() != n_agent) {
    return invalid("agent", "agent must hold " + std::to_string(n_agent) + " tensors; got " + std::to_string(agent.size()));
  }
  if (!mixer.empty() && mixer.size() != n_mixer) {
    return invalid("mixer", "mixer must hold " + std::to_string(n_mixer) + " tensors or none; got " +
                                std::to_string(mixer.size()));
  }
  for (const float* p : agent) {
    if (p == nullptr) return invalid("agent", "agent tensors must not be null");
  }
  for (const float* p : mixer) {
    if (p == nullptr) return invalid("mixer", "mixer tensors must not be null");
  }

  std::shared_ptr<QMixWeights> w(new (std::nothrow) QMixWeights());
  if (!w) return Status::out_of_memory("QMixWeights", "the weights object", sizeof(QMixWeights));
  w->config_ = c;
  w->has_mixer_ = !mixer.empty();
  w->impl_.reset(new (std::nothrow) Impl());
  if (!w->impl_) return Status::out_of_memory("QMixWeights", "the weight layout", sizeof(Impl));
  Impl& L = *w->impl_;
  const std::int64_t H = c.hidden;
  detail::Layout layout;
  L.input = layout.dense(c.obs_dim, H, true);
  for (std::int64_t l = 0; l < c.gnn_layers; ++l) {
    L.message.push_back(layout.dense(H, H, true));
    L.update.push_back(layout.gru(H, H));
  }
  L.gamma = layout.take(H);
  L.beta = layout.take(H);
  L.rnn = layout.gru(H, H);
  L.head0 = layout.dense(H, c.head_hidden, true);
  L.head2 = layout.dense(c.head_hidden, c.n_actions, false);
  if (w->has_mixer_) {
    L.Hhp = round_up(c.hyper_hidden, kPanel);
    L.Mp = round_up(c.mix_hidden, kPanel);
    L.hyper = layout.dense(c.state_dim, 3 * L.Hhp + (c.b1_hidden ? L.Hhp : L.Mp), true);
    if (!c.b1_hidden) L.hyper.relu_panels = 3 * L.Hhp / kPanel;
    L.w1 = layout.dense(c.hyper_hidden, c.n_agents * L.Mp, false);
    L.w2 = layout.dense(c.hyper_hidden, c.mix_hidden, false);
    L.b2 = layout.dense(c.hyper_hidden, 1, false);
    if (c.b1_hidden) L.b1 = layout.dense(c.hyper_hidden, c.mix_hidden, false);
  }

  // The AMX copies (bf16x3 of every weight: 1.5 times the float32 bytes) only where the tiles can run.
  if (isa_supported(Isa::amx)) {
    layout.amx(L.input);
    for (auto& d : L.message) layout.amx(d);
    for (auto& g : L.update) layout.amx(g);
    layout.amx(L.rnn);
    layout.amx(L.head0);
    layout.amx(L.head2);
    if (w->has_mixer_) {
      for (detail::DenseLayer* d : {&L.hyper, &L.w1, &L.w2, &L.b2}) layout.amx(*d);
      if (c.b1_hidden) layout.amx(L.b1);
    }
  }
  w->floats_ = layout.size();
  w->data_.reset(static_cast<float*>(
      ::operator new(std::max<std::size_t>(w->floats_, 1) * sizeof(float), std::align_val_t{64}, std::nothrow)));
  if (!w->data_) {
    return Status::out_of_memory("QMixWeights", "the packed weights",
                                 static_cast<std::uint64_t>(std::max<std::size_t>(w->floats_, 1)) * sizeof(float));
  }
  float* base = w->data_.get();
  std::fill(base, base + w->floats_, 0.0f);

  std::size_t t = 0;
  auto next = [&agent, &t]() { return agent[t++]; };
  {
    const float* wt = next();
    detail::fill_dense(base, L.input, wt, next(), H);
  }
  for (std::size_t l = 0; l < L.message.size(); ++l) {
    const float* wt = next();
    detail::fill_dense(base, L.message[l], wt, next(), H);
    const float *wih = next(), *whh = next(), *bih = next(), *bhh = next();
    detail::fill_gru(base, L.update[l], wih, whh, bih, bhh);
  }
  std::copy(agent[t], agent[t] + H, base + L.gamma);
  std::copy(agent[t + 1], agent[t + 1] + H, base + L.beta);
  t += 2;
  {
    const float *wih = next(), *whh = next(), *bih = next(), *bhh = next();
    detail::fill_gru(base, L.rnn, wih, whh, bih, bhh);
  }
  {
    const float* wt = next();
    detail::fill_dense(base, L.head0, wt, next(), c.head_hidden);
    const float* w2 = next();
    detail::fill_dense(base, L.head2, w2, next(), c.n_actions);
  }
  if (w->has_mixer_) {
    const std::int64_t Hh = c.hyper_hidden, M = c.mix_hidden, Hhp = L.Hhp, Mp = L.Mp;
    std::size_t u = 0;
    auto m = [&mixer, &u]() { return mixer[u++]; };
    // hyper_w1: first layer into segment 0, second regrouped per agent
    const float *w1a = m(), *b1a = m(), *w1b = m(), *b1b = m();
    detail::fill_dense(base, L.hyper, w1a, b1a, Hh, 0);
    detail::fill_dense_mapped(base, L.w1, w1b, b1b, c.n_agents * M,
                       [M, Mp](std::int64_t o) { return o / M * Mp + o % M; });
    if (c.b1_hidden) {
      const float *wa = m(), *ba = m(), *wb = m(), *bb = m();
      detail::fill_dense(base, L.hyper, wa, ba, Hh, 3 * Hhp);
      detail::fill_dense(base, L.b1, wb, bb, M);
    } else {
      const float* wa = m();
      detail::fill_dense(base, L.hyper, wa, m(), M, 3 * Hhp);
    }
    const float *w2a = m(), *b2a = m(), *w2b = m(), *b2b = m();
    detail::fill_dense(base, L.hyper, w2a, b2a, Hh, Hhp);
    detail::fill_dense(base, L.w2, w2b, b2b, M);
    const float *wba = m(), *bba = m(), *wbb = m(), *bbb = m();
    detail::fill_dense(base, L.hyper, wba, bba, Hh, 2 * Hhp);
    detail::fill_dense(base, L.b2, wbb, bbb, 1);
  }
  detail::pack_amx(base, L.input);
  for (const auto& d : L.message) detail::pack_amx(base, d);
  for (const auto& g : L.update) detail::pack_amx(base, g);
  detail::pack_amx(base, L.rnn);
  detail::pack_amx(base, L.head0);
  detail::pack_amx(base, L.head2);
  if (w->has_mixer_) {
    for (const detail::DenseLayer* d : {&L.hyper, &L.w1, &L.w2, &L.b2}) detail::pack_amx(base, *d);
    if (c.b1_hidden) detail::pack_amx(base, L.b1);
  }
  *out = std::move(w);
  return Status::success();
}

Status qmix_forward(const QMixWeights& w, const QMixForwardArgs& a, const QMixForwardOut& o, Isa isa) {
  const QMixConfig& c = w.config();
  if (a.B < 0 || a.N < 0) return invalid("obs", "obs must have non-negative dimensions");
  if (a.B * a.N == 0) return Status::success();
  if (a.obs == nullptr) return invalid("obs", "obs is missing");
  if (a.adj == nullptr) return invalid("adj", "adj is missing");
  if (o.q == nullptr || o.hidden == nullptr) return invalid("out", "outputs are missing");

  const Schedule s = schedule(a.B, a.N, a.N * agent_macs_per_row(c));
  const ForwardPlan plan = forward_plan(c, s.per_tile, a.N);
  const simd::QmixKernels& k = simd::qmix_kernels_for(isa);
  return run_tiles(
      "qmix_forward", a.B, s, plan.floats,
      [&](std::int64_t b0, std::int64_t nb, float* scratch) { return forward_tile(w, k, a, o, plan, b0, nb, scratch); },
      [&] { return forward_non_finite(c, a); });
}

Status qmix_mix(const QMixWeights& w, const QMixMixArgs& a, float* q_tot, Isa isa) {
  const QMixConfig& c = w.config();
  if (!w.has_mixer()) return invalid("params", "these qmix weights hold no mixer (an inference-only checkpoint)");
  if (a.B < 0) return invalid("q_taken", "q_taken must have non-negative dimensions");
  if (a.B == 0) return Status::success();
  if (a.q_taken == nullptr || a.state == nullptr || q_tot == nullptr) {
    return invalid(a.q_taken == nullptr ? "q_taken" : "state", "mixer inputs or output are missing");
  }
  const Schedule s = schedule(a.B, 1, mix_macs_per_row(c));
  const MixPlan plan = mix_plan(c, w.impl(), s.per_tile);
  const simd::QmixKernels& k = simd::qmix_kernels_for(isa);
  return run_tiles(
      "qmix_mix", a.B, s, plan.floats,
      [&](std::int64_t b0, std::int64_t nb, float* scratch) { return mix_tile(w, k, a, q_tot, plan, b0, nb, scratch); },
      [&] { return mix_non_finite(c, a); });
}

namespace {

constexpr std::int64_t kQMixActions = 6;  // solo, broadcast, selective_query, aggregate, execute_verify, debate

// Whether `goal` is reachable from `start` along `rows` (bit d of rows[s]: the edge s -> d), breadth first.
bool reaches(const std::uint64_t* rows, int start, int goal) noexcept {
  std::uint64_t seen = 0, frontier = std::uint64_t{1} << start;
  while (frontier != 0) {
    if ((frontier >> goal) & 1U) return true;
    seen |= frontier;
    std::uint64_t next = 0;
    for (std::uint64_t f = frontier; f != 0; f &= f - 1) next |= rows[__builtin_ctzll(f)];
    frontier = next & ~seen;
  }
  return false;
}

void add_edge(std::uint64_t* rows, int s, int d) noexcept {
  if (s != d && ((rows[s] >> d) & 1U) == 0 && !reaches(rows, d, s)) rows[s] |= std::uint64_t{1} << d;
}

// One joint action: agents in index order, partners in increasing order (the reference's loop, on bit rows).
void phi_one(const IntView& actions, std::int64_t b, int n, std::uint8_t* adj, std::int32_t* debate) noexcept {
  std::uint64_t rows[64] = {};
  for (int i = 0; i < n; ++i) {
    debate[i] = -1;
    switch (actions.at(b, i)) {
      case 1:
        for (int j = 0; j < n; ++j) add_edge(rows, i, j);
        break;
      case 2:
        add_edge(rows, i, (i + 1) % n);
        break;
      case 3:
        for (int j = 0; j < n; ++j) add_edge(rows, j, i);
        break;
      case 4:
        if (i + 1 < n) add_edge(rows, i, i + 1);
        break;
      case 5: {
        const int p = (i + n / 2) % n;
        if (p != i && !reaches(rows, p, i)) {
          rows[i] |= std::uint64_t{1} << p;
          rows[p] |= std::uint64_t{1} << i;
          debate[i] = p;
        }
        break;
      }
      default:
        break;
    }
  }
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) adj[s * n + d] = static_cast<std::uint8_t>((rows[s] >> d) & 1U);
  }
}

}  // namespace

Status qmix_graph(const IntView& actions, std::int64_t B, std::int64_t N, std::uint8_t* adj, std::int32_t* debate) {
  if (N > 64) {
    return Status::error(StatusCode::invalid_argument, "actions",
                         "actions must hold at most 64 agents; got N = " + std::to_string(N));
  }
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < N; ++i) {
      const std::int64_t a = actions.at(b, i);
      if (a < 0 || a >= kQMixActions) {
        return Status::error(StatusCode::out_of_range, "actions",
                             "actions must be in 0.." + std::to_string(kQMixActions - 1) + "; got " +
                                 std::to_string(a) + " at episode " + std::to_string(b) + ", agent " +
                                 std::to_string(i));
      }
    }
  }
  const int n = static_cast<int>(N);
  const int threads = B * N * N < detail::kParallelWork ? 1 : detail::team_size(B);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t b = 0; b < B; ++b) phi_one(actions, b, n, adj + b * N * N, debate + b * N);
  return Status::success();
}

}  // namespace toporoute
