// route(): one fused pass per episode (stage + norms + dots in the ISA kernel, then score, threshold, self and
// activity masks, top-k_in per recipient and inbox order), OpenMP across episodes. Large teams take the float32
// pass of simd/cosine_kernels.inl first and compute in float64 only the pairs it leaves open. Indexed routing first
// gathers the episode's table rows into scratch, so both forms run the same kernel on the same values.
// nearest(): the table's norms once, then per query its scores against every kept row and a partial sort.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "parallel.hpp"
#include "simd/gram.hpp"
#include "toporoute/route.hpp"

namespace toporoute {
namespace {

bool indexed(const RouteArgs& a) { return a.q_rows.present(); }

// Large teams take the float32 pass (simd::CosineArgs) from this many agents and columns on. Below, its fixed cost
// per pair (summing the lanes, scaling, listing) outweighs what it saves on the products. Measured on a Xeon with
// AVX-512, one thread, route against the float64 path: N = 64 at D = 64 1.16x slower, at D = 128 even, at D = 384
// 1.4x faster; at D = 384 even at N = 8, faster from N = 12.
constexpr std::int64_t kCosineMinAgents = 16;
constexpr std::int64_t kCosineMinColumns = 128;
constexpr std::int64_t kCosineMaxColumns = std::int64_t{1} << 20;

bool takes_cosine_pass(const simd::RouteKernels& rk, std::int64_t N, std::int64_t D) {
  return rk.cosine != nullptr && N >= kCosineMinAgents && D >= kCosineMinColumns && D <= kCosineMaxColumns;
}

// How far an approximate cosine of the float32 pass (its dot product times 1/|k_j| and 1/|q_i|) can be from the
// float64 path's value for the same rows, for rows whose squared norms lie in [2^-80, 2^80] (cosine_pass_fits):
// a lane of a piece sums at most 32 products and the lanes take 4 more additions (gamma_n = n u / (1 - n u)
// times the sum of |products|, at most |k_j| |q_i|), then float64 roundings (the pieces' sum, the scaling and
// the float64 path's own: (D + 16) 2^-52), and products below float32's normal range (under 2^-126 each, so
// 2^-46 relative to |k_j| |q_i| >= 2^-80, even with denormals flushed).
double cosine_error_bound(std::int64_t D) {
  const double u = 0x1p-24;
  const double lane_terms = static_cast<double>(std::min<std::int64_t>((D + 15) / 16, simd::kPieceColumns / 16));
  return 1.07 * (lane_terms + 4.0) * u + static_cast<double>(D + 16) * 0x1p-52 + static_cast<double>(D) * 0x1p-46;
}

// Per-thread working memory of one episode, carved from one slot of a detail::TeamScratch; never zero-filled
// (every entry is written before it is read). The float64 path: O(N^2) (plus 2 N D floats of gathered rows
// when indexed); the cosine pass adds its panels, its (padded) N x N approximations and per-recipient lists.
struct ScratchPlan {
  std::uint64_t dots, kss, qss, kvalid, qvalid, sel_score, sel_src, gq, gk, kinv, qinv, above_j, above_v,
      above_n, tile_sums, cand, approx_of, exact, rows, bytes;
  ScratchPlan(std::int64_t N, std::int64_t D, std::int64_t gather_floats, const simd::RouteKernels& rk) {
    detail::ScratchLayout l;
    const bool cosine = takes_cosine_pass(rk, N, D);
    dots = l.take(N * N, sizeof(double));
    kss = l.take(N, sizeof(double));
    qss = l.take(N, sizeof(double));
    kvalid = l.take(N, 1);
    qvalid = l.take(N, 1);
    sel_score = l.take(N + 1, sizeof(float));
    sel_src = l.take(N + 1, sizeof(std::int32_t));
    gq = l.take(gather_floats, sizeof(float));
    gk = l.take(gather_floats, sizeof(float));
    kinv = l.take(cosine ? N : 0, sizeof(double));
    qinv = l.take(cosine ? N : 0, sizeof(double));
    above_j = l.take(cosine ? N * N : 0, sizeof(std::int32_t));
    above_v = l.take(cosine ? N * N : 0, sizeof(double));
    above_n = l.take(cosine ? N : 0, sizeof(std::int64_t));
    tile_sums = l.take(cosine ? N * simd::kCosineTile : 0, sizeof(double));
    cand = l.take(N, sizeof(std::int32_t));
    approx_of = l.take(cosine ? N : 0, sizeof(double));
    exact = l.take(cosine ? N : 0, sizeof(double));
    rows = l.take(cosine ? N : 0, sizeof(const float*));
    bytes = l.bytes();
  }
};

class Scratch {
 public:
  Scratch(const ScratchPlan& p, unsigned char* base)
      : dots(reinterpret_cast<double*>(base + p.dots)),
        kss(reinterpret_cast<double*>(base + p.kss)),
        qss(reinterpret_cast<double*>(base + p.qss)),
        kvalid(base + p.kvalid),
        qvalid(base + p.qvalid),
        sel_score(reinterpret_cast<float*>(base + p.sel_score)),
        sel_src(reinterpret_cast<std::int32_t*>(base + p.sel_src)),
        gq(reinterpret_cast<float*>(base + p.gq)),
        gk(reinterpret_cast<float*>(base + p.gk)),
        kinv(reinterpret_cast<double*>(base + p.kinv)),
        qinv(reinterpret_cast<double*>(base + p.qinv)),
        above_j(reinterpret_cast<std::int32_t*>(base + p.above_j)),
        above_v(reinterpret_cast<double*>(base + p.above_v)),
        above_n(reinterpret_cast<std::int64_t*>(base + p.above_n)),
        tile_sums(reinterpret_cast<double*>(base + p.tile_sums)),
        cand(reinterpret_cast<std::int32_t*>(base + p.cand)),
        approx_of(reinterpret_cast<double*>(base + p.approx_of)),
        exact(reinterpret_cast<double*>(base + p.exact)),
        rows(reinterpret_cast<const float**>(base + p.rows)) {}

