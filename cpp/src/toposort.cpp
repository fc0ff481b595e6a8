// toposort(): greedy min-in-degree order with cycle breaking. Unweighted graphs with N <= 64 use out-edge
// bitsets and a Kahn ready set (O(N^2 / 8 + E) per DAG); the general path keeps incremental in-degree counts,
// and weighted graphs recompute each candidate's weight sum in ascending source order so every backend
// rounds identically.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "bits.hpp"
#include "parallel.hpp"
#include "toporoute/toposort.hpp"

namespace toporoute {
namespace {

bool is_active(const ToposortArgs& a, std::int64_t b, std::int64_t n) {
  return a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0;
}

bool edge(const ToposortArgs& a, std::int64_t b, std::int64_t src, std::int64_t dst) {
  return a.adj[b * a.adj_sb + src * a.adj_sr + dst * a.adj_sc] != 0;
}

void finish_inactive(const ToposortArgs& a, const ToposortOut& o, std::int64_t b, std::int64_t placed) {
  const std::int64_t N = a.N;
  for (std::int64_t n = 0; n < N; ++n) {
    if (!is_active(a, b, n)) {
      o.order[b * N + placed++] = static_cast<std::int32_t>(n);
      o.level[b * N + n] = -1;
    }
  }
}

// Unweighted, N <= 64. Only out-edge masks are built: in-degrees come from the out masks, a node's level is
// pushed along its out-edges when it is placed, and the in-edges of a node are gathered only when a cycle
// forces a node with unplaced predecessors (the removed edges). On a DAG every step is one ctz on the set
// of nodes whose in-degree from unplaced nodes is 0, lowest index first.
void sort_bitset(const ToposortArgs& a, const ToposortOut& o, std::int64_t b) {
  const std::int64_t N = a.N;
  std::uint64_t out_mask[64];  // bit i of out_mask[j]: edge j -> i
  int count[64];               // in-degree from unplaced nodes
  std::int32_t pending[64];    // 1 + the highest level among placed predecessors
  std::uint64_t unplaced = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    unplaced |= std::uint64_t{is_active(a, b, n)} << n;
    count[n] = 0;
    pending[n] = 0;
  }
  const std::uint8_t* g = a.adj + b * a.adj_sb;
  for (std::int64_t j = 0; j < N; ++j) {
    const std::uint64_t keep = (unplaced >> j & 1u) ? unplaced & ~(std::uint64_t{1} << j) : 0;  // no self-loops,
    const std::uint8_t* row = g + j * a.adj_sr;                                                  // no inactive ends
    const std::uint64_t raw = detail::row_bits(row, a.adj_sc, N);
    const std::uint64_t out = raw & keep;
    out_mask[j] = out;
    if (a.adj_sc == 1 && keep != 0) {
      // Contiguous row: add it to the counts as a byte vector (the compiler vectorises this loop), then
      // take back the self-loop and the edges into inactive nodes, which `keep` dropped from the mask.
      for (std::int64_t i = 0; i < N; ++i) count[i] += row[i] != 0;
      for (std::uint64_t r = raw & ~keep; r != 0; r &= r - 1) --count[__builtin_ctzll(r)];
    } else {
      for (std::uint64_t r = out; r != 0; r &= r - 1) ++count[__builtin_ctzll(r)];
    }
  }
  std::uint64_t ready = 0;
  for (std::int64_t i = 0; i < N; ++i) ready |= std::uint64_t{count[i] == 0} << i;
  ready &= unplaced;
  std::int32_t* level = o.level + b * N;
  std::uint8_t* removed = o.removed + b * N * N;
  std::fill(removed, removed + N * N, std::uint8_t{0});
  bool dag = true;
  std::int64_t t = 0;
  while (unplaced != 0) {
    int best;
    if (ready != 0) {
      best = __builtin_ctzll(ready);
    } else {  // every unplaced node sits on a cycle: smallest count, lowest index; its in-edges from
              // unplaced nodes are removed
      best = -1;
      int best_count = std::numeric_limits<int>::max();
      for (std::uint64_t rest = unplaced; rest != 0; rest &= rest - 1) {
        const int i = __builtin_ctzll(rest);
        if (count[i] < best_count) {
          best_count = count[i];
          best = i;
        }
      }
      dag = false;
      for (std::uint64_t r = unplaced & ~(std::uint64_t{1} << best); r != 0; r &= r - 1) {
        const int j = __builtin_ctzll(r);
        removed[j * N + best] = static_cast<std::uint8_t>(out_mask[j] >> best & 1u);
      }
    }
    const std::uint64_t bit = std::uint64_t{1} << best;
    unplaced &= ~bit;
    ready &= ~bit;
    const std::int32_t lv = pending[best];
    level[best] = lv;
    o.order[b * N + t++] = best;
    for (std::uint64_t r = out_mask[best] & unplaced; r != 0; r &= r - 1) {
      const int i = __builtin_ctzll(r);
      pending[i] = std::max(pending[i], lv + 1);
      ready |= std::uint64_t{--count[i] == 0} << i;
    }
  }
  o.is_dag[b] = dag;
  finish_inactive(a, o, b, t);
}

// Working memory of the general path, O(N^2) bytes per thread, carved from one slot of a detail::TeamScratch.
struct GeneralPlan {
  std::uint64_t e, unplaced, count, bytes;
  explicit GeneralPlan(std::int64_t N) {
    detail::ScratchLayout l;
    e = l.take(N * N, 1);
    unplaced = l.take(N, 1);
    count = l.take(N, sizeof(std::int64_t));
    bytes = l.bytes();
  }
};

struct GeneralScratch {
  std::uint8_t* e;         // N x N live edges (no self-loops, both ends active)
  std::uint8_t* unplaced;  // N flags
  std::int64_t* count;     // N in-degrees from unplaced nodes
  GeneralScratch(const GeneralPlan& p, unsigned char* base)
      : e(base + p.e), unplaced(base + p.unplaced), count(reinterpret_cast<std::int64_t*>(base + p.count)) {}
};

void sort_general(const ToposortArgs& a, const ToposortOut& o, std::int64_t b, GeneralScratch& s) {
  const std::int64_t N = a.N;
  std::int64_t n_active = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    s.unplaced[n] = is_active(a, b, n);
    n_active += s.unplaced[n];
    s.count[n] = 0;
  }
  for (std::int64_t j = 0; j < N; ++j) {
    for (std::int64_t i = 0; i < N; ++i) {
      const bool on = j != i && s.unplaced[j] && s.unplaced[i] && edge(a, b, j, i);
      s.e[j * N + i] = on;
      s.count[i] += on;
    }
  }
  const float* w = a.weights;
  std::int32_t* level = o.level + b * N;
  std::uint8_t* removed = o.removed + b * N * N;
  std::fill(removed, removed + N * N, std::uint8_t{0});
  bool dag = true;
  for (std::int64_t t = 0; t < n_active; ++t) {
    std::int64_t best = -1;
    bool best_has = true;
    double best_key = std::numeric_limits<double>::infinity();
    for (std::int64_t i = 0; i < N; ++i) {
      if (!s.unplaced[i]) continue;
      const bool has = s.count[i] > 0;
      double key = static_cast<double>(s.count[i]);
      if (w != nullptr) {
        key = 0.0;
        for (std::int64_t j = 0; j < N; ++j) {
          if (s.unplaced[j] && s.e[j * N + i]) key += static_cast<double>(w[b * a.w_sb + j * a.w_sr + i * a.w_sc]);
        }
      }
      if (best < 0 || (has < best_has) || (has == best_has && key < best_key)) {
        best = i;
        best_has = has;
        best_key = key;
      }
    }
    std::int32_t lv = 0;
    for (std::int64_t j = 0; j < N; ++j) {
      if (!s.e[j * N + best]) continue;
      if (s.unplaced[j]) {
        removed[j * N + best] = 1;
        dag = false;
      } else {
        lv = std::max(lv, level[j] + 1);
      }
    }
    level[best] = lv;
    o.order[b * N + t] = static_cast<std::int32_t>(best);
    s.unplaced[best] = 0;
    for (std::int64_t i = 0; i < N; ++i) s.count[i] -= s.e[best * N + i];
  }
  o.is_dag[b] = dag;
  finish_inactive(a, o, b, n_active);
}

