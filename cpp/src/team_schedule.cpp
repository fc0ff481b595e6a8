// team_schedule(), team_scores() and topology_distance() (cpp/include/toporoute/team_schedule.hpp), step by step
// as python/toporoute/backends/_reference_schedule.py. A graph lives in one 64-bit word per row; the schedule's
// strongly connected components come from the reachability closure (bit-parallel Warshall) intersected with its
// transpose, and the condensation is ordered by Kahn's rule over bit masks. The score statistics add in the
// reference's order in float64 (this file is built without FMA contraction).
#include "toporoute/team_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "dag_graph.hpp"
#include "parallel.hpp"

namespace toporoute {
namespace {

using Word = std::uint64_t;
constexpr Word kOne = 1;

inline int popcount(Word x) { return static_cast<int>(detail::BitGraph::popcount(x)); }
inline int lowest(Word x) { return __builtin_ctzll(x); }
inline bool has(Word x, std::int64_t i) { return (x >> i) & 1u; }

std::string at(std::int64_t b, std::int64_t i, std::int64_t j) {
  return "[" + std::to_string(b) + ", " + std::to_string(i) + ", " + std::to_string(j) + "]";
}

Status check_batch(const TeamGraphs& g, const char* name) {
  if (g.B < 0 || g.N < 0 || g.N > kTeamMaxNodes) {
    return Status::error(StatusCode::invalid_argument, name,
                         std::string(name) + " must hold at most " + std::to_string(kTeamMaxNodes) +
                             " nodes; got N = " + std::to_string(g.N));
  }
  return Status::success();
}

// Bit i set when row[i * stride] != 0, for i < n <= 64. A contiguous row goes 16 bytes per SSE2 compare and
// movemask (SSE2 is the x86-64 baseline, no extra ISA), the word kept in a register; the rest by load_bits.
inline Word row_word(const std::uint8_t* row, std::int64_t stride, std::int64_t n) {
  Word bits = 0;
  std::int64_t c = 0;
#if defined(__SSE2__)
  if (stride == 1) {
    const __m128i zero = _mm_setzero_si128();
    for (; c + 16 <= n; c += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c));
      const auto nonzero = static_cast<unsigned>(~_mm_movemask_epi8(_mm_cmpeq_epi8(v, zero))) & 0xFFFFu;
      bits |= Word{nonzero} << c;
    }
  }
#endif
  if (c < n) {
    Word tail = 0;
    detail::load_bits(row + c * stride, stride, n - c, &tail);
    bits |= tail << c;
  }
  return bits;
}

// Graph b as its alive mask and one word per row. False when an edge touches a dead node.
bool load_graph(const TeamGraphs& g, std::int64_t b, Word& alive, Word* rows) {
  alive = row_word(g.alive + b * g.a_sb, g.a_sn, g.N);
  Word stray = 0;
  for (std::int64_t u = 0; u < g.N; ++u) {
    rows[u] = row_word(g.adj + b * g.adj_sb + u * g.adj_sr, g.adj_sc, g.N);
    stray |= rows[u] & ~(has(alive, u) ? alive : 0);
  }
  return stray == 0;
}

// reference.check_consistent for graph b: its first edge (C order) touching a dead node.
Status consistency_error(const TeamGraphs& g, std::int64_t b, const char* adj_name, const char* alive_name) {
  Word alive = 0;
  detail::load_bits(g.alive + b * g.a_sb, g.a_sn, g.N, &alive);
  for (std::int64_t u = 0; u < g.N; ++u) {
    for (std::int64_t v = 0; v < g.N; ++v) {
      if (g.adj[b * g.adj_sb + u * g.adj_sr + v * g.adj_sc] == 0 || (has(alive, u) && has(alive, v))) continue;
      const std::int64_t dead = has(alive, u) ? v : u;
      return Status::error(StatusCode::invalid_argument, adj_name,
                           std::string(adj_name) + " must have no edge touching a dead node; got " + adj_name +
                               at(b, u, v) + " with " + alive_name + "[" + std::to_string(b) + ", " +
                               std::to_string(dead) + "] False");
    }
  }
  return Status::error(StatusCode::runtime, "", "team ops: consistency_error called on a consistent graph");
}

// ------------------------------------------------------------------------------------------------ schedule