  double *const dots, *const kss, *const qss;  // N x N dot products, |k_j|^2 then |k_j|, |q_i|^2 then |q_i|
  unsigned char *const kvalid, *const qvalid;  // row active and non-zero
  float* const sel_score;                      // one recipient's kept providers, by descending score
  std::int32_t* const sel_src;
  float *const gq, *const gk;        // indexed routing: the episode's gathered need and offer rows, N x D each
  double *const kinv, *const qinv;   // cosine pass: 1 / |row|, 0 for a row without edges
  std::int32_t* const above_j;       // cosine pass: by recipient i, the providers above tau - margin
  double* const above_v;             // ([i * N + c], ascending) and their approximate cosines,
  std::int64_t* const above_n;       // above_n[i] of them
  double* const tile_sums;           // cosine pass: its working space
  std::int32_t* const cand;          // one recipient's providers still in question, ascending
  double* const approx_of;           // cosine pass: their approximate cosines
  double* const exact;               // cosine pass: their float64 dot products (first a copy for nth_element)
  const float** const rows;          // cosine pass: their offer rows
};

// Copies the table rows named by rows.at(b, 0..N-1) into dst (N x D, contiguous); -1 gives a zero row.
// The indices were checked by check_route.
void gather_rows(const RouteArgs& a, const float* table, std::int64_t sn, const IntView& rows, std::int64_t b,
                 float* dst) {
  const auto bytes = static_cast<std::size_t>(a.D) * sizeof(float);
  for (std::int64_t n = 0; n < a.N; ++n) {
    const std::int64_t r = rows.at(b, n);
    if (r < 0) {
      std::memset(dst + n * a.D, 0, bytes);
    } else if (bytes != 0) {
      std::memcpy(dst + n * a.D, table + r * sn, bytes);
    }
  }
}

bool agent_active(const RouteArgs& a, std::int64_t b, std::int64_t n) {
  if (a.active != nullptr && a.active[b * a.a_sb + n * a.a_sn] == 0) return false;
  return !indexed(a) || (a.q_rows.at(b, n) != -1 && a.k_rows.at(b, n) != -1);
}

// The episode's rows: k and q (row strides k_sn, q_sn), gathered first when indexed.
struct EpisodeRows {
  const float* k;
  std::int64_t k_sn;
  const float* q;
  std::int64_t q_sn;
};

float clamped_score(double c) { return static_cast<float>(std::min(1.0, std::max(-1.0, c))); }

// Recipient i's inbox from its providers s.cand[0, count) (ascending), whose scores are final in scores: those
// above tau, at most cap of them, by descending score. Insertion into a list sorted by descending score;
// providers arrive in ascending index, so inserting after every entry with an equal score keeps ties to the
// lower index.
void select_inbox(const RouteArgs& a, const RouteOut& o, std::int64_t b, std::int64_t i, std::int64_t count_in,
                  const float* scores, Scratch& s) {
  const std::int64_t N = a.N, K = a.K;
  const std::int64_t cap = a.k_in > 0 ? std::min(a.k_in, N) : N;
  std::int64_t count = 0;
  for (std::int64_t c = 0; c < count_in; ++c) {
    const std::int64_t j = s.cand[c];
    const float v = scores[j * N + i];
    if (!(v > a.tau)) continue;
    std::int64_t pos = count;
    while (pos > 0 && s.sel_score[pos - 1] < v) --pos;
    if (pos >= cap) continue;
    const std::int64_t last = std::min(count, cap - 1);
    for (std::int64_t r = last; r > pos; --r) {
      s.sel_score[r] = s.sel_score[r - 1];
      s.sel_src[r] = s.sel_src[r - 1];
    }
    s.sel_score[pos] = v;
    s.sel_src[pos] = static_cast<std::int32_t>(j);
    count = std::min(count + 1, cap);
  }
  std::int32_t* inbox = o.inbox + b * N * K;
  std::uint8_t* adj = o.adjacency + b * N * N;
  o.in_degree[b * N + i] = static_cast<std::int32_t>(count);
  for (std::int64_t r = 0; r < K; ++r) inbox[i * K + r] = r < count ? s.sel_src[r] : -1;
  for (std::int64_t r = 0; r < count; ++r) adj[s.sel_src[r] * N + i] = 1;
}

// Recipient i's providers whose fate the approximate cosines leave open, into s.cand (ascending; returns how
// many), from those above tau - m (s.above_*). With e = cosine_error_bound and m = e + 2^-23, a provider whose
// approximation is at most tau - m scores at most tau on the float64 path. When more than cap remain, let v be
// the cap-th largest approximation among them: one below v - 2m has at least cap others at least 2^-22 above it
// on the float64 path, so above it once rounded to float32 too, and above tau whenever it is; it cannot be
// kept. Everything else is settled exactly.
std::int64_t open_providers(const RouteArgs& a, std::int64_t i, double margin, Scratch& s) {
  const std::int64_t N = a.N;
  const std::int64_t cap = a.k_in > 0 ? std::min(a.k_in, N) : N;
  std::int64_t count = 0;
  for (std::int64_t c = 0; c < s.above_n[i]; ++c) {
    const std::int32_t j = s.above_j[i * N + c];
    if (j == i || !s.kvalid[j]) continue;
    s.approx_of[count] = s.above_v[i * N + c];
    s.cand[count++] = j;
  }
  if (count <= cap) return count;
  double* copy = s.exact;  // free until the refinement
  std::copy(s.approx_of, s.approx_of + count, copy);
  std::nth_element(copy, copy + (cap - 1), copy + count, [](double x, double y) { return x > y; });
  const double floor = copy[cap - 1] - 2.0 * margin;
  std::int64_t kept = 0;
  for (std::int64_t c = 0; c < count; ++c) {
    if (s.approx_of[c] >= floor) s.cand[kept++] = s.cand[c];
  }
  return kept;
}

// Whether the float32 pass can take the episode: every non-zero row has a norm in [2^-40, 2^40], so no
// float32 product or sum overflows and products too small for float32 are negligible (cosine_error_bound).
bool cosine_pass_fits(const Scratch& s, std::int64_t N) {
  for (std::int64_t n = 0; n < N; ++n) {
    for (const double norm : {s.kss[n], s.qss[n]}) {  // |row| here
      if (norm != 0.0 && !(norm >= 0x1p-40 && norm <= 0x1p40)) return false;
    }
  }
  return true;
}

// The float32 pass: approximate scores of every pair, then float64 dot products for the providers left open only
// (a few per recipient at the usual thresholds). False when the rows do not fit it or too many providers are
// open: the caller runs the float64 gram instead (the same decisions, with float64 scores everywhere).
bool route_by_cosine_pass(const RouteArgs& a, const RouteOut& o, const simd::RouteKernels& rk, std::int64_t b,
                          const EpisodeRows& e, Scratch& s) {
  const std::int64_t N = a.N;
  if (!cosine_pass_fits(s, N)) return false;
  for (std::int64_t n = 0; n < N; ++n) {
    s.kinv[n] = s.kvalid[n] ? 1.0 / s.kss[n] : 0.0;
    s.qinv[n] = s.qvalid[n] ? 1.0 / s.qss[n] : 0.0;
  }
  const double margin = cosine_error_bound(a.D) + 0x1p-23;
  float* scores = o.scores + b * N * N;
  rk.cosine({e.k, e.k_sn, s.kinv, e.q, e.q_sn, s.qinv, N, a.D, static_cast<double>(a.tau) - margin, scores,
             s.above_j, s.above_v, s.above_n, s.tile_sums});
  // Too many open providers make the float64 gram cheaper; those above tau - margin bound them (at the usual
  // thresholds a few per recipient), so the open ones are counted only when there are many.
  std::int64_t above = 0;
  for (std::int64_t i = 0; i < N; ++i) above += s.above_n[i];
  if (above * 8 > N * N) {
    std::int64_t open = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      if (s.qvalid[i]) open += open_providers(a, i, margin, s);
    }
    if (open * 8 > N * N) return false;
  }
  std::memset(o.adjacency + b * N * N, 0, static_cast<std::size_t>(N * N));
  for (std::int64_t i = 0; i < N; ++i) {
    std::int64_t count = 0;
    if (s.qvalid[i]) {
      count = open_providers(a, i, margin, s);
      for (std::int64_t c = 0; c < count; ++c) s.rows[c] = e.k + s.cand[c] * e.k_sn;
      rk.dots(s.rows, count, e.q + i * e.q_sn, a.D, s.exact);
      for (std::int64_t c = 0; c < count; ++c) {
        const std::int64_t j = s.cand[c];
        scores[j * N + i] = clamped_score(s.exact[c] / (s.kss[j] * s.qss[i]));
      }
    }
    select_inbox(a, o, b, i, count, scores, s);
  }
  return true;
}

// Returns false when a row is not finite (the caller reports the episode).
bool route_episode(const RouteArgs& a, const RouteOut& o, const simd::RouteKernels& rk, std::int64_t b,
                   Scratch& s) {
  const std::int64_t N = a.N;
  EpisodeRows e{a.k + b * a.k_sb, a.k_sn, a.q + b * a.q_sb, a.q_sn};
  if (indexed(a)) {
    gather_rows(a, a.q, a.q_sn, a.q_rows, b, s.gq);
    gather_rows(a, a.k, a.k_sn, a.k_rows, b, s.gk);
    e = {s.gk, a.D, s.gq, a.D};
  }
  const bool cosine = takes_cosine_pass(rk, N, a.D);
  if (cosine) {
    rk.norms(e.k, e.k_sn, N, a.D, s.kss);
    rk.norms(e.q, e.q_sn, N, a.D, s.qss);
  } else {
    rk.gram({e.k, e.k_sn, e.q, e.q_sn, N, a.D, s.dots, s.kss, s.qss});
  }
  for (std::int64_t n = 0; n < N; ++n) {
    if (!std::isfinite(s.kss[n]) || !std::isfinite(s.qss[n])) return false;
  }
  for (std::int64_t n = 0; n < N; ++n) {
    const bool act = agent_active(a, b, n);
    s.kvalid[n] = act && s.kss[n] > 0.0;
    s.qvalid[n] = act && s.qss[n] > 0.0;
    s.kss[n] = std::sqrt(s.kss[n]);  // from here on: |k_n| and |q_n|
    s.qss[n] = std::sqrt(s.qss[n]);
  }
  if (cosine) {
    if (route_by_cosine_pass(a, o, rk, b, e, s)) return true;
    rk.gram({e.k, e.k_sn, e.q, e.q_sn, N, a.D, s.dots, s.kss, s.qss});  // too many open: the float64 path
    for (std::int64_t n = 0; n < N; ++n) {
      s.kss[n] = std::sqrt(s.kss[n]);
      s.qss[n] = std::sqrt(s.qss[n]);
    }
  }
  float* scores = o.scores + b * N * N;
  std::uint8_t* adj = o.adjacency + b * N * N;
  for (std::int64_t j = 0; j < N; ++j) {
    for (std::int64_t i = 0; i < N; ++i) {
      scores[j * N + i] = s.kvalid[j] && s.qvalid[i] ? clamped_score(s.dots[j * N + i] / (s.kss[j] * s.qss[i]))
                                                     : 0.0f;
      adj[j * N + i] = 0;
    }
  }
  for (std::int64_t i = 0; i < N; ++i) {
    std::int64_t count = 0;
    if (s.qvalid[i]) {
      for (std::int64_t j = 0; j < N; ++j) {
        if (j != i && s.kvalid[j]) s.cand[count++] = static_cast<std::int32_t>(j);
      }
    }
    select_inbox(a, o, b, i, count, scores, s);
  }
  return true;
}

bool row_finite(const float* row, std::int64_t D) {
  for (std::int64_t d = 0; d < D; ++d) {
    if (!std::isfinite(row[d])) return false;
  }
  return true;
}

Status non_finite_status(const RouteArgs& a, std::int64_t b) {
  if (indexed(a)) {
    for (const char* name : {"q_rows", "k_rows"}) {
      const bool q = name[0] == 'q';
      const IntView& rows = q ? a.q_rows : a.k_rows;
      for (std::int64_t n = 0; n < a.N; ++n) {
        const std::int64_t r = rows.at(b, n);
        if (r >= 0 && !row_finite(q ? a.q + r * a.q_sn : a.k + r * a.k_sn, a.D)) {
          return Status::error(StatusCode::non_finite, "table",
                               "table must be finite; got NaN or infinity in row " + std::to_string(r) +
                                   ", used by " + name + " at episode " + std::to_string(b) + ", agent " +
                                   std::to_string(n));
        }
      }
    }
    return Status::error(StatusCode::non_finite, "table", "table holds values whose squares overflow");
  }
  for (const char* name : {"q", "k"}) {
    const float* base = name[0] == 'q' ? a.q + b * a.q_sb : a.k + b * a.k_sb;
    const std::int64_t sn = name[0] == 'q' ? a.q_sn : a.k_sn;
    for (std::int64_t n = 0; n < a.N; ++n) {
      for (std::int64_t d = 0; d < a.D; ++d) {
        if (!std::isfinite(base[n * sn + d])) {
          return Status::error(StatusCode::non_finite, name,
                               std::string(name) + " must be finite; got NaN or infinity at episode " +
                                   std::to_string(b) + ", agent " + std::to_string(n));
        }
      }
    }
  }
  return Status::error(StatusCode::non_finite, "q", "q or k holds values whose squares overflow");
}

// First entry (C order) of a (B, N) index view outside {-1} and [0, M), or -1 when none.
std::int64_t first_bad_row(const RouteArgs& a, const IntView& rows) {
  auto bad = [&](std::int64_t b, std::int64_t n) {
    const std::int64_t r = rows.at(b, n);
    return r < -1 || r >= a.M;
  };
  detail::FirstError first(a.B);
  auto scan = [&](std::int64_t b) {
    for (std::int64_t n = 0; n < a.N; ++n) {
      if (bad(b, n)) {
        first.record(b);
        return;
      }
    }
  };
  if (a.B * a.N < detail::kParallelWork) {  // no thread team at all: even an if(false) region costs a team setup
    for (std::int64_t b = 0; b < a.B && !first.any(); ++b) scan(b);
  } else {
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < a.B; ++b) scan(b);
  }
  if (!first.any()) return -1;
  const std::int64_t b = first.get();
  for (std::int64_t n = 0; n < a.N; ++n) {
    if (bad(b, n)) return b * a.N + n;
  }
  return -1;
}

}  // namespace

