// dag_repair(): RepairTopology on bitset graphs, the steps of reference._repair_one in the same order:
// consistency, DFS back-edge breaking, source -> sink, out-degree cap, Beta-threshold pruning, degree-zero
// pruning. Beta means are computed in float64 exactly as numpy does (ea / (ea + eb)), so every decision matches.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "dag_graph.hpp"
#include "parallel.hpp"
#include "toporoute/dag.hpp"

namespace toporoute {
namespace {

using detail::BitGraph;

struct RepairScratch {
  BitGraph g;
  std::uint64_t* input;      // N x W: the input rows as given (for pruned_edges / added_edges)
  std::uint64_t* input_alive;  // W
  std::uint8_t* state;       // N: 0 unseen, 1 on the search stack, 2 finished
  std::int32_t* dfs_node;    // N: the search stack's nodes
  std::int64_t* dfs_next;    // N: the next successor index each stack entry scans
  std::int32_t* targets;     // N: out-edges of one node, in drop order
  std::int32_t* in_degree;   // N
  std::int32_t* out_degree;  // N
  std::int32_t* queue;       // N: nodes to prune
};

struct RepairPlan {
  detail::ScratchLayout layout;
  detail::BitGraphPlan graph;
  std::uint64_t input, input_alive, state, dfs_node, dfs_next, targets, in_degree, out_degree, queue;
  explicit RepairPlan(std::int64_t N) : graph(layout, N) {
    input = layout.take(N * graph.W, 8);
    input_alive = layout.take(graph.W, 8);
    state = layout.take(N, 1);
    dfs_node = layout.take(N, 4);
    dfs_next = layout.take(N, 8);
    targets = layout.take(N, 4);
    in_degree = layout.take(N, 4);
    out_degree = layout.take(N, 4);
    queue = layout.take(N, 4);
  }
  RepairScratch bind(unsigned char* base) const {
    return {graph.bind(base),
            reinterpret_cast<std::uint64_t*>(base + input),
            reinterpret_cast<std::uint64_t*>(base + input_alive),
            base + state,
            reinterpret_cast<std::int32_t*>(base + dfs_node),
            reinterpret_cast<std::int64_t*>(base + dfs_next),
            reinterpret_cast<std::int32_t*>(base + targets),
            reinterpret_cast<std::int32_t*>(base + in_degree),
            reinterpret_cast<std::int32_t*>(base + out_degree),
            reinterpret_cast<std::int32_t*>(base + queue)};
  }
};

double beta_alpha(const DagRepairArgs& a, std::int64_t b, std::int64_t u, std::int64_t v) {
  return static_cast<double>(a.edge_alpha[b * a.ea_sb + u * a.ea_sr + v * a.ea_sc]);
}
double beta_beta(const DagRepairArgs& a, std::int64_t b, std::int64_t u, std::int64_t v) {
  return static_cast<double>(a.edge_beta[b * a.eb_sb + u * a.eb_sr + v * a.eb_sc]);
}
double beta_mean(const DagRepairArgs& a, std::int64_t b, std::int64_t u, std::int64_t v) {
  const double ea = beta_alpha(a, b, u, v);
  return ea / (ea + beta_beta(a, b, u, v));
}

// Depth-first search from the source, then from each unvisited live node in index order, successors in
// ascending index; drops every edge into a node on the search stack.
void break_cycles(const RepairScratch& s, std::int64_t source) {
  const BitGraph& g = s.g;
  const std::int64_t N = g.N;
  std::fill(s.state, s.state + N, std::uint8_t{0});
  for (std::int64_t i = -1; i < N; ++i) {
    const std::int64_t root = i < 0 ? source : i;
    if (i >= 0 && (root == source || !g.is_alive(root))) continue;
    if (s.state[root] != 0) continue;
    s.state[root] = 1;
    std::int64_t top = 0;
    s.dfs_node[top] = static_cast<std::int32_t>(root);
    s.dfs_next[top++] = 0;
    while (top > 0) {
      const std::int64_t u = s.dfs_node[top - 1];
      std::int64_t v = g.next_bit(g.row(u), s.dfs_next[top - 1]);
      while (v >= 0 && s.state[v] != 0) {
        if (s.state[v] == 1) g.clear(u, v);
        v = g.next_bit(g.row(u), v + 1);
      }
      if (v >= 0) {
        s.dfs_next[top - 1] = v + 1;
        s.state[v] = 1;
        s.dfs_node[top] = static_cast<std::int32_t>(v);
        s.dfs_next[top++] = 0;
      } else {
        s.state[u] = 2;
        --top;
      }
    }
  }
}

void repair_graph(const DagRepairArgs& a, const DagRepairOut& o, std::int64_t b, const RepairScratch& s) {
  const DagGraphs& in = a.g;
  const BitGraph& g = s.g;
  const std::int64_t N = in.N, source = in.source, sink = in.sink;
  const bool betas = a.edge_alpha != nullptr && a.edge_beta != nullptr;
  // 1. consistency: no self-loops, edges only between live nodes, none into the source or out of the sink
  detail::load_graph(in, b, g);
  const std::int64_t W = g.W;
  std::copy(g.rows, g.rows + N * W, s.input);
  std::copy(g.alive, g.alive + W, s.input_alive);
  for (std::int64_t u = 0; u < N; ++u) {
    std::uint64_t* r = g.row(u);
    if (!g.is_alive(u) || u == sink) {
      g.clear_row(u);
      continue;
    }
    for (std::int64_t w = 0; w < W; ++w) r[w] &= g.alive[w];
    g.clear(u, u);
    g.clear(u, source);
  }
  // 2. a DAG
  break_cycles(s, source);
  // 3. the source reaches the sink
  if (!g.reaches(source, sink)) g.set(source, sink);
  // 4. out-degree cap: lowest mean dropped first (ties: the higher index), never the last path
  for (std::int64_t u = 0; u < N; ++u) {
    std::int64_t degree = 0;
    for (std::int64_t v = g.next_bit(g.row(u), 0); v >= 0; v = g.next_bit(g.row(u), v + 1)) {
      s.targets[degree++] = static_cast<std::int32_t>(v);
    }
    if (degree <= in.max_out) continue;
    if (betas) {
      std::sort(s.targets, s.targets + degree, [&](std::int32_t x, std::int32_t y) {
        const double mx = beta_mean(a, b, u, x), my = beta_mean(a, b, u, y);
        return mx < my || (mx == my && x > y);
      });
    } else {
      std::reverse(s.targets, s.targets + degree);
    }
    const std::int64_t count = degree;
    for (std::int64_t k = 0; k < count && degree > in.max_out; ++k) {
      const std::int64_t v = s.targets[k];
      g.clear(u, v);
      if (g.reaches(source, sink)) {
        --degree;
      } else {
        g.set(u, v);
      }
    }
  }
  // 5. low-success edges, in C order, never the last path
  if (betas) {
    for (std::int64_t u = 0; u < N; ++u) {
      for (std::int64_t v = g.next_bit(g.row(u), 0); v >= 0; v = g.next_bit(g.row(u), v + 1)) {
        const double ea = beta_alpha(a, b, u, v), eb = beta_beta(a, b, u, v);
        if (!(ea + eb - 2.0 * a.prior >= a.min_obs && ea / (ea + eb) < a.threshold)) continue;
        g.clear(u, v);
        if (!g.reaches(source, sink)) g.set(u, v);
      }
    }
  }
  // 6. degree-zero pruning to a fixpoint (the fixpoint does not depend on the order nodes are pruned in)
  std::fill(s.in_degree, s.in_degree + N, 0);
  for (std::int64_t u = 0; u < N; ++u) {
    s.out_degree[u] = static_cast<std::int32_t>(g.degree(u));
    for (std::int64_t v = g.next_bit(g.row(u), 0); v >= 0; v = g.next_bit(g.row(u), v + 1)) ++s.in_degree[v];
  }
  std::int64_t top = 0;
  const auto prunable = [&](std::int64_t n) {
    return n != source && n != sink && g.is_alive(n) && (s.in_degree[n] == 0 || s.out_degree[n] == 0);
  };
  for (std::int64_t n = 0; n < N; ++n) {
    if (prunable(n)) {
      g.set_alive(n, false);
      s.queue[top++] = static_cast<std::int32_t>(n);
    }
  }
  while (top > 0) {
    const std::int64_t n = s.queue[--top];
    for (std::int64_t v = g.next_bit(g.row(n), 0); v >= 0; v = g.next_bit(g.row(n), v + 1)) {
      --s.in_degree[v];
      if (prunable(v)) {
        g.set_alive(v, false);
        s.queue[top++] = static_cast<std::int32_t>(v);
      }
    }
    g.clear_row(n);
    for (std::int64_t u = 0; u < N; ++u) {
      if (!g.has(u, n)) continue;
      g.clear(u, n);
      --s.out_degree[u];
      if (prunable(u)) {
        g.set_alive(u, false);
        s.queue[top++] = static_cast<std::int32_t>(u);
      }
    }
  }
  std::uint64_t* diff = s.g.seen;  // W words of scratch (no search runs from here on)
  for (std::int64_t w = 0; w < W; ++w) diff[w] = s.input_alive[w] & ~g.alive[w];
  detail::store_bits(g.alive, N, o.alive + b * N);
  detail::store_bits(diff, N, o.pruned_nodes + b * N);
  for (std::int64_t u = 0; u < N; ++u) {
    const std::uint64_t* after = g.row(u);
    const std::uint64_t* before = s.input + u * W;
    const std::int64_t at = (b * N + u) * N;
    detail::store_bits(after, N, o.adj + at);
    for (std::int64_t w = 0; w < W; ++w) diff[w] = before[w] & ~after[w];
    detail::store_bits(diff, N, o.pruned_edges + at);
    for (std::int64_t w = 0; w < W; ++w) diff[w] = after[w] & ~before[w];
    detail::store_bits(diff, N, o.added_edges + at);
  }
}

// Shortest-looking form, as numpy prints a float32 ("-0.5", "nan", "inf").
std::string format_float(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// True when some value of the (B, N, N) view is non-finite or <= 0: one branch-free pass (NaN fails x > 0).
bool any_bad(const float* x, std::int64_t B, std::int64_t N, std::int64_t sb, std::int64_t sr, std::int64_t sc) {
  unsigned good = 1;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t u = 0; u < N; ++u) {
      const float* row = x + b * sb + u * sr;
      if (sc == 1) {
        for (std::int64_t v = 0; v < N; ++v) {
          good &= static_cast<unsigned>(row[v] > 0.0f) & static_cast<unsigned>(row[v] <= 3.4028235e38f);
        }
      } else {
        for (std::int64_t v = 0; v < N; ++v) {
          good &= static_cast<unsigned>(row[v * sc] > 0.0f) & static_cast<unsigned>(row[v * sc] <= 3.4028235e38f);
        }
      }
    }
  }
  return good == 0;
}

// reference._check_betas: non-finite values first (alpha, then beta), then values <= 0; first in C order. The
// ordered search runs only after the fused pass found something.
Status check_betas(const DagRepairArgs& a) {
  if (a.edge_alpha == nullptr || a.edge_beta == nullptr) return Status::success();
  const DagGraphs& g = a.g;
  if (!any_bad(a.edge_alpha, g.B, g.N, a.ea_sb, a.ea_sr, a.ea_sc) &&
      !any_bad(a.edge_beta, g.B, g.N, a.eb_sb, a.eb_sr, a.eb_sc)) {
    return Status::success();
  }
  for (const bool finite_pass : {true, false}) {
    for (const bool alpha : {true, false}) {
      for (std::int64_t b = 0; b < g.B; ++b) {
        for (std::int64_t u = 0; u < g.N; ++u) {
          for (std::int64_t v = 0; v < g.N; ++v) {
            const float x = alpha ? a.edge_alpha[b * a.ea_sb + u * a.ea_sr + v * a.ea_sc]
                                  : a.edge_beta[b * a.eb_sb + u * a.eb_sr + v * a.eb_sc];
            const bool bad = finite_pass ? !std::isfinite(x) : !(x > 0.0f);
            if (!bad) continue;
            const std::string name = alpha ? "edge_alpha" : "edge_beta";
            const std::string where =
                " at [" + std::to_string(b) + ", " + std::to_string(u) + ", " + std::to_string(v) + "]";
            if (finite_pass) {
              return Status::error(StatusCode::non_finite, name,
                                   name + " must be finite; got " + format_float(x) + where);
            }
            return Status::error(StatusCode::out_of_range, name, name + " must be > 0; got " + format_float(x) + where);
          }
        }
      }
    }
  }
  return Status::success();
}

}  // namespace