void schedule_graph(std::int64_t N, Word alive, Word* rows, const TeamScheduleOut& o, std::int64_t b) {
  Word reach[64], into[64], members[64], preds[64], own[64];
  int by_number[64], comp_level[64], per_level[65];
  std::int32_t* component = o.component + b * N;
  std::int32_t* level = o.level + b * N;
  std::fill(component, component + N, -1);
  std::fill(level, level + N, -1);
  for (std::int64_t u = 0; u < N; ++u) {
    rows[u] &= ~(kOne << u);  // self-loops ignored
    reach[u] = rows[u] | (alive & (kOne << u));
    into[u] = 0;
  }
  // reach[i]: the nodes i reaches (itself included); Warshall, one word per row
  for (Word ks = alive; ks != 0; ks &= ks - 1) {
    const int k = lowest(ks);
    const Word rk = reach[k];
    for (Word is = alive; is != 0; is &= is - 1) {
      const int i = lowest(is);
      reach[i] |= rk & (Word{0} - ((reach[i] >> k) & 1u));
    }
  }
  for (Word us = alive; us != 0; us &= us - 1) {
    const int u = lowest(us);
    for (Word vs = rows[u]; vs != 0; vs &= vs - 1) into[lowest(vs)] |= kOne << u;
  }
  // components, indexed by their lowest node; their predecessors as a node mask
  int ncomp = 0;
  for (Word rest = alive; rest != 0; ++ncomp) {
    const int u = lowest(rest);
    Word m = 0;  // the nodes u reaches that reach u
    for (Word vs = reach[u]; vs != 0; vs &= vs - 1) {
      const int v = lowest(vs);
      m |= static_cast<Word>((reach[v] >> u) & 1u) << v;
    }
    Word in = 0;
    for (Word vs = m; vs != 0; vs &= vs - 1) {
      own[lowest(vs)] = m;
      in |= into[lowest(vs)];
    }
    members[ncomp] = m;
    preds[ncomp] = in & ~m;
    rest &= ~m;
  }
  // Kahn over the condensation: the ready component holding the lowest node first
  Word pending = ncomp == 64 ? ~Word{0} : (kOne << ncomp) - 1;
  Word done = 0;
  int n_levels = 0;
  bool cyclic = false;
  std::fill(per_level, per_level + N + 1, 0);
  for (int number = 0; number < ncomp; ++number) {
    int c = -1;
    for (Word ps = pending; ps != 0; ps &= ps - 1) {
      if ((preds[lowest(ps)] & ~done) == 0) {
        c = lowest(ps);
        break;
      }
    }
    pending &= ~(kOne << c);
    done |= members[c];
    int lv = 0;
    for (Word vs = preds[c]; vs != 0; vs &= vs - 1) lv = std::max(lv, level[lowest(vs)] + 1);
    for (Word vs = members[c]; vs != 0; vs &= vs - 1) {
      const int v = lowest(vs);
      component[v] = number;
      level[v] = lv;
    }
    by_number[number] = c;
    comp_level[number] = lv;
    per_level[lv + 1] += popcount(members[c]);
    n_levels = std::max(n_levels, lv + 1);
    cyclic |= popcount(members[c]) >= 2;
  }
  o.n_levels[b] = n_levels;
  o.cyclic[b] = cyclic;
  // order: a counting sort of the components by level, stable in their numbering
  for (int lv = 0; lv < n_levels; ++lv) per_level[lv + 1] += per_level[lv];
  std::int32_t* order = o.order + b * N;
  for (int number = 0; number < ncomp; ++number) {
    int& pos = per_level[comp_level[number]];
    for (Word vs = members[by_number[number]]; vs != 0; vs &= vs - 1) order[pos++] = lowest(vs);
  }
  std::fill(order + popcount(alive), order + N, -1);
  for (std::int64_t u = 0; u < N; ++u) {
    const Word lagged = has(alive, u) ? rows[u] & own[u] : 0;
    detail::store_bits(&lagged, N, o.lagged + (b * N + u) * N);
  }
}

// ------------------------------------------------------------------------------------------------ scores

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct ScoresScratch {
  double* mean;          // T: the round means in float64
  double* sq;            // T: sums of squared deviations
  double* count;         // T: present nodes
  double* log_phi;       // N
  std::int64_t* rounds;  // min(window, T): the rounds of one slope
};