Status check_route(const RouteArgs& a) {
  if (a.B < 0 || a.N < 0 || a.D < 0) {
    return Status::error(StatusCode::invalid_argument, "q", "q must have non-negative dimensions");
  }
  if (!(a.tau >= -1.0f && a.tau <= 1.0f)) {
    return Status::error(StatusCode::out_of_range, "tau", "tau must be in [-1, 1]; got " + std::to_string(a.tau));
  }
  if (a.k_in < 0) {
    return Status::error(StatusCode::out_of_range, "k_in", "k_in must be >= 0; got " + std::to_string(a.k_in));
  }
  const std::int64_t want_k = a.k_in > 0 ? a.k_in : std::max<std::int64_t>(a.N - 1, 0);
  if (a.K != want_k) {
    return Status::error(StatusCode::invalid_argument, "inbox", "inbox width must be " + std::to_string(want_k));
  }
  if (!a.q_rows.present() && !a.k_rows.present()) return Status::success();
  if (!a.q_rows.present() || !a.k_rows.present()) {
    return Status::error(StatusCode::invalid_argument, a.q_rows.present() ? "k_rows" : "q_rows",
                         "q_rows and k_rows must be given together");
  }
  if (a.M < 0) return Status::error(StatusCode::invalid_argument, "table", "table must have non-negative dimensions");
  for (const char* name : {"q_rows", "k_rows"}) {
    const IntView& rows = name[0] == 'q' ? a.q_rows : a.k_rows;
    const std::int64_t at = first_bad_row(a, rows);
    if (at >= 0) {
      const std::int64_t b = at / a.N, n = at % a.N;
      return Status::error(StatusCode::out_of_range, name,
                           std::string(name) + " must be -1 (inactive) or a table row in [0, " +
                               std::to_string(a.M) + "); got " + std::to_string(rows.at(b, n)) + " at episode " +
                               std::to_string(b) + ", agent " + std::to_string(n));
    }
  }
  return Status::success();
}