Status dag_repair(const DagRepairArgs& a, const DagRepairOut& o) {
  TOPOROUTE_RETURN_IF_ERROR(detail::check_graphs(a.g));
  if (!(a.threshold >= 0.0 && a.threshold <= 1.0)) {
    return Status::error(StatusCode::out_of_range, "threshold", "threshold must be in [0, 1]");
  }
  if (!(a.min_obs >= 0.0 && std::isfinite(a.min_obs))) {
    return Status::error(StatusCode::out_of_range, "min_obs", "min_obs must be a finite number >= 0");
  }
  if (!(a.prior >= 0.0 && std::isfinite(a.prior))) {
    return Status::error(StatusCode::out_of_range, "prior", "prior must be a finite number >= 0");
  }
  TOPOROUTE_RETURN_IF_ERROR(detail::check_alive_ends(a.g));
  TOPOROUTE_RETURN_IF_ERROR(check_betas(a));
  const std::int64_t B = a.g.B, N = a.g.N;
  const std::int64_t work = B * N * N * 4;
  const bool parallel = work >= detail::kParallelWork;
  const int threads = parallel ? detail::team_size(B) : 1;
  const RepairPlan plan(N);
  const detail::TeamScratch scratch(plan.layout.bytes(), threads);
  if (!scratch.ok()) return scratch.failure("dag_repair", "per-thread scratch");
  if (!parallel) {
    const RepairScratch s = plan.bind(scratch.slot(0));
    for (std::int64_t b = 0; b < B; ++b) repair_graph(a, o, b, s);
    return Status::success();
  }
#pragma omp parallel num_threads(threads)
  {
    const RepairScratch s = plan.bind(scratch.slot(detail::thread_index()));
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t b = 0; b < B; ++b) repair_graph(a, o, b, s);
  }
  return Status::success();
}

}  // namespace toporoute
