// HiVA bandit kernels (see toporoute/bandit.hpp and backends/_reference_bandit.py, whose docstring defines the
// counter layout and the draw sequence). Every float64 expression is written in the reference's order and the
// file is compiled without FMA contraction (CMakeLists.txt), so theta and the updates equal the reference's bit
// for bit; log, cos, exp and pow are the C library's, as the reference's math.* calls are.
#include "toporoute/bandit.hpp"

#include "toporoute/bandit_draw.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "bits.hpp"
#include "parallel.hpp"

namespace toporoute {

void philox4x32_10(std::uint32_t ctr[4], std::uint64_t seed) noexcept { draw::philox(ctr, seed); }

namespace {

// The draws' building blocks are shared with the CUDA kernel (toporoute/bandit_draw.hpp).
using draw::attempts_from;
using draw::beta_of;
using draw::boost;
using draw::gamma_shape;
using draw::GammaDraw;
using draw::GammaShape;
using draw::kHalfPi;
using draw::signed_cos;
using draw::u31;
using draw::u32;
using draw::u53;

std::string format_value(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Input checks, in the reference's order: each kind of fault over every graph before the next kind.
enum Fault : int {
  kAlphaNonFinite,
  kAlphaNonPositive,
  kBetaNonFinite,
  kBetaNonPositive,
  kWeightsNonFinite,
  kWeightsNegative,
  kFaults
};

bool is_active(const BanditSelectArgs& a, std::int64_t b, std::int64_t n) {
  return a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0;
}

// Bit f set when graph b has fault f; the first offending entry of fault f goes to *where.
unsigned faults_of(const BanditSelectArgs& a, std::int64_t b, int only = -1, std::int64_t* where = nullptr,
                   float* value = nullptr) {
  unsigned bits = 0;
  auto hit = [&](int f, std::int64_t at, float v) {
    if (only == f && !(bits >> f & 1u)) {
      *where = at;
      *value = v;
    }
    bits |= 1u << f;
  };
  for (std::int64_t n = 0; n < a.N; ++n) {
    if (!is_active(a, b, n)) continue;
    const float al = a.alpha[b * a.al_sb + n * a.al_sn];
    const float be = a.beta[b * a.be_sb + n * a.be_sn];
    if (!std::isfinite(al)) hit(kAlphaNonFinite, n, al);
    else if (!(al > 0.0f)) hit(kAlphaNonPositive, n, al);
    if (!std::isfinite(be)) hit(kBetaNonFinite, n, be);
    else if (!(be > 0.0f)) hit(kBetaNonPositive, n, be);
  }
  if (a.weights != nullptr) {
    for (std::int64_t s = 0; s < a.N; ++s) {
      for (std::int64_t d = 0; d < a.N; ++d) {
        const float w = a.weights[b * a.w_sb + s * a.w_sr + d * a.w_sc];
        if (!std::isfinite(w)) hit(kWeightsNonFinite, s * a.N + d, w);
        else if (w < 0.0f) hit(kWeightsNegative, s * a.N + d, w);
      }
    }
  }
  return bits;
}

Status fault_status(const BanditSelectArgs& a, int f, std::int64_t b) {
  std::int64_t where = 0;
  float value = 0.0f;
  faults_of(a, b, f, &where, &value);
  static const char* const names[kFaults] = {"alpha", "alpha", "beta", "beta", "weights", "weights"};
  const std::string name = names[f];
  std::string at = " at graph " + std::to_string(b) + ", node ";
  if (f >= kWeightsNonFinite) {
    at += std::to_string(where / a.N) + ", successor " + std::to_string(where % a.N);
  } else {
    at += std::to_string(where);
  }
  const bool finite = f == kAlphaNonFinite || f == kBetaNonFinite || f == kWeightsNonFinite;
  if (finite) {
    return Status::error(StatusCode::non_finite, name, name + " must be finite; got " + format_value(value) + at);
  }
  const std::string want = f == kWeightsNegative ? ">= 0" : "> 0";
  return Status::error(StatusCode::out_of_range, name,
                       name + " must be " + want + "; got " + format_value(value) + at);
}

struct Candidate {
  float score;
  std::int32_t index;
};

// Descending score, ties to the lower index.
inline bool better(const Candidate& x, const Candidate& y) {
  return x.score > y.score || (x.score == y.score && x.index < y.index);
}

// Keeps the best `K` of `count` candidates at the front of cand, best first; returns how many are kept.
inline std::int64_t top_k(Candidate* cand, std::int64_t count, std::int64_t K) {
  const std::int64_t kept = std::min(count, K);
  std::partial_sort(cand, cand + kept, cand + count, better);
  return kept;
}

// Scores are >= 0 (theta in [0, 1] times a weight >= 0, never NaN), so their bits order like the floats; the key
// (bits << 32 | ~index) orders candidates as `better` does, and a key is never 0 (index < 2^31).
inline std::uint64_t rank_key(float score, std::int64_t index) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &score, sizeof bits);
  bits &= 0x7FFFFFFFu;  // -0.0 as +0.0
  return (std::uint64_t{bits} << 32) | (~static_cast<std::uint32_t>(index));
}

// The best K <= kSmallK keys, best first, by branchless max/min steps (random scores defeat branch prediction);
// empty slots hold 0.
constexpr std::int64_t kSmallK = 4;
struct SmallTop {
  std::uint64_t key[kSmallK] = {0, 0, 0, 0};
  template <int K>
  void push(std::uint64_t x) {
    for (int j = 0; j < K; ++j) {
      const std::uint64_t more = std::uint64_t{0} - static_cast<std::uint64_t>(x > key[j]);  // all ones when x wins
      const std::uint64_t hi = (x & more) | (key[j] & ~more);
      x ^= key[j] ^ hi;  // the loser goes on down
      key[j] = hi;
    }
  }
};

// Draws are made kChunk nodes at a time, stage by stage over the chunk's 2 kChunk gamma lanes (lane 2i: X of node
// i, 2i + 1: Y), so that independent Philox blocks and libm calls overlap in the pipeline (one draw alone is a
// chain of dependent latencies). Every lane computes exactly what attempt(), boost() and beta_of() compute.
constexpr int kChunk = 64;
constexpr int kLanes = 2 * kChunk;

// Attempt-0 blocks (0, lane[l], graph, step) of L lanes; a loop over lanes inside each round (vectorisable).
void philox_first_blocks(const std::uint32_t* lane, std::uint32_t graph, std::uint32_t step, std::uint64_t seed,
                         int L, std::uint32_t (&w)[4][kLanes]) {
  for (int l = 0; l < L; ++l) {
    w[0][l] = 0;
    w[1][l] = lane[l];
    w[2][l] = graph;
    w[3][l] = step;
  }
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    for (int l = 0; l < L; ++l) {
      const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * w[0][l];
      const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * w[2][l];
      w[0][l] = static_cast<std::uint32_t>(p1 >> 32) ^ w[1][l] ^ k0;
      w[1][l] = static_cast<std::uint32_t>(p1);
      w[2][l] = static_cast<std::uint32_t>(p0 >> 32) ^ w[3][l] ^ k1;
      w[3][l] = static_cast<std::uint32_t>(p0);
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// theta of every node of graph b (0 for inactive nodes). Attempt 0 of every lane runs as a sequence of loops over
// the lanes (each libm call in its own loop, the arithmetic between them vectorisable): the same operations on
// the same values as attempt(), without one lane's latency chain stalling the next.
void draw_graph(const BanditSelectArgs& a, std::int64_t b, std::uint32_t graph, float* theta) {
  std::uint32_t node[kChunk];
  std::uint32_t lane[kLanes];
  GammaShape g[kLanes];
  std::uint32_t w[4][kLanes];
  double r[kLanes], cs[kLanes], dv[kLanes];
  bool done[kLanes];
  for (std::int64_t n0 = 0; n0 < a.N; n0 += kChunk) {
    int count = 0;
    for (std::int64_t n = n0; n < std::min(a.N, n0 + kChunk); ++n) {
      if (!is_active(a, b, n)) {
        theta[n] = 0.0f;
        continue;
      }
      const auto id = static_cast<std::uint32_t>(n);
      node[count] = id;
      lane[2 * count] = 2 * id;
      lane[2 * count + 1] = 2 * id + 1;
      g[2 * count].a = a.alpha[b * a.al_sb + n * a.al_sn];
      g[2 * count + 1].a = a.beta[b * a.be_sb + n * a.be_sn];
      ++count;
    }
    const int L = 2 * count;
    for (int l = 0; l < L; ++l) g[l] = gamma_shape(g[l].a);
    philox_first_blocks(lane, graph, a.step, a.seed, L, w);
    for (int l = 0; l < L; ++l) r[l] = std::log(u53(w[0][l], w[1][l]));
    for (int l = 0; l < L; ++l) r[l] = std::sqrt(-2.0 * r[l]);
    for (int l = 0; l < L; ++l) cs[l] = std::cos(kHalfPi * u31(w[2][l]));
    for (int l = 0; l < L; ++l) {
      const double z = signed_cos(w[2][l], r[l] * cs[l]);
      const double u = u32(w[3][l]);
      double v = 1.0 + g[l].c * z;
      done[l] = false;
      if (!(v > 0.0)) continue;
      v = v * v * v;
      if (v == 0.0) continue;
      const double x2 = z * z;
      dv[l] = g[l].d * v;
      done[l] = u < 1.0 - 0.0331 * x2 * x2;
      if (!done[l]) done[l] = std::log(u) < 0.5 * x2 + g[l].d * (1.0 - v + std::log(v));  // rare
    }
    for (int l = 0; l < L; ++l) {
      if (!done[l]) dv[l] = attempts_from(g[l], a.seed, lane[l], graph, a.step, 1);
    }
    for (int i = 0; i < count; ++i) {
      const int lx = 2 * i, ly = 2 * i + 1;
      const GammaDraw x = boost(g[lx], dv[lx], a.seed, lane[lx], graph, a.step);
      const GammaDraw y = boost(g[ly], dv[ly], a.seed, lane[ly], graph, a.step);
      theta[node[i]] = beta_of(x, y, g[lx].a, g[ly].a);
    }
  }
}

// Pushes every candidate of the bit set m (weight > 0 when there are weights) into top.
template <int K>
void push_row(SmallTop& top, std::uint64_t m, const float* theta, const float* wrow, std::int64_t w_sc) {
  while (m != 0) {
    const int d = __builtin_ctzll(m);
    m &= m - 1;
    if (wrow == nullptr) {
      top.push<K>(rank_key(theta[d], d));
    } else {
      const float w = wrow[d * w_sc];
      if (w > 0.0f) top.push<K>(rank_key(theta[d] * w, d));
    }
  }
}

void select_graph(const BanditSelectArgs& a, const BanditSelectOut& o, std::int64_t b, Candidate* cand) {
  const std::int64_t N = a.N, K = a.k;
  const std::uint32_t graph = a.graph_offset + static_cast<std::uint32_t>(b);
  float* theta = o.theta + b * N;
  if (a.mode == BanditMode::thompson) {
    draw_graph(a, b, graph, theta);
  } else {
    for (std::int64_t n = 0; n < N; ++n) {
      const double x = a.alpha[b * a.al_sb + n * a.al_sn];
      const double y = a.beta[b * a.be_sb + n * a.be_sn];
      theta[n] = is_active(a, b, n) ? static_cast<float>(x / (x + y)) : 0.0f;
    }
  }
  std::uint8_t* chosen = o.chosen + b * N * N;
  std::int32_t* choices = o.choices + b * N * K;
  std::memset(chosen, 0, static_cast<std::size_t>(N * N));
  std::fill(choices, choices + N * K, -1);
  const std::uint8_t* g = a.adj + b * a.adj_sb;
  const float* wg = a.weights == nullptr ? nullptr : a.weights + b * a.w_sb;
  const bool bits = N <= 64;
  std::uint64_t alive = 0;
  if (bits) {
    for (std::int64_t n = 0; n < N; ++n) alive |= std::uint64_t{is_active(a, b, n)} << n;
  }
  for (std::int64_t s = 0; s < N; ++s) {
    if (!is_active(a, b, s)) continue;
    const std::uint8_t* row = g + s * a.adj_sr;
    const float* wrow = wg == nullptr ? nullptr : wg + s * a.w_sr;
    if (bits && K <= kSmallK) {
      SmallTop top;
      const std::uint64_t m = detail::row_bits(row, a.adj_sc, N) & alive & ~(std::uint64_t{1} << s);
      switch (K) {
        case 1: push_row<1>(top, m, theta, wrow, a.w_sc); break;
        case 2: push_row<2>(top, m, theta, wrow, a.w_sc); break;
        case 3: push_row<3>(top, m, theta, wrow, a.w_sc); break;
        default: push_row<4>(top, m, theta, wrow, a.w_sc); break;
      }
      for (std::int64_t r = 0; r < K && top.key[r] != 0; ++r) {
        const std::int32_t d = static_cast<std::int32_t>(~static_cast<std::uint32_t>(top.key[r]));
        choices[s * K + r] = d;
        chosen[s * N + d] = 1;
      }
      continue;
    }
    std::int64_t count = 0;
    auto take = [&](std::int64_t d) {
      if (wrow == nullptr) {
        cand[count++] = {theta[d], static_cast<std::int32_t>(d)};
        return;
      }
      const float w = wrow[d * a.w_sc];
      if (w > 0.0f) cand[count++] = {theta[d] * w, static_cast<std::int32_t>(d)};
    };
    for (std::int64_t d = 0; d < N; ++d) {
      if (d != s && row[d * a.adj_sc] != 0 && is_active(a, b, d)) take(d);
    }
    const std::int64_t kept = top_k(cand, count, K);
    for (std::int64_t r = 0; r < kept; ++r) {
      choices[s * K + r] = cand[r].index;
      chosen[s * N + cand[r].index] = 1;
    }
  }
}

// run(b, slot) for every graph b < B: on the calling thread, or on `threads` OpenMP threads when `parallel`, each
// with its own scratch slot.
template <class Run>
void for_each_graph(std::int64_t B, bool parallel, int threads, const detail::TeamScratch& scratch, const Run& run) {
  if (!parallel) {
    for (std::int64_t b = 0; b < B; ++b) run(b, scratch.slot(0));
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    unsigned char* slot = scratch.slot(detail::thread_index());
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t b = 0; b < B; ++b) run(b, slot);
  }
}

}  // namespace

Status check_bandit_select(const BanditSelectArgs& a) {
  std::int64_t first[kFaults] = {-1, -1, -1, -1, -1, -1};
  for (std::int64_t b = 0; b < a.B; ++b) {
    const unsigned bits = faults_of(a, b);
    for (int f = 0; f < kFaults; ++f) {
      if ((bits >> f & 1u) && first[f] < 0) first[f] = b;
    }
  }
  for (int f = 0; f < kFaults; ++f) {
    if (first[f] >= 0) return fault_status(a, f, first[f]);
  }
  return Status::success();
}

Status bandit_select(const BanditSelectArgs& a, const BanditSelectOut& o) {
  if (a.B < 0 || a.N < 0 || a.k < 1) {
    return Status::error(StatusCode::invalid_argument, "k", "bandit_select: negative dimensions or k < 1");
  }
  // thompson: about 64 scalar operations per draw; the top-k pass reads N entries per source
  const std::int64_t work = a.B * a.N * (a.N + (a.mode == BanditMode::thompson ? 256 : 1));
  const bool parallel = work >= detail::kParallelWork;
  const int threads = parallel ? detail::team_size(a.B) : 1;
  const detail::TeamScratch scratch(static_cast<std::uint64_t>(a.N) * sizeof(Candidate), threads);
  if (!scratch.ok()) return scratch.failure("bandit_select", "per-thread scratch");
  detail::FirstError first[kFaults] = {detail::FirstError(a.B), detail::FirstError(a.B), detail::FirstError(a.B),
                                       detail::FirstError(a.B), detail::FirstError(a.B), detail::FirstError(a.B)};
  auto run = [&](std::int64_t b, unsigned char* slot) {
    const unsigned bits = faults_of(a, b);
    if (bits != 0) {
      for (int f = 0; f < kFaults; ++f) {
        if (bits >> f & 1u) first[f].record(b);
      }
      return;
    }
    select_graph(a, o, b, reinterpret_cast<Candidate*>(slot));
  };
  for_each_graph(a.B, parallel, threads, scratch, run);
  for (int f = 0; f < kFaults; ++f) {
    if (first[f].any()) return fault_status(a, f, first[f].get());
  }
  return Status::success();
}

namespace {

// The first entry of a (B, N) or (B, N, N) float array that is not finite, or (after a clean finite pass) outside
// [lo, hi]; reported as the reference does.
struct RangeCheck {
  const char* name;
  const float* data;
  const std::int64_t* strides;  // rank entries
  int rank;
  double lo, hi;
  bool open_lo;  // > lo instead of >= lo
};

Status check_range(const RangeCheck& c, std::int64_t B, std::int64_t N) {
  const std::int64_t inner = c.rank == 3 ? N : 1;
  for (const bool finite_pass : {true, false}) {
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t i = 0; i < N; ++i) {
        for (std::int64_t j = 0; j < inner; ++j) {
          const float v = c.data[b * c.strides[0] + i * c.strides[1] + (c.rank == 3 ? j * c.strides[2] : 0)];
          const bool bad = finite_pass ? !std::isfinite(v)
                                       : (c.open_lo ? !(v > c.lo) : v < c.lo) || v > c.hi;
          if (!bad) continue;
          const std::string name = c.name;
          std::string at = " at graph " + std::to_string(b) + ", node " + std::to_string(i);
          if (c.rank == 3) at += ", successor " + std::to_string(j);
          if (finite_pass) {
            return Status::error(StatusCode::non_finite, name,
                                 name + " must be finite; got " + format_value(v) + at);
          }
          std::string want;
          if (std::isinf(c.hi)) {
            want = (c.open_lo ? "> " : ">= ") + format_value(static_cast<float>(c.lo));
          } else {
            want = "in [" + format_value(static_cast<float>(c.lo)) + ", " + format_value(static_cast<float>(c.hi)) +
                   "]";
          }
          return Status::error(StatusCode::out_of_range, name,
                               name + " must be " + want + "; got " + format_value(v) + at);
        }
      }
    }
  }
  return Status::success();
}