Status route(const RouteArgs& a, const RouteOut& o, Isa isa) {
  TOPOROUTE_RETURN_IF_ERROR(check_route(a));
  const simd::RouteKernels& rk = simd::route_kernels_for(isa);
  const ScratchPlan plan(a.N, a.D, indexed(a) ? a.N * a.D : 0, rk);
  detail::FirstError bad(a.B);
  const std::int64_t work = a.B * a.N * (a.N + 2) * std::max<std::int64_t>(a.D, 1);
  const bool parallel = work >= detail::kParallelWork;  // else one episode or a few: no thread team at all
  const int threads = parallel ? detail::team_size(a.B) : 1;
  const detail::TeamScratch scratch(plan.bytes, threads);
  if (!scratch.ok()) return scratch.failure(indexed(a) ? "route_indexed" : "route", "per-thread scratch");
  if (!parallel) {
    Scratch s(plan, scratch.slot(0));
    for (std::int64_t b = 0; b < a.B; ++b) {
      if (!route_episode(a, o, rk, b, s)) {
        bad.record(b);
        break;
      }
    }
  } else {
    const int chunk = detail::chunk_size(a.B, threads, 64);
#pragma omp parallel num_threads(threads)
    {
      Scratch s(plan, scratch.slot(detail::thread_index()));
#pragma omp for schedule(dynamic, chunk)
      for (std::int64_t b = 0; b < a.B; ++b) {
        if (!route_episode(a, o, rk, b, s)) bad.record(b);
      }
    }
  }
  if (bad.any()) return non_finite_status(a, bad.get());
  return Status::success();
}

