#pragma once
// One graph of the DAG evolution ops as bitset rows (bit v of row u: edge u -> v), the reachability search both
// ops use, the per-thread scratch layout and the input checks they share. Private to dag_edit.cpp and
// dag_repair.cpp; team_schedule.cpp borrows load_bits, store_bits and BitGraph::popcount.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "bits.hpp"
#include "parallel.hpp"
#include "toporoute/dag.hpp"

namespace toporoute::detail {

/// Bitset graph over caller-provided memory: rows (N x W words), alive (W), seen (W) and a stack of N nodes.
class BitGraph {
 public:
  std::int64_t N = 0, W = 0;
  std::uint64_t* rows = nullptr;
  std::uint64_t* alive = nullptr;
  std::uint64_t* seen = nullptr;
  std::int32_t* stack = nullptr;

  static std::int64_t words(std::int64_t n) { return (n + 63) / 64; }

  std::uint64_t* row(std::int64_t u) const { return rows + u * W; }
  bool has(std::int64_t u, std::int64_t v) const { return (rows[u * W + (v >> 6)] >> (v & 63)) & 1u; }
  void set(std::int64_t u, std::int64_t v) const { rows[u * W + (v >> 6)] |= std::uint64_t{1} << (v & 63); }
  void clear(std::int64_t u, std::int64_t v) const { rows[u * W + (v >> 6)] &= ~(std::uint64_t{1} << (v & 63)); }
  bool is_alive(std::int64_t n) const { return (alive[n >> 6] >> (n & 63)) & 1u; }
  void set_alive(std::int64_t n, bool on) const {
    if (on) {
      alive[n >> 6] |= std::uint64_t{1} << (n & 63);
    } else {
      alive[n >> 6] &= ~(std::uint64_t{1} << (n & 63));
    }
  }
  void clear_row(std::int64_t u) const { std::memset(row(u), 0, static_cast<std::size_t>(W) * 8); }
  void copy_row(std::int64_t to, const std::uint64_t* from) const {
    std::memcpy(row(to), from, static_cast<std::size_t>(W) * 8);
  }

  std::int64_t degree(std::int64_t u) const {
    std::int64_t d = 0;
    for (std::int64_t w = 0; w < W; ++w) d += popcount(rows[u * W + w]);
    return d;
  }
  static std::int64_t popcount(std::uint64_t x) { return popcount64(x); }
  bool has_in_edge(std::int64_t v) const {
    for (std::int64_t u = 0; u < N; ++u) {
      if (has(u, v)) return true;
    }
    return false;
  }
  /// Lowest set bit of `bits` (W words) at index >= from, or -1.
  std::int64_t next_bit(const std::uint64_t* bits, std::int64_t from) const {
    if (from >= N) return -1;
    std::int64_t w = from >> 6;
    std::uint64_t x = bits[w] & (~std::uint64_t{0} << (from & 63));
    while (true) {
      if (x != 0) {
        const std::int64_t i = (w << 6) + __builtin_ctzll(x);
        return i < N ? i : -1;
      }
      if (++w >= W) return -1;
      x = bits[w];
    }
  }
  /// Lowest dead slot, or -1.
  std::int64_t lowest_dead() const {
    for (std::int64_t w = 0; w < W; ++w) {
      const std::uint64_t x = ~alive[w];
      if (x != 0) {
        const std::int64_t i = (w << 6) + __builtin_ctzll(x);
        return i < N ? i : -1;
      }
    }
    return -1;
  }

  /// True when a node of starts[0 .. count) reaches `target` (a start equal to target counts). O(N W).
  bool reaches(const std::int32_t* starts, std::int64_t count, std::int64_t target) const {
    std::memset(seen, 0, static_cast<std::size_t>(W) * 8);
    std::int64_t top = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int32_t s = starts[i];
      if (!((seen[s >> 6] >> (s & 63)) & 1u)) {
        seen[s >> 6] |= std::uint64_t{1} << (s & 63);
        stack[top++] = s;
      }
    }
    while (top > 0) {
      const std::int64_t u = stack[--top];
      if (u == target) return true;
      const std::uint64_t* r = row(u);
      for (std::int64_t w = 0; w < W; ++w) {
        std::uint64_t fresh = r[w] & ~seen[w];
        seen[w] |= fresh;
        for (; fresh != 0; fresh &= fresh - 1) {
          stack[top++] = static_cast<std::int32_t>((w << 6) + __builtin_ctzll(fresh));
        }
      }
    }
    return false;
  }
  bool reaches(std::int64_t from, std::int64_t target) const {
    const std::int32_t s = static_cast<std::int32_t>(from);
    return reaches(&s, 1, target);
  }
};