constexpr double kInf = HUGE_VAL;

// The first input error of bandit_update in the reference's order (success when there is none).
Status update_fault(const BanditUpdateArgs& a) {
  const std::int64_t al_s[2] = {a.al_sb, a.al_sn}, be_s[2] = {a.be_sb, a.be_sn}, re_s[2] = {a.re_sb, a.re_sn};
  const std::int64_t dt_s[2] = {a.dt_sb, a.dt_sn}, km_s[2] = {a.km_sb, a.km_sn};
  TOPOROUTE_RETURN_IF_ERROR(check_range({"alpha", a.alpha, al_s, 2, 0.0, kInf, true}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"beta", a.beta, be_s, 2, 0.0, kInf, true}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"reward", a.reward, re_s, 2, 0.0, 1.0, false}, a.B, a.N));
  if (a.dt != nullptr) TOPOROUTE_RETURN_IF_ERROR(check_range({"dt", a.dt, dt_s, 2, 0.0, kInf, false}, a.B, a.N));
  if (a.km != nullptr) TOPOROUTE_RETURN_IF_ERROR(check_range({"km", a.km, km_s, 2, 0.0, 1.0, false}, a.B, a.N));
  return Status::success();
}

// The first input error of synergy_update in the reference's order (success when there is none).
Status synergy_fault(const SynergyUpdateArgs& a) {
  const std::int64_t re_s[2] = {a.re_sb, a.re_sn};
  TOPOROUTE_RETURN_IF_ERROR(check_range({"c_syn", a.c_syn, a.c_s, 3, -kInf, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"edge_alpha", a.edge_alpha, a.ea_s, 3, 0.0, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"edge_beta", a.edge_beta, a.eb_s, 3, 0.0, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"routed", a.routed, a.r_s, 3, 0.0, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"reward", a.reward, re_s, 2, 0.0, 1.0, false}, a.B, a.N));
  return Status::success();
}

