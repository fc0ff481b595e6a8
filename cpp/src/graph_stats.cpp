// graph_stats(): per-graph counts in one pass over the N x N block. Self-loops and inactive nodes ignored.
#include <cstdint>

#include "parallel.hpp"
#include "toporoute/graph_stats.hpp"

namespace toporoute {

Status graph_stats(const GraphStatsArgs& a, const GraphStatsOut& o) {
  if (a.B < 0 || a.N < 0) return Status::error(StatusCode::invalid_argument, "adj", "adj must have non-negative dimensions");
  const std::int64_t N = a.N;
  auto one = [&](std::int64_t b) {
    auto act = [&](std::int64_t n) { return a.active == nullptr || a.active[b * a.a_sb + n * a.a_sn] != 0; };
    auto on = [&](const std::uint8_t* g, std::int64_t sb, std::int64_t sr, std::int64_t sc, std::int64_t j,
                  std::int64_t i) { return j != i && act(j) && act(i) && g[b * sb + j * sr + i * sc] != 0; };
    std::int64_t edges = 0, mutual = 0, inter = 0, uni = 0, n_active = 0;
    for (std::int64_t n = 0; n < N; ++n) {
      o.in_degree[b * N + n] = 0;
      o.out_degree[b * N + n] = 0;
      n_active += act(n);
    }
    for (std::int64_t j = 0; j < N; ++j) {
      for (std::int64_t i = 0; i < N; ++i) {
        const bool e = on(a.adj, a.adj_sb, a.adj_sr, a.adj_sc, j, i);
        if (e) {
          ++edges;
          ++o.out_degree[b * N + j];
          ++o.in_degree[b * N + i];
          mutual += on(a.adj, a.adj_sb, a.adj_sr, a.adj_sc, i, j);
        }
        if (a.prev != nullptr) {
          const bool p = on(a.prev, a.p_sb, a.p_sr, a.p_sc, j, i);
          inter += e && p;
          uni += e || p;
        }
      }
    }
    const double pairs = static_cast<double>(n_active) * static_cast<double>(n_active - 1);
    o.edges[b] = edges;
    o.density[b] = pairs > 0 ? static_cast<double>(edges) / pairs : 0.0;
    o.reciprocity[b] = edges > 0 ? static_cast<double>(mutual) / static_cast<double>(edges) : 0.0;
    if (a.prev != nullptr) {
      o.jaccard[b] = uni > 0 ? 1.0 - static_cast<double>(inter) / static_cast<double>(uni) : 0.0;
    }
  };
  if (a.B * N * N < detail::kParallelWork) {  // a few graphs: no thread team at all
    for (std::int64_t b = 0; b < a.B; ++b) one(b);
    return Status::success();
  }
#pragma omp parallel for schedule(dynamic, 256)
  for (std::int64_t b = 0; b < a.B; ++b) one(b);
  return Status::success();
}

}  // namespace toporoute