struct ScoresPlan {
  detail::ScratchLayout layout;
  std::uint64_t mean, sq, count, log_phi, rounds;
  ScoresPlan(std::int64_t T, std::int64_t N, std::int64_t window) {
    mean = layout.take(T, 8);
    sq = layout.take(T, 8);
    count = layout.take(T, 8);
    log_phi = layout.take(N, 8);
    rounds = layout.take(std::min(window, T), 8);
  }
  ScoresScratch bind(unsigned char* base) const {
    return {reinterpret_cast<double*>(base + mean), reinterpret_cast<double*>(base + sq),
            reinterpret_cast<double*>(base + count), reinterpret_cast<double*>(base + log_phi),
            reinterpret_cast<std::int64_t*>(base + rounds)};
  }
};

// x where q, else +0.0, without a branch (present masks are random: a branch here mispredicts half the time).
inline double keep(bool q, double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, 8);
  bits &= std::uint64_t{0} - static_cast<std::uint64_t>(q);
  std::memcpy(&x, &bits, 8);
  return x;
}

// Finite and in [0, 1] (NaN fails both comparisons, infinities one).
inline bool valid_score(float h) { return (h >= 0.0f) & (h <= 1.0f); }

// Least-squares slope of y(t) over the rounds rounds[0 .. k) (ascending); 0 with fewer than 2.
template <class Y>
double slope(const std::int64_t* rounds, std::int64_t k, Y y) {
  if (k < 2) return 0.0;
  double st = 0.0, sy = 0.0;
  for (std::int64_t i = 0; i < k; ++i) {
    st += static_cast<double>(rounds[i]);
    sy += y(rounds[i]);
  }
  const double count = static_cast<double>(k);
  const double tbar = st / count, ybar = sy / count;
  double num = 0.0, den = 0.0;
  for (std::int64_t i = 0; i < k; ++i) {
    const double dt = static_cast<double>(rounds[i]) - tbar;
    num += dt * (y(rounds[i]) - ybar);
    den += dt * dt;
  }
  return num / den;
}

// The last `window` rounds t (ascending) where use(t), into rounds; returns how many.
template <class Use>
std::int64_t last_rounds(std::int64_t T, std::int64_t window, Use use, std::int64_t* rounds) {
  std::int64_t k = 0;
  for (std::int64_t t = T - 1; t >= 0 && k < window; --t) {
    if (use(t)) rounds[k++] = t;
  }
  std::reverse(rounds, rounds + k);
  return k;
}