// v in [lo, hi] and finite, as one pair of comparisons (NaN fails both): the per-graph pass that runs with the
// update; only when it fails does the ordered search above run (serially) to name the first error.
constexpr float kMax = 3.4028234663852886e38f;
constexpr float kTiny = 1.4e-45f;  // the smallest positive float: v >= kTiny means v > 0
inline bool within(float v, float lo, float hi) { return v >= lo && v <= hi; }

}  // namespace

Status bandit_update(const BanditUpdateArgs& a, const BanditUpdateOut& o) {
  const double prior = a.prior, delta = a.delta;
  detail::FirstError bad(a.B);
  auto row = [&](std::int64_t b) {
    bool ok = true;
    for (std::int64_t n = 0; n < a.N; ++n) {
      ok &= within(a.alpha[b * a.al_sb + n * a.al_sn], kTiny, kMax);
      ok &= within(a.beta[b * a.be_sb + n * a.be_sn], kTiny, kMax);
      ok &= within(a.reward[b * a.re_sb + n * a.re_sn], 0.0f, 1.0f);
      if (a.dt != nullptr) ok &= within(a.dt[b * a.dt_sb + n * a.dt_sn], 0.0f, kMax);
      if (a.km != nullptr) ok &= within(a.km[b * a.km_sb + n * a.km_sn], 0.0f, 1.0f);
    }
    if (!ok) {
      bad.record(b);
      return;
    }
    for (std::int64_t n = 0; n < a.N; ++n) {
      const double g =
          a.dt == nullptr ? a.gamma : std::pow(a.gamma, static_cast<double>(a.dt[b * a.dt_sb + n * a.dt_sn]));
      const double r = a.reward[b * a.re_sb + n * a.re_sn];
      double win = r, loss = 1.0 - r;
      if (a.km != nullptr) {
        const double m = a.km[b * a.km_sb + n * a.km_sn];
        win = r + delta * m;
        loss = 1.0 - r + delta * (1.0 - m);
      }
      const bool sel = a.selected[b * a.se_sb + n * a.se_sn] != 0;
      const double al = a.alpha[b * a.al_sb + n * a.al_sn];
      const double be = a.beta[b * a.be_sb + n * a.be_sn];
      o.alpha[b * a.N + n] = static_cast<float>(prior + g * (al - prior) + (sel ? win : 0.0));
      o.beta[b * a.N + n] = static_cast<float>(prior + g * (be - prior) + (sel ? loss : 0.0));
    }
  };
  if (a.B * a.N * 16 < detail::kParallelWork) {
    for (std::int64_t b = 0; b < a.B; ++b) row(b);
  } else {
#pragma omp parallel for schedule(static) num_threads(detail::team_size(a.B))
    for (std::int64_t b = 0; b < a.B; ++b) row(b);
  }
  return bad.any() ? update_fault(a) : Status::success();
}