namespace {

// sum_i a[i sa] b[i sb] in float64, four partial sums in a fixed order: the same value for any batch or thread.
// Squares of float32 values cannot overflow float64, so a non-finite result means a non-finite input.
double dot64(const float* a, std::int64_t sa, const float* b, std::int64_t sb, std::int64_t n) noexcept {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(a[i * sa]) * b[i * sb];
    s1 += static_cast<double>(a[(i + 1) * sa]) * b[(i + 1) * sb];
    s2 += static_cast<double>(a[(i + 2) * sa]) * b[(i + 2) * sb];
    s3 += static_cast<double>(a[(i + 3) * sa]) * b[(i + 3) * sb];
  }
  for (; i < n; ++i) s0 += static_cast<double>(a[i * sa]) * b[i * sb];
  return (s0 + s1) + (s2 + s3);
}

struct Candidate {
  float score;
  std::int64_t row;
};

// Best first: higher score, then the lower row.
bool better(const Candidate& x, const Candidate& y) noexcept {
  return x.score > y.score || (x.score == y.score && x.row < y.row);
}

// One query's k nearest kept rows into out (k entries, -1 padded); false when the query is not finite.
bool nearest_query(const NearestArgs& a, const double* norms, std::int64_t b, Candidate* cand,
                   std::int64_t* out) noexcept {
  const float* q = a.queries.row(b);
  const std::int64_t qd = a.queries.s1, td = a.table.s1;
  const double qn = std::sqrt(dot64(q, qd, q, qd, a.D));
  if (!std::isfinite(qn)) return false;
  std::int64_t count = 0;
  for (std::int64_t m = 0; m < a.M; ++m) {
    if (a.keep.data != nullptr && a.keep.row(b)[m * a.keep.s1] == 0) continue;
    const double denom = qn * norms[m];
    float score = 0.0f;
    if (denom > 0.0) {
      const double c = dot64(q, qd, a.table.row(m), td, a.D) / denom;
      score = static_cast<float>(std::min(1.0, std::max(-1.0, c)));
    }
    cand[count++] = {score, m};
  }
  const std::int64_t kept = std::min(count, a.k);
  std::partial_sort(cand, cand + kept, cand + count, better);
  for (std::int64_t r = 0; r < a.k; ++r) out[r] = r < kept ? cand[r].row : -1;
  return true;
}

}  // namespace