// Graph b's statistics; false (nothing written) when a present score is not finite or outside [0, 1].
bool scores_graph(const TeamScoresArgs& a, const TeamScoresOut& o, std::int64_t b, const ScoresScratch& s) {
  const std::int64_t T = a.T, N = a.N, h_st = a.h_st, h_sn = a.h_sn, p_st = a.p_st, p_sn = a.p_sn;
  const float* h = a.history + b * a.h_sb;
  const std::uint8_t* p = a.present + b * a.p_sb;
  auto score = [=](std::int64_t t, std::int64_t n) { return h[t * h_st + n * h_sn]; };
  auto here = [=](std::int64_t t, std::int64_t n) { return p[t * p_st + n * p_sn] != 0; };
  // Each sum runs over ascending node index (the reference's order) with an absent node adding +0.0 (as the
  // reference's masked arrays do: no sum here is ever -0.0, so that is the identity). The rounds' sums are
  // independent, so the node loop is the outer one: T chains in flight instead of one.
  double* total = s.mean;
  std::fill(total, total + T, 0.0);
  std::fill(s.sq, s.sq + T, 0.0);
  std::fill(s.count, s.count + T, 0.0);
  bool bad = false;
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t t = 0; t < T; ++t) {
      const bool q = here(t, n);
      const float c = score(t, n);
      bad |= q & !valid_score(c);
      total[t] += keep(q, static_cast<double>(c));
      s.count[t] += static_cast<double>(q);
    }
  }
  if (bad) return false;
  for (std::int64_t t = 0; t < T; ++t) s.mean[t] = s.count[t] > 0.0 ? total[t] / s.count[t] : kNaN;
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t t = 0; t < T; ++t) {
      const double d = keep(here(t, n), static_cast<double>(score(t, n)) - s.mean[t]);
      s.sq[t] += d * d;
    }
  }
  for (std::int64_t t = 0; t < T; ++t) {
    o.mean[b * T + t] = static_cast<float>(s.mean[t]);
    o.var[b * T + t] = static_cast<float>(s.count[t] > 0.0 ? s.sq[t] / s.count[t] : kNaN);
  }
  // replicator weights: softmax over the last round's nodes of eta * the summed excess over the round means
  std::fill(s.log_phi, s.log_phi + N, 0.0);
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t n = 0; n < N; ++n) {
      s.log_phi[n] += keep(here(t, n), static_cast<double>(score(t, n)) - s.mean[t]);
    }
  }
  const std::int64_t last = T - 1;
  double top = -std::numeric_limits<double>::infinity();
  for (std::int64_t n = 0; n < N; ++n) {
    s.log_phi[n] *= a.eta;
    if (here(last, n)) top = std::max(top, s.log_phi[n]);
  }
  double z = 0.0;
  for (std::int64_t n = 0; n < N; ++n) {
    if (!here(last, n)) continue;
    s.log_phi[n] = std::exp(s.log_phi[n] - top);  // from here on: the unnormalised weight
    z += s.log_phi[n];
  }
  for (std::int64_t n = 0; n < N; ++n) {
    const bool now = here(last, n);
    o.pi[b * N + n] = now ? static_cast<float>(s.log_phi[n] / z) : 0.0f;
    const std::int64_t k = last_rounds(T, a.window, [&](std::int64_t t) { return here(t, n); }, s.rounds);
    o.trend[b * N + n] =
        static_cast<float>(slope(s.rounds, k, [&](std::int64_t t) { return static_cast<double>(score(t, n)); }));
    const float c = score(last, n);
    o.last[b * N + n] = now ? c : std::numeric_limits<float>::quiet_NaN();
    o.death[b * N + n] = now && static_cast<double>(c) < a.death_threshold;
  }
  const std::int64_t k = last_rounds(T, a.window, [&](std::int64_t t) { return !std::isnan(s.mean[t]); }, s.rounds);
  o.mean_trend[b] = static_cast<float>(slope(s.rounds, k, [&](std::int64_t t) { return s.mean[t]; }));
  o.delta_mean[b] = static_cast<float>(T >= 2 ? s.mean[T - 1] - s.mean[T - 2] : kNaN);
  return true;
}

// reference._check_scores for graph b: its first bad present score in C order.
Status score_error(const TeamScoresArgs& a, std::int64_t b) {
  for (std::int64_t t = 0; t < a.T; ++t) {
    for (std::int64_t n = 0; n < a.N; ++n) {
      if (a.present[b * a.p_sb + t * a.p_st + n * a.p_sn] == 0) continue;
      const float c = a.history[b * a.h_sb + t * a.h_st + n * a.h_sn];
      if (valid_score(c)) continue;
      char text[32];
      if (std::isnan(c)) {
        std::snprintf(text, sizeof text, "nan");
      } else {
        std::snprintf(text, sizeof text, "%.9g", static_cast<double>(c));
      }
      return Status::error(std::isfinite(c) ? StatusCode::out_of_range : StatusCode::non_finite, "history",
                           std::string("history must be finite and in [0, 1] where present; got ") + text +
                               " at " + at(b, t, n));
    }
  }
  return Status::error(StatusCode::runtime, "", "team_scores: score_error called on valid scores");
}

// Runs body(b) over the batch, on the calling thread when `work` is small; returns the lowest b it failed on
// (B when none). `body` never throws.
template <class Body>
std::int64_t for_batch(std::int64_t B, std::int64_t work, Body body) {
  detail::FirstError failed(B);
  if (work < detail::kParallelWork) {
    for (std::int64_t b = 0; b < B; ++b) {
      if (!body(b)) {
        failed.record(b);
        break;
      }
    }
    return failed.get();
  }
#pragma omp parallel for schedule(dynamic, 64) num_threads(detail::team_size(B))
  for (std::int64_t b = 0; b < B; ++b) {
    if (!body(b)) failed.record(b);
  }
  return failed.get();
}

}  // namespace