Status synergy_update(const SynergyUpdateArgs& a, const SynergyUpdateOut& o) {
  const std::int64_t N = a.N;
  const double lr = a.lr;
  detail::FirstError bad(a.B);
  auto graph = [&](std::int64_t b) {
    bool ok = true;
    for (std::int64_t j = 0; j < N; ++j) ok &= within(a.reward[b * a.re_sb + j * a.re_sn], 0.0f, 1.0f);
    for (std::int64_t i = 0; i < N; ++i) {
      for (std::int64_t j = 0; j < N; ++j) {
        ok &= within(a.c_syn[b * a.c_s[0] + i * a.c_s[1] + j * a.c_s[2]], -kMax, kMax);
        ok &= within(a.edge_alpha[b * a.ea_s[0] + i * a.ea_s[1] + j * a.ea_s[2]], 0.0f, kMax);
        ok &= within(a.edge_beta[b * a.eb_s[0] + i * a.eb_s[1] + j * a.eb_s[2]], 0.0f, kMax);
        ok &= within(a.routed[b * a.r_s[0] + i * a.r_s[1] + j * a.r_s[2]], 0.0f, kMax);
      }
    }
    if (!ok) {
      bad.record(b);
      return;
    }
    for (std::int64_t i = 0; i < N; ++i) {
      for (std::int64_t j = 0; j < N; ++j) {
        const float c = a.c_syn[b * a.c_s[0] + i * a.c_s[1] + j * a.c_s[2]];
        const float ea = a.edge_alpha[b * a.ea_s[0] + i * a.ea_s[1] + j * a.ea_s[2]];
        const float eb = a.edge_beta[b * a.eb_s[0] + i * a.eb_s[1] + j * a.eb_s[2]];
        const float routed = a.routed[b * a.r_s[0] + i * a.r_s[1] + j * a.r_s[2]];
        const std::int64_t at = (b * N + i) * N + j;
        if (!(routed > 0.0f)) {
          o.c_syn[at] = c;
          o.edge_alpha[at] = ea;
          o.edge_beta[at] = eb;
          continue;
        }
        const double r = a.reward[b * a.re_sb + j * a.re_sn];
        const float ea2 = static_cast<float>(static_cast<double>(ea) + r);
        const float eb2 = static_cast<float>(static_cast<double>(eb) + (1.0 - r));
        const double ea64 = ea2, eb64 = eb2;
        o.edge_alpha[at] = ea2;
        o.edge_beta[at] = eb2;
        const double gain = lr * (ea64 / (ea64 + eb64)) * static_cast<double>(routed);
        o.c_syn[at] = static_cast<float>(static_cast<double>(c) + gain);
      }
    }
  };
  if (a.B * N * N * 4 < detail::kParallelWork) {
    for (std::int64_t b = 0; b < a.B; ++b) graph(b);
  } else {
#pragma omp parallel for schedule(static) num_threads(detail::team_size(a.B))
    for (std::int64_t b = 0; b < a.B; ++b) graph(b);
  }
  return bad.any() ? synergy_fault(a) : Status::success();
}

