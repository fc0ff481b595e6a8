// HiVA bandit kernels (see toporoute/bandit.hpp and backends/_reference_bandit.py, whose docstring defines the
// counter layout and the draw sequence). Every float64 expression is written in the reference's order and the
// file is compiled without FMA contraction (CMakeLists.txt), so theta and the updates equal the reference's bit
// for bit; log, cos, exp and pow are the C library's, as the reference's math.* calls are.
#include "toporoute/bandit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>

#include "parallel.hpp"

namespace toporoute {

void philox4x32_10(std::uint32_t ctr[4], std::uint64_t seed) noexcept {
  std::uint32_t k0 = static_cast<std::uint32_t>(seed);
  std::uint32_t k1 = static_cast<std::uint32_t>(seed >> 32);
  std::uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  for (int r = 0; r < 10; ++r) {
    const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c0;
    const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * c2;
    c0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    c1 = static_cast<std::uint32_t>(p1);
    c2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c3 = static_cast<std::uint32_t>(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  ctr[0] = c0;
  ctr[1] = c1;
  ctr[2] = c2;
  ctr[3] = c3;
}

namespace {

constexpr std::uint32_t kBoostBlock = 0xFFFFFFFFu;
constexpr double kTwoPi = 2.0 * 3.141592653589793;

// (0, 1] from 53 random bits of (a, b), and from the 32 bits of w (both exact in double).
inline double u53(std::uint32_t a, std::uint32_t b) {
  const std::uint64_t x = (std::uint64_t{a >> 5} << 26) | (b >> 6);
  return static_cast<double>(x + 1) * 0x1p-53;
}
inline double u32(std::uint32_t w) { return static_cast<double>(std::uint64_t{w} + 1) * 0x1p-32; }

struct GammaDraw {
  double x;   // the draw
  double dv;  // d * v before the boost
  double ub;  // the boost uniform, 1 when not boosted
};

GammaDraw gamma_draw(double a, std::uint64_t seed, std::uint32_t lane, std::uint32_t graph, std::uint32_t step) {
  const bool boosted = a < 1.0;
  const double a1 = boosted ? a + 1.0 : a;
  const double d = a1 - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  double dv = 0.0;
  for (std::uint32_t t = 0;; ++t) {
    std::uint32_t w[4] = {t, lane, graph, step};
    philox4x32_10(w, seed);
    const double z = std::sqrt(-2.0 * std::log(u53(w[0], w[1]))) * std::cos(kTwoPi * u32(w[2]));
    const double u = u32(w[3]);
    double v = 1.0 + c * z;
    if (!(v > 0.0)) continue;
    v = v * v * v;
    if (v == 0.0) continue;
    const double x2 = z * z;
    if (u < 1.0 - 0.0331 * x2 * x2 || std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) {
      dv = d * v;
      break;
    }
  }
  if (!boosted) return {dv, dv, 1.0};
  std::uint32_t w[4] = {kBoostBlock, lane, graph, step};
  philox4x32_10(w, seed);
  const double ub = u53(w[0], w[1]);
  return {dv * std::pow(ub, 1.0 / a), dv, ub};
}

}  // namespace

float beta_draw(float alpha, float beta, std::uint64_t seed, std::uint32_t step, std::uint32_t graph,
                std::uint32_t node) noexcept {
  const double a = alpha, b = beta;
  const GammaDraw x = gamma_draw(a, seed, 2 * node, graph, step);
  const GammaDraw y = gamma_draw(b, seed, 2 * node + 1, graph, step);
  const double total = x.x + y.x;
  if (total > 0.0) return static_cast<float>(x.x / total);
  const double lx = std::log(x.dv) + std::log(x.ub) / a;  // both underflowed: the ratio in log space
  const double ly = std::log(y.dv) + std::log(y.ub) / b;
  return static_cast<float>(1.0 / (1.0 + std::exp(ly - lx)));
}

namespace {

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

// Bit i set when row[i * stride] != 0, for i < n <= 64. Unit-stride rows go 8 bytes at a time: a SWAR step turns
// every non-zero byte into 0x01 and one multiply gathers the eight low bits (little-endian only).
inline std::uint64_t nonzero_bits(const std::uint8_t* row, std::int64_t stride, std::int64_t n) {
  std::uint64_t bits = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (stride == 1) {
    for (std::int64_t c = 0; c < n; c += 8) {
      std::uint64_t x = 0;
      std::memcpy(&x, row + c, static_cast<std::size_t>(std::min<std::int64_t>(8, n - c)));
      const std::uint64_t low7 = 0x7F7F7F7F7F7F7F7FULL;
      const std::uint64_t ones = ((((x & low7) + low7) | x) & ~low7) >> 7;
      bits |= ((ones * 0x0102040810204080ULL) >> 56) << c;
    }
    return bits;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) bits |= std::uint64_t{row[i * stride] != 0} << i;
  return bits;
}

// Keeps the best `K` of `count` candidates (in ascending index order) at the front of cand, best first; returns
// how many are kept.
inline std::int64_t top_k(Candidate* cand, std::int64_t count, std::int64_t K) {
  const std::int64_t kept = std::min(count, K);
  if (K > 4) {
    std::partial_sort(cand, cand + kept, cand + count, better);
    return kept;
  }
  std::int64_t held = 0;  // insertion into the first K slots: candidates come in ascending index order
  for (std::int64_t i = 0; i < count; ++i) {
    const Candidate c = cand[i];
    std::int64_t pos = held;
    while (pos > 0 && c.score > cand[pos - 1].score) --pos;
    if (pos >= K) continue;
    for (std::int64_t j = std::min(held, K - 1); j > pos; --j) cand[j] = cand[j - 1];
    cand[pos] = c;
    held = std::min(held + 1, K);
  }
  return kept;
}

void select_graph(const BanditSelectArgs& a, const BanditSelectOut& o, std::int64_t b, Candidate* cand) {
  const std::int64_t N = a.N, K = a.k;
  const std::uint32_t graph = a.graph_offset + static_cast<std::uint32_t>(b);
  float* theta = o.theta + b * N;
  for (std::int64_t n = 0; n < N; ++n) {
    if (!is_active(a, b, n)) {
      theta[n] = 0.0f;
      continue;
    }
    const float al = a.alpha[b * a.al_sb + n * a.al_sn];
    const float be = a.beta[b * a.be_sb + n * a.be_sn];
    if (a.mode == BanditMode::mean) {
      const double x = al;
      theta[n] = static_cast<float>(x / (x + static_cast<double>(be)));
    } else {
      theta[n] = beta_draw(al, be, a.seed, a.step, graph, static_cast<std::uint32_t>(n));
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
    std::int64_t count = 0;
    auto take = [&](std::int64_t d) {
      if (wrow == nullptr) {
        cand[count++] = {theta[d], static_cast<std::int32_t>(d)};
        return;
      }
      const float w = wrow[d * a.w_sc];
      if (w > 0.0f) cand[count++] = {theta[d] * w, static_cast<std::int32_t>(d)};
    };
    if (bits) {
      std::uint64_t m = nonzero_bits(row, a.adj_sc, N) & alive & ~(std::uint64_t{1} << s);
      while (m != 0) {
        take(__builtin_ctzll(m));
        m &= m - 1;
      }
    } else {
      for (std::int64_t d = 0; d < N; ++d) {
        if (d != s && row[d * a.adj_sc] != 0 && is_active(a, b, d)) take(d);
      }
    }
    const std::int64_t kept = top_k(cand, count, K);
    for (std::int64_t r = 0; r < kept; ++r) {
      choices[s * K + r] = cand[r].index;
      chosen[s * N + cand[r].index] = 1;
    }
  }
}

}  // namespace

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
  if (!parallel) {
    for (std::int64_t b = 0; b < a.B; ++b) run(b, scratch.slot(0));
  } else {
#pragma omp parallel num_threads(threads)
    {
      unsigned char* slot = scratch.slot(detail::thread_index());
#pragma omp for schedule(dynamic, 16)
      for (std::int64_t b = 0; b < a.B; ++b) run(b, slot);
    }
  }
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
            want = "in [" + format_value(static_cast<float>(c.lo)) + ", " + format_value(static_cast<float>(c.hi)) + "]";
          }
          return Status::error(StatusCode::out_of_range, name, name + " must be " + want + "; got " + format_value(v) + at);
        }
      }
    }
  }
  return Status::success();
}