Status nearest(const NearestArgs& a, std::int64_t* out) {
  if (a.B < 0 || a.M < 0 || a.D < 0) {
    return Status::error(StatusCode::invalid_argument, "table", "table and queries must have non-negative sizes");
  }
  if (a.k < 1) return Status::error(StatusCode::out_of_range, "k", "k must be >= 1; got " + std::to_string(a.k));
  detail::ScratchLayout shared;
  shared.take(a.M, sizeof(double));
  const detail::TeamScratch norms_block(shared.bytes(), 1);
  if (!norms_block.ok()) return norms_block.failure("nearest", "table norms");
  auto* norms = reinterpret_cast<double*>(norms_block.slot(0));
  // Small calls run on the calling thread: even an if(false) parallel region costs a team setup.
  const std::int64_t row_work = a.M * std::max<std::int64_t>(a.D, 1);
  detail::FirstError bad_row(a.M);
  auto norm_of = [&](std::int64_t m) {
    const float* t = a.table.row(m);
    norms[m] = std::sqrt(dot64(t, a.table.s1, t, a.table.s1, a.D));
    if (!std::isfinite(norms[m])) bad_row.record(m);
  };
  if (row_work < detail::kParallelWork) {
    for (std::int64_t m = 0; m < a.M; ++m) norm_of(m);
  } else {
#pragma omp parallel for schedule(static)
    for (std::int64_t m = 0; m < a.M; ++m) norm_of(m);
  }
  if (bad_row.any()) {
    return Status::error(StatusCode::non_finite, "table",
                         "table must be finite; got NaN or infinity in row " + std::to_string(bad_row.get()));
  }
  detail::ScratchLayout each;
  each.take(a.M, sizeof(Candidate));
  const bool parallel = a.B > 1 && a.B * row_work >= detail::kParallelWork;
  const int threads = parallel ? detail::team_size(a.B) : 1;
  const detail::TeamScratch scratch(each.bytes(), threads);
  if (!scratch.ok()) return scratch.failure("nearest", "per-thread candidates");
  detail::FirstError bad_query(a.B);
  if (!parallel) {
    auto* cand = reinterpret_cast<Candidate*>(scratch.slot(0));
    for (std::int64_t b = 0; b < a.B; ++b) {
      if (!nearest_query(a, norms, b, cand, out + b * a.k)) bad_query.record(b);
    }
  } else {
#pragma omp parallel num_threads(threads)
    {
      auto* cand = reinterpret_cast<Candidate*>(scratch.slot(detail::thread_index()));
#pragma omp for schedule(dynamic, 16)
      for (std::int64_t b = 0; b < a.B; ++b) {
        if (!nearest_query(a, norms, b, cand, out + b * a.k)) bad_query.record(b);
      }
    }
  }
  if (bad_query.any()) {
    return Status::error(StatusCode::non_finite, "queries",
                         "queries must be finite; got NaN or infinity at query " + std::to_string(bad_query.get()));
  }
  return Status::success();
}

}  // namespace toporoute