namespace {

std::string format_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The first alpha or beta of an alive node that is not finite, or (after a clean finite pass) not > 0.
Status alive_positive_fault(const BanditWeightsArgs& a, const char* name, const float* x, std::int64_t sb,
                            std::int64_t sn) {
  for (const bool finite_pass : {true, false}) {
    for (std::int64_t b = 0; b < a.B; ++b) {
      for (std::int64_t n = 0; n < a.N; ++n) {
        if (a.alive[b * a.al_sb + n * a.al_sn] == 0) continue;
        const float v = x[b * sb + n * sn];
        if (finite_pass ? std::isfinite(v) : v > 0.0f) continue;
        const std::string at = " at graph " + std::to_string(b) + ", node " + std::to_string(n);
        return finite_pass ? Status::error(StatusCode::non_finite, name,
                                           std::string(name) + " must be finite; got " + format_value(v) + at)
                           : Status::error(StatusCode::out_of_range, name,
                                           std::string(name) + " must be > 0; got " + format_value(v) + at);
      }
    }
  }
  return Status::success();
}

// The first similarity that is not finite, then the first Jaccard outside [0, 1], then the first cosine outside
// [-1, 1] (the reference's order).
Status similarity_fault(const BanditWeightsArgs& a) {
  auto sim = [&](std::int64_t b, std::int64_t n, std::int64_t k) {
    return a.similarity[b * a.s_s[0] + n * a.s_s[1] + k * a.s_s[2]];
  };
  auto at = [](std::int64_t b, std::int64_t n) {
    return " at graph " + std::to_string(b) + ", node " + std::to_string(n);
  };
  for (std::int64_t b = 0; b < a.B; ++b) {
    for (std::int64_t n = 0; n < a.N; ++n) {
      for (std::int64_t k = 0; k < 2; ++k) {
        if (!std::isfinite(sim(b, n, k))) {
          return Status::error(StatusCode::non_finite, "similarity",
                               "similarity must be finite; got " + format_double(sim(b, n, k)) + at(b, n));
        }
      }
    }
  }
  for (std::int64_t k = 0; k < 2; ++k) {
    const double lo = k == 0 ? 0.0 : -1.0;
    for (std::int64_t b = 0; b < a.B; ++b) {
      for (std::int64_t n = 0; n < a.N; ++n) {
        const double v = sim(b, n, k);
        if (v >= lo && v <= 1.0) continue;
        return Status::error(StatusCode::out_of_range, "similarity",
                             std::string("similarity[..., ") + (k == 0 ? "0] (Jaccard) must be in [0, 1]"
                                                                       : "1] (cosine) must be in [-1, 1]") +
                                 "; got " + format_double(v) + at(b, n));
      }
    }
  }
  return Status::success();
}

// The first input error of bandit_weights in the reference's order (success when there is none).
Status weights_fault(const BanditWeightsArgs& a) {
  TOPOROUTE_RETURN_IF_ERROR(alive_positive_fault(a, "alpha", a.alpha, a.a_sb, a.a_sn));
  TOPOROUTE_RETURN_IF_ERROR(alive_positive_fault(a, "beta", a.beta, a.b_sb, a.b_sn));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"c_syn", a.c_syn, a.c_s, 3, -kInf, kInf, false}, a.B, a.N));
  return similarity_fault(a);
}