constexpr double kInf = HUGE_VAL;

}  // namespace

Status bandit_update(const BanditUpdateArgs& a, const BanditUpdateOut& o) {
  const std::int64_t al_s[2] = {a.al_sb, a.al_sn}, be_s[2] = {a.be_sb, a.be_sn}, re_s[2] = {a.re_sb, a.re_sn};
  const std::int64_t dt_s[2] = {a.dt_sb, a.dt_sn}, km_s[2] = {a.km_sb, a.km_sn};
  TOPOROUTE_RETURN_IF_ERROR(check_range({"alpha", a.alpha, al_s, 2, 0.0, kInf, true}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"beta", a.beta, be_s, 2, 0.0, kInf, true}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"reward", a.reward, re_s, 2, 0.0, 1.0, false}, a.B, a.N));
  if (a.dt != nullptr) TOPOROUTE_RETURN_IF_ERROR(check_range({"dt", a.dt, dt_s, 2, 0.0, kInf, false}, a.B, a.N));
  if (a.km != nullptr) TOPOROUTE_RETURN_IF_ERROR(check_range({"km", a.km, km_s, 2, 0.0, 1.0, false}, a.B, a.N));
  const double prior = a.prior, delta = a.delta;
  auto row = [&](std::int64_t b) {
    for (std::int64_t n = 0; n < a.N; ++n) {
      const double g = a.dt == nullptr ? a.gamma : std::pow(a.gamma, static_cast<double>(a.dt[b * a.dt_sb + n * a.dt_sn]));
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
    return Status::success();
  }
#pragma omp parallel for schedule(static) num_threads(detail::team_size(a.B))
  for (std::int64_t b = 0; b < a.B; ++b) row(b);
  return Status::success();
}