Status team_schedule(const TeamGraphs& g, const TeamScheduleOut& o) {
  TOPOROUTE_RETURN_IF_ERROR(check_batch(g, "adj"));
  const std::int64_t N = g.N;
  const std::int64_t bad = for_batch(g.B, g.B * N * N, [&](std::int64_t b) {
    Word alive = 0, rows[64];
    if (!load_graph(g, b, alive, rows)) return false;
    schedule_graph(N, alive, rows, o, b);
    return true;
  });
  if (bad < g.B) return consistency_error(g, bad, "adj", "alive");
  return Status::success();
}

Status team_scores(const TeamScoresArgs& a, const TeamScoresOut& o) {
  if (a.B < 0 || a.T < 1 || a.N < 0) {
    return Status::error(StatusCode::invalid_argument, "history",
                         "history must hold at least one round (T >= 1); got T = " + std::to_string(a.T));
  }
  if (!(a.eta > 0.0 && std::isfinite(a.eta))) {
    return Status::error(StatusCode::out_of_range, "eta", "eta must be a finite number > 0");
  }
  if (a.window < 2) {
    return Status::error(StatusCode::out_of_range, "window", "window must be >= 2; got " + std::to_string(a.window));
  }
  if (!(a.death_threshold >= 0.0 && a.death_threshold <= 1.0)) {
    return Status::error(StatusCode::out_of_range, "death_threshold", "death_threshold must be in [0, 1]");
  }
  const std::int64_t work = a.B * a.T * a.N * 4;
  const int threads = work < detail::kParallelWork ? 1 : detail::team_size(a.B);
  const ScoresPlan plan(a.T, a.N, a.window);
  const detail::TeamScratch scratch(plan.layout.bytes(), threads);
  if (!scratch.ok()) return scratch.failure("team_scores", "per-thread scratch");
  const std::int64_t bad = for_batch(a.B, work, [&](std::int64_t b) {
    return scores_graph(a, o, b, plan.bind(scratch.slot(detail::thread_index())));
  });
  if (bad < a.B) return score_error(a, bad);
  return Status::success();
}

Status topology_distance(const TopologyDistanceArgs& a, std::int32_t* out) {
  TOPOROUTE_RETURN_IF_ERROR(check_batch(a.a, "adj_a"));
  if (a.b.B != a.a.B || a.b.N != a.a.N) {
    return Status::error(StatusCode::invalid_argument, "adj_b", "adj_b must have the shape of adj_a");
  }
  const std::int64_t B = a.a.B, N = a.a.N;
  detail::FirstError bad_b(B);
  const std::int64_t bad_a = for_batch(B, B * N * N / 4, [&](std::int64_t b) {
    Word alive_a = 0, alive_b = 0, rows_a[64], rows_b[64];
    if (!load_graph(a.a, b, alive_a, rows_a)) return false;
    if (!load_graph(a.b, b, alive_b, rows_b)) {
      bad_b.record(b);
      return true;  // adj_a is checked over the whole batch first, as the reference does
    }
    const Word both = alive_a & alive_b;
    Word same = both;
    if (a.gen_a != nullptr || a.gen_b != nullptr) {
      for (Word vs = both; vs != 0; vs &= vs - 1) {
        const int v = lowest(vs);
        const std::int32_t ga = a.gen_a == nullptr ? 0 : a.gen_a[b * a.ga_sb + v * a.ga_sn];
        const std::int32_t gb = a.gen_b == nullptr ? 0 : a.gen_b[b * a.gb_sb + v * a.gb_sn];
        if (ga != gb) same &= ~(kOne << v);
      }
    }
    std::int64_t d = popcount(alive_a ^ alive_b) + 2 * popcount(both & ~same);
    for (std::int64_t u = 0; u < N; ++u) {
      const Word kept = has(same, u) ? same : 0;
      d += popcount(rows_a[u] ^ rows_b[u]) + 2 * popcount(rows_a[u] & rows_b[u] & ~kept);
    }
    out[b] = static_cast<std::int32_t>(d);
    return true;
  });
  if (bad_a < B) return consistency_error(a.a, bad_a, "adj_a", "alive_a");
  if (bad_b.any()) return consistency_error(a.b, bad_b.get(), "adj_b", "alive_b");
  return Status::success();
}

}  // namespace toporoute