// numpy's pairwise summation of x[0], x[stride], ..., x[(n - 1) stride] (loops_utils.h.src, pairwise_sum), which
// ndarray.sum() and np.trace() run in the reference: see backends/_reference_bandit.py, bandit_weights.
double pairwise_sum(const double* x, std::int64_t n, std::int64_t stride) {
  if (n < 8) {
    double res = 0.0;
    for (std::int64_t i = 0; i < n; ++i) res += x[i * stride];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = x[j * stride];
    std::int64_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += x[(i + j) * stride];
    }
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += x[i * stride];
    return res;
  }
  std::int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(x, half, stride) + pairwise_sum(x + half * stride, n - half, stride);
}

// Per-thread scratch of one graph: the synergies of a group S + {d} (N^2 float64), the selected nodes but the sink
// (N), the group (N), each node's weight as a successor (N).
std::uint64_t weights_scratch_bytes(std::int64_t N) {
  const auto n = static_cast<std::uint64_t>(N);
  std::uint64_t sub = 0;
  if (__builtin_mul_overflow(n * n, sizeof(double), &sub)) return UINT64_MAX;
  return sub + n * (2 * sizeof(std::int64_t) + sizeof(float));
}

// False when graph b holds a value the checks refuse (weights_fault then names the first one).
bool weights_inputs_ok(const BanditWeightsArgs& a, std::int64_t b) {
  bool ok = true;
  for (std::int64_t n = 0; n < a.N; ++n) {
    if (a.alive[b * a.al_sb + n * a.al_sn] != 0) {
      ok &= within(a.alpha[b * a.a_sb + n * a.a_sn], kTiny, kMax);
      ok &= within(a.beta[b * a.b_sb + n * a.b_sn], kTiny, kMax);
    }
    const double jac = a.similarity[b * a.s_s[0] + n * a.s_s[1]];
    const double cos = a.similarity[b * a.s_s[0] + n * a.s_s[1] + a.s_s[2]];
    ok &= jac >= 0.0 && jac <= 1.0 && cos >= -1.0 && cos <= 1.0;
    for (std::int64_t j = 0; j < a.N; ++j) {
      ok &= within(a.c_syn[b * a.c_s[0] + n * a.c_s[1] + j * a.c_s[2]], -kMax, kMax);
    }
  }
  return ok;
}