Status synergy_update(const SynergyUpdateArgs& a, const SynergyUpdateOut& o) {
  const std::int64_t re_s[2] = {a.re_sb, a.re_sn};
  TOPOROUTE_RETURN_IF_ERROR(check_range({"c_syn", a.c_syn, a.c_s, 3, -kInf, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"edge_alpha", a.edge_alpha, a.ea_s, 3, 0.0, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"edge_beta", a.edge_beta, a.eb_s, 3, 0.0, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"routed", a.routed, a.r_s, 3, 0.0, kInf, false}, a.B, a.N));
  TOPOROUTE_RETURN_IF_ERROR(check_range({"reward", a.reward, re_s, 2, 0.0, 1.0, false}, a.B, a.N));
  const std::int64_t N = a.N;
  const double lr = a.lr;
  auto graph = [&](std::int64_t b) {
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
        o.c_syn[at] = static_cast<float>(static_cast<double>(c) + lr * (ea64 / (ea64 + eb64)) * static_cast<double>(routed));
      }
    }
  };
  if (a.B * N * N * 4 < detail::kParallelWork) {
    for (std::int64_t b = 0; b < a.B; ++b) graph(b);
    return Status::success();
  }
#pragma omp parallel for schedule(static) num_threads(detail::team_size(a.B))
  for (std::int64_t b = 0; b < a.B; ++b) graph(b);
  return Status::success();
}

}  // namespace toporoute