/// Reserves a BitGraph's memory in a scratch layout; bind() points a BitGraph at one slot.
struct BitGraphPlan {
  std::uint64_t rows = 0, alive = 0, seen = 0, stack = 0;
  std::int64_t N = 0, W = 0;
  BitGraphPlan(ScratchLayout& l, std::int64_t n) : N(n), W(BitGraph::words(n)) {
    rows = l.take(N * W, 8);
    alive = l.take(W, 8);
    seen = l.take(W, 8);
    stack = l.take(N, 4);
  }
  BitGraph bind(unsigned char* base) const {
    BitGraph g;
    g.N = N;
    g.W = W;
    g.rows = reinterpret_cast<std::uint64_t*>(base + rows);
    g.alive = reinterpret_cast<std::uint64_t*>(base + alive);
    g.seen = reinterpret_cast<std::uint64_t*>(base + seen);
    g.stack = reinterpret_cast<std::int32_t*>(base + stack);
    return g;
  }
};

inline bool input_alive(const DagGraphs& a, std::int64_t b, std::int64_t n) {
  return a.alive[b * a.a_sb + n * a.a_sn] != 0;
}
inline bool input_edge(const DagGraphs& a, std::int64_t b, std::int64_t u, std::int64_t v) {
  return a.adj[b * a.adj_sb + u * a.adj_sr + v * a.adj_sc] != 0;
}

/// Loads graph b into g: the alive bits and the input rows as given. Returns false when an edge touches a
/// dead node (the caller reports it with consistency_error).
inline bool load_graph(const DagGraphs& a, std::int64_t b, const BitGraph& g) {
  load_bits(a.alive + b * a.a_sb, a.a_sn, a.N, g.alive);
  bool consistent = true;
  for (std::int64_t u = 0; u < a.N; ++u) {
    std::uint64_t* r = g.row(u);
    load_bits(a.adj + b * a.adj_sb + u * a.adj_sr, a.adj_sc, a.N, r);
    std::uint64_t stray = 0;
    const std::uint64_t keep = g.is_alive(u) ? ~std::uint64_t{0} : 0;
    for (std::int64_t w = 0; w < g.W; ++w) stray |= r[w] & ~(g.alive[w] & keep);
    consistent &= stray == 0;
  }
  return consistent;
}

/// The invalid_argument Status for graph b's first edge (C order) touching a dead node.
inline Status consistency_error(const DagGraphs& a, std::int64_t b) {
  for (std::int64_t u = 0; u < a.N; ++u) {
    const bool u_alive = input_alive(a, b, u);
    for (std::int64_t v = 0; v < a.N; ++v) {
      if (!input_edge(a, b, u, v) || (u_alive && input_alive(a, b, v))) continue;
      const std::int64_t dead = u_alive ? v : u;
      return Status::error(StatusCode::invalid_argument, "adj",
                           "adj must have no edge touching a dead node; got adj[" + std::to_string(b) + ", " +
                               std::to_string(u) + ", " + std::to_string(v) + "] with alive[" + std::to_string(b) +
                               ", " + std::to_string(dead) + "] False");
    }
  }
  return Status::error(StatusCode::runtime, "", "dag: consistency_error called on a consistent graph");
}

/// Scalars and dimensions (the facade checks them too; the core never trusts its caller).
inline Status check_graphs(const DagGraphs& a) {
  if (a.B < 0 || a.N < 2) {
    return Status::error(StatusCode::invalid_argument, "adj",
                         "adj must hold at least 2 nodes (a source and a sink); got N = " + std::to_string(a.N));
  }
  if (a.N > (std::int64_t{1} << 30)) {
    return Status::error(StatusCode::invalid_argument, "adj", "adj must have N < 2^30 nodes");
  }
  if (a.source < 0 || a.source >= a.N) {
    return Status::error(StatusCode::out_of_range, "source",
                         "source must be in [0, " + std::to_string(a.N - 1) + "]; got " + std::to_string(a.source));
  }
  if (a.sink < 0 || a.sink >= a.N) {
    return Status::error(StatusCode::out_of_range, "sink",
                         "sink must be in [0, " + std::to_string(a.N - 1) + "]; got " + std::to_string(a.sink));
  }
  if (a.source == a.sink) {
    return Status::error(StatusCode::invalid_argument, "sink",
                         "source and sink must differ; got both " + std::to_string(a.sink));
  }
  if (a.max_out < 1) {
    return Status::error(StatusCode::out_of_range, "max_out", "max_out must be >= 1; got " + std::to_string(a.max_out));
  }
  return Status::success();
}

/// The source and the sink alive in every graph (reference.check_alive_ends: first graph, source first).
inline Status check_alive_ends(const DagGraphs& a) {
  for (std::int64_t b = 0; b < a.B; ++b) {
    for (const auto& [node, name] : {std::pair<std::int64_t, const char*>{a.source, "source"}, {a.sink, "sink"}}) {
      if (!input_alive(a, b, node)) {
        return Status::error(StatusCode::invalid_argument, "alive",
                             "alive[" + std::to_string(b) + ", " + std::to_string(node) + "] (the " + name +
                                 ") must be True; got False");
      }
    }
  }
  return Status::success();
}

}  // namespace toporoute::detail