void weights_graph(const BanditWeightsArgs& a, const BanditWeightsOut& o, std::int64_t b, unsigned char* slot) {
  const BanditWeightsScalars& p = a.scalars;
  const std::int64_t N = a.N, sink = p.sink;
  auto alive = [&](std::int64_t n) { return a.alive[b * a.al_sb + n * a.al_sn] != 0; };
  auto live = [&](std::int64_t n) { return n != sink && alive(n); };
  auto* sub = reinterpret_cast<double*>(slot);
  auto* base = reinterpret_cast<std::int64_t*>(sub + N * N);
  std::int64_t* group = base + N;
  auto* factor = reinterpret_cast<float*>(group + N);
  double* psi = o.psi + b * N;
  float* w = o.weights + b * N * N;
  std::fill(w, w + N * N, 0.0f);

  for (std::int64_t n = 0; n < N; ++n) {
    if (!alive(n)) {
      psi[n] = 0.0;
      continue;
    }
    const double jac = a.similarity[b * a.s_s[0] + n * a.s_s[1]];
    const double cos = a.similarity[b * a.s_s[0] + n * a.s_s[1] + a.s_s[2]];
    const double psi1 = 0.5 * (1.0 - jac) + 0.5 * (1.0 - cos) / 2.0;
    const float al = a.alpha[b * a.a_sb + n * a.a_sn];
    const float total = al + a.beta[b * a.b_sb + n * a.b_sn];  // in float32, as the reference adds the beliefs
    const double psi3 = 1.0 - static_cast<double>(al) / static_cast<double>(total);
    psi[n] = p.omega1 * psi1 + p.omega3 * psi3;
  }

  // the largest synergy among the live nodes (diagonal included), or c0 with fewer than two
  std::int64_t n_live = 0;
  float top32 = 0.0f;
  bool seen = false;
  for (std::int64_t i = 0; i < N; ++i) {
    if (!live(i)) continue;
    ++n_live;
    for (std::int64_t j = 0; j < N; ++j) {
      const float v = a.c_syn[b * a.c_s[0] + i * a.c_s[1] + j * a.c_s[2]];
      if (live(j) && (!seen || v > top32)) {
        top32 = v;
        seen = true;
      }
    }
  }
  double top = n_live > 1 ? static_cast<double>(top32) : p.c0;
  if (1e-12 > top) top = 1e-12;

  std::int64_t m = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    if (i != sink && a.selected[b * a.se_sb + i * a.se_sn] != 0) base[m++] = i;
  }
  // a successor's weight depends on it alone: exp and pow once per node, not once per edge
  const double ln2 = std::log(2.0);
  for (std::int64_t d = 0; d < N; ++d) {
    if (!live(d)) continue;
    std::int64_t g = 0;
    bool placed = false;
    for (std::int64_t k = 0; k < m; ++k) {
      if (!placed && d <= base[k]) {
        if (d < base[k]) group[g++] = d;
        placed = true;
      }
      group[g++] = base[k];
    }
    if (!placed) group[g++] = d;
    double zeta = 1.0;
    if (g >= 2) {  // the reference's c_syn[G, G] in float64, summed whole and along its diagonal
      for (std::int64_t i = 0; i < g; ++i) {
        const float* row = a.c_syn + b * a.c_s[0] + group[i] * a.c_s[1];
        for (std::int64_t j = 0; j < g; ++j) sub[i * g + j] = static_cast<double>(row[group[j] * a.c_s[2]]);
      }
      const double sum = 0.0 + pairwise_sum(sub, g * g, 1);
      const double trace = 0.0 + pairwise_sum(sub, g, g + 1);
      zeta = (sum - trace) / static_cast<double>(g * (g - 1)) / top;
    }
    factor[d] = static_cast<float>(std::exp(-p.lam * (ln2 * psi[d])) * std::pow(zeta < 0.0 ? 0.0 : zeta, p.eta));
  }

  for (std::int64_t s = 0; s < N; ++s) {
    if (!alive(s)) continue;
    auto edge = [&](std::int64_t d) {
      return d != s && a.adj[b * a.adj_sb + s * a.adj_sr + d * a.adj_sc] != 0 && alive(d);
    };
    auto far = [&](std::int64_t d) { return d != sink && psi[d] > p.threshold; };
    std::int64_t n_succ = 0, n_far = 0, nearest = -1;
    for (std::int64_t d = 0; d < N; ++d) {
      if (!edge(d)) continue;
      ++n_succ;
      if (d == sink) {
        w[s * N + d] = 1.0f;
        continue;
      }
      w[s * N + d] = factor[d];
      if (far(d)) {
        ++n_far;
        if (nearest < 0 || psi[d] < psi[nearest]) nearest = d;
      }
    }
    if (n_far == 0) continue;
    const std::int64_t keep = n_far == n_succ ? nearest : -1;  // the threshold always keeps the nearest candidate
    for (std::int64_t d = 0; d < N; ++d) {
      if (d != keep && edge(d) && far(d)) w[s * N + d] = 0.0f;
    }
  }
}

}  // namespace

