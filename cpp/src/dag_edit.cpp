// dag_edit(): HiVA topology edits on bitset graphs, each checked at once. A tentative edit touches at most
// three rows (the node's, the new node's, the removed successor's), so undoing a rejected edit restores two
// saved rows instead of copying the graph. The check order is reference._edit_one's, line for line.
#include <cstdint>
#include <string>
#include <utility>

#include "dag_graph.hpp"
#include "parallel.hpp"
#include "toporoute/dag.hpp"

namespace toporoute {
namespace {

using detail::BitGraph;

struct EditScratch {
  BitGraph g;
  std::uint64_t* saved_node;  // W words: the edited node's row before the edit
  std::uint64_t* saved_arg;   // W words: the removed successor's row before the edit
  std::int32_t* linked;       // N nodes linked by a REMOVE
};

struct EditPlan {
  detail::ScratchLayout layout;
  detail::BitGraphPlan graph;
  std::uint64_t saved_node, saved_arg, linked;
  explicit EditPlan(std::int64_t N) : graph(layout, N) {
    saved_node = layout.take(graph.W, 8);
    saved_arg = layout.take(graph.W, 8);
    linked = layout.take(N, 4);
  }
  EditScratch bind(unsigned char* base) const {
    return {graph.bind(base), reinterpret_cast<std::uint64_t*>(base + saved_node),
            reinterpret_cast<std::uint64_t*>(base + saved_arg), reinterpret_cast<std::int32_t*>(base + linked)};
  }
};

// Applies one edit when it passes every check; returns the reason and sets *made to a new node.
EditReason edit_one(const EditScratch& s, const DagGraphs& a, std::int64_t kind, std::int64_t node, std::int64_t arg,
                    std::int32_t* made) {
  const BitGraph& g = s.g;
  const std::int64_t N = g.N, sink = a.sink;
  *made = -1;
  if (kind == static_cast<std::int64_t>(EditKind::padding)) return EditReason::padding;
  if (kind < static_cast<std::int64_t>(EditKind::no_change) ||
      kind > static_cast<std::int64_t>(EditKind::connect_to_aggregator)) {
    return EditReason::bad_kind;
  }
  if (kind == static_cast<std::int64_t>(EditKind::no_change)) return EditReason::no_change;
  if (node < 0 || node >= N || !g.is_alive(node)) return EditReason::unknown_node;
  if (node == sink) return EditReason::sink;
  const std::int64_t out_degree = g.degree(node);
  const auto copy_words = [&](std::uint64_t* to, const std::uint64_t* from) {
    for (std::int64_t w = 0; w < g.W; ++w) to[w] = from[w];
  };

  if (kind == static_cast<std::int64_t>(EditKind::add_parallel) ||
      kind == static_cast<std::int64_t>(EditKind::add_serial)) {
    const bool parallel = kind == static_cast<std::int64_t>(EditKind::add_parallel);
    std::int64_t sibling = sink;
    if (parallel) {
      if (arg == -1) {
        std::int64_t v = g.next_bit(g.row(node), 0);
        if (v == sink) v = g.next_bit(g.row(node), sink + 1);
        sibling = v >= 0 ? v : sink;
      } else if (arg < 0 || arg >= N || !g.is_alive(arg)) {
        return EditReason::unknown_node;
      } else if (!g.has(node, arg)) {
        return EditReason::not_a_successor;
      } else {
        sibling = arg;
      }
    }
    if (out_degree >= a.max_out) return EditReason::out_degree;
    const std::int64_t d = g.lowest_dead();
    if (d < 0) return EditReason::no_capacity;
    copy_words(s.saved_node, g.row(node));  // the dead slot's row is empty: no edge touches a dead node
    if (parallel) {
      if (sibling == sink) {
        g.set(d, sink);
      } else {
        g.copy_row(d, g.row(sibling));
      }
    } else {
      if (out_degree == 0) {
        g.set(d, sink);
      } else {
        g.copy_row(d, g.row(node));
      }
      g.clear_row(node);
    }
    g.set(node, d);
    // every new edge touches D, whose only in-edge is node -> D: a new cycle exists iff D reaches node
    if (g.reaches(d, node)) {
      g.copy_row(node, s.saved_node);
      g.clear_row(d);
      return EditReason::cycle;
    }
    g.set_alive(d, true);
    *made = static_cast<std::int32_t>(d);
    return EditReason::ok;
  }

  if (kind == static_cast<std::int64_t>(EditKind::remove_successor)) {
    if (arg < 0 || arg >= N || !g.is_alive(arg)) return EditReason::unknown_node;
    if (!g.has(node, arg)) return EditReason::not_a_successor;
    if (arg == sink) return EditReason::sink;
    const bool had_path = g.reaches(a.source, sink);
    copy_words(s.saved_node, g.row(node));
    copy_words(s.saved_arg, g.row(arg));
    g.clear(node, arg);
    std::int64_t degree = out_degree - 1, n_linked = 0;
    for (std::int64_t y = g.next_bit(s.saved_arg, 0); y >= 0; y = g.next_bit(s.saved_arg, y + 1)) {
      if (degree >= a.max_out) break;
      if (y == arg || g.has(node, y)) continue;
      g.set(node, y);
      s.linked[n_linked++] = static_cast<std::int32_t>(y);
      ++degree;
    }
    const bool deleted = arg != a.source && !g.has_in_edge(arg);
    if (deleted) g.clear_row(arg);
    EditReason r = EditReason::ok;
    if (n_linked > 0 && g.reaches(s.linked, n_linked, node)) {
      r = EditReason::cycle;
    } else if (had_path && !g.reaches(a.source, sink)) {
      r = EditReason::last_path;
    }
    if (r != EditReason::ok) {
      g.copy_row(arg, s.saved_arg);  // node == arg (a self-loop) saved the same row twice
      g.copy_row(node, s.saved_node);
      return r;
    }
    if (deleted) g.set_alive(arg, false);
    return EditReason::ok;
  }

  // connect_to_aggregator
  if (g.has(node, sink)) return EditReason::duplicate_edge;
  if (out_degree >= a.max_out) return EditReason::out_degree;
  g.set(node, sink);
  if (g.reaches(sink, node)) {
    g.clear(node, sink);
    return EditReason::cycle;
  }
  return EditReason::ok;
}

// Returns false (graph left unwritten) when an edge of the input touches a dead node.
bool edit_graph(const DagEditArgs& a, const DagEditOut& o, std::int64_t b, const EditScratch& s) {
  const DagGraphs& in = a.g;
  const BitGraph& g = s.g;
  const std::int64_t N = in.N, E = a.E;
  if (!detail::load_graph(in, b, g)) return false;
  for (std::int64_t e = 0; e < E; ++e) {
    const std::int32_t* row = a.edits + b * a.e_sb + e * a.e_se;
    std::int32_t made = -1;
    const EditReason r = edit_one(s, in, row[0], row[a.e_sc], row[2 * a.e_sc], &made);
    o.reason[b * E + e] = static_cast<std::int8_t>(r);
    o.accepted[b * E + e] = r == EditReason::ok || r == EditReason::no_change;
    o.new_node[b * E + e] = made;
  }
  detail::store_bits(g.alive, N, o.alive + b * N);
  for (std::int64_t u = 0; u < N; ++u) detail::store_bits(g.row(u), N, o.adj + (b * N + u) * N);
  return true;
}

}  // namespace

Status dag_edit(const DagEditArgs& a, const DagEditOut& o) {
  TOPOROUTE_RETURN_IF_ERROR(detail::check_graphs(a.g));
  if (a.E < 0) return Status::error(StatusCode::invalid_argument, "edits", "edits must have E >= 0 rows");
  TOPOROUTE_RETURN_IF_ERROR(detail::check_alive_ends(a.g));
  const std::int64_t B = a.g.B, N = a.g.N;
  const std::int64_t work = B * (N * N + a.E * N * detail::BitGraph::words(N) * 4);
  const bool parallel = work >= detail::kParallelWork;
  const int threads = parallel ? detail::team_size(B) : 1;
  const EditPlan plan(N);
  const detail::TeamScratch scratch(plan.layout.bytes(), threads);
  if (!scratch.ok()) return scratch.failure("dag_edit", "per-thread scratch");
  detail::FirstError inconsistent(B);
  if (!parallel) {
    const EditScratch s = plan.bind(scratch.slot(0));
    for (std::int64_t b = 0; b < B && !inconsistent.any(); ++b) {
      if (!edit_graph(a, o, b, s)) inconsistent.record(b);
    }
  } else {
#pragma omp parallel num_threads(threads)
    {
      const EditScratch s = plan.bind(scratch.slot(detail::thread_index()));
#pragma omp for schedule(dynamic, 16)
      for (std::int64_t b = 0; b < B; ++b) {
        if (!edit_graph(a, o, b, s)) inconsistent.record(b);
      }
    }
  }
  if (inconsistent.any()) return detail::consistency_error(a.g, inconsistent.get());
  return Status::success();
}

}  // namespace toporoute