// Shortest-looking form, as numpy prints a float32 ("-0.5", "nan", "inf").
std::string format_float(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

// Same order as the reference: a non-finite weight anywhere wins over a negative one.
Status check_toposort_weights(const ToposortArgs& a) {
  if (a.weights == nullptr) return Status::success();
  for (const bool finite_pass : {true, false}) {
    for (std::int64_t b = 0; b < a.B; ++b) {
      for (std::int64_t j = 0; j < a.N; ++j) {
        for (std::int64_t i = 0; i < a.N; ++i) {
          const float v = a.weights[b * a.w_sb + j * a.w_sr + i * a.w_sc];
          const bool bad = finite_pass ? !std::isfinite(v) : v < 0.0f;
          if (!bad) continue;
          const std::string where =
              " at [" + std::to_string(b) + ", " + std::to_string(j) + ", " + std::to_string(i) + "]";
          if (finite_pass) {
            return Status::error(StatusCode::non_finite, "weights",
                                 "weights must be finite; got " + format_float(v) + where);
          }
          return Status::error(StatusCode::out_of_range, "weights",
                               "weights must be >= 0; got " + format_float(v) + where);
        }
      }
    }
  }
  return Status::success();
}

Status toposort(const ToposortArgs& a, const ToposortOut& o) {
  if (a.B < 0 || a.N < 0) return Status::error(StatusCode::invalid_argument, "adj", "adj must have non-negative dimensions");
  TOPOROUTE_RETURN_IF_ERROR(check_toposort_weights(a));
  const bool bitset = a.weights == nullptr && a.N <= 64;
  const std::int64_t work = a.B * a.N * a.N * (bitset ? 1 : a.N);
  const bool parallel = work >= detail::kParallelWork;
  const int threads = parallel ? detail::team_size(a.B) : 1;
  const GeneralPlan plan(bitset ? 0 : a.N);
  const detail::TeamScratch scratch(plan.bytes, threads);
  if (!scratch.ok()) return scratch.failure("toposort", "per-thread scratch");
  auto sort = [&](std::int64_t b, unsigned char* slot) {
    if (bitset) {
      sort_bitset(a, o, b);
    } else {
      GeneralScratch s(plan, slot);
      sort_general(a, o, b, s);
    }
  };
  if (!parallel) {  // a few graphs: no thread team at all
    for (std::int64_t b = 0; b < a.B; ++b) sort(b, scratch.slot(0));
    return Status::success();
  }
  const int chunk = detail::chunk_size(a.B, threads, 64);
#pragma omp parallel num_threads(threads)
  {
    unsigned char* slot = scratch.slot(detail::thread_index());
#pragma omp for schedule(dynamic, chunk)
    for (std::int64_t b = 0; b < a.B; ++b) sort(b, slot);
  }
  return Status::success();
}

}  // namespace toporoute