Status bandit_weights(const BanditWeightsArgs& a, const BanditWeightsOut& o) {
  if (a.B < 0 || a.N < 0) {
    return Status::error(StatusCode::invalid_argument, "adj", "bandit_weights: negative dimensions");
  }
  if (a.scalars.sink < 0 || a.scalars.sink >= a.N) {
    return Status::error(StatusCode::out_of_range, "sink",
                         "sink must be in [0, " + std::to_string(a.N) + ") (a node of adj); got " +
                             std::to_string(a.scalars.sink));
  }
  // the zeta sums read up to N^2 synergies per node; most graphs select a few nodes
  const std::int64_t work = a.B * a.N * a.N * 8;
  const bool parallel = work >= detail::kParallelWork;
  const int threads = parallel ? detail::team_size(a.B) : 1;
  const detail::TeamScratch scratch(weights_scratch_bytes(a.N), threads);
  if (!scratch.ok()) return scratch.failure("bandit_weights", "per-thread scratch");
  detail::FirstError bad(a.B);
  auto run = [&](std::int64_t b, unsigned char* slot) {
    if (weights_inputs_ok(a, b)) {
      weights_graph(a, o, b, slot);
    } else {
      bad.record(b);
    }
  };
  for_each_graph(a.B, parallel, threads, scratch, run);
  return bad.any() ? weights_fault(a) : Status::success();
}

}  // namespace toporoute
