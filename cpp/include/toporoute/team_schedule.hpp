#pragma once
/// \file team_schedule.hpp
/// Team graph ops on batches of directed graphs with cycles (methods/tacomas.md §4 Eq 2/12, §8 A2 and A10):
/// execution waves over strongly connected components, statistics of judged contributions, and the topology
/// distance between two graphs. Semantics are defined by python/toporoute/backends/_reference_schedule.py.
/// Graphs: adj[b, src, dst] (u8, any strides), alive[b, n]; N <= 64, so a graph is N rows of one 64-bit word.
/// OpenMP across the batch; no exception crosses a thread: every fault is a returned Status.
#include <cstdint>

#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute {

/// Node capacity of the team ops (these and team_project): one 64-bit word per adjacency row. Mirror of
/// types.team_codes.TEAM_MAX_NODES and ops.team_schedule.MAX_NODES.
constexpr std::int64_t kTeamMaxNodes = 64;

/// A batch of graphs with N <= kTeamMaxNodes.
using TeamGraphs = GraphBatch;

/// Outputs of team_schedule(), C-contiguous: component (B,N) i32, level (B,N) i32, n_levels (B) i32,
/// lagged (B,N,N) u8, cyclic (B) u8, order (B,N) i32.
struct TeamScheduleOut {
  std::int32_t* component = nullptr;
  std::int32_t* level = nullptr;
  std::int32_t* n_levels = nullptr;
  std::uint8_t* lagged = nullptr;
  std::uint8_t* cyclic = nullptr;
  std::int32_t* order = nullptr;
};

/// Execution waves (reference.team_schedule): strongly connected components of the alive nodes (self-loops
/// ignored) numbered in a topological order of the condensation (among ready components the one holding the
/// lowest node index first), each component's level = 1 + the highest level of its predecessor components (0
/// without), the edges inside a component marked lagged, and the alive nodes ordered by (level, component,
/// index). Exactly equal to the reference. Requires no edge touching a dead node (invalid_argument on "adj", the
/// first such edge of the first bad graph in C order). Cost per graph: O(N^2 / 8) to load, O(N^2) word
/// operations for the reachability closure (bit-parallel Warshall), O(N^2) for the condensation order.
Status team_schedule(const TeamGraphs& graphs, const TeamScheduleOut& out);

/// Inputs of team_scores(): history (B, T, N) f32 and present (B, T, N) u8 (strides in elements).
struct TeamScoresArgs {
  const float* history = nullptr;
  const std::uint8_t* present = nullptr;
  std::int64_t B = 0, T = 0, N = 0;  ///< T >= 1
  std::int64_t h_sb = 0, h_st = 0, h_sn = 0;
  std::int64_t p_sb = 0, p_st = 0, p_sn = 0;
  double eta = 1.0;              ///< > 0, finite
  std::int64_t window = 3;       ///< >= 2
  double death_threshold = 0.2;  ///< in [0, 1]
};

/// Outputs of team_scores(), C-contiguous: mean (B,T) f32, var (B,T) f32, pi (B,N) f32, trend (B,N) f32,
/// mean_trend (B) f32, last (B,N) f32, death (B,N) u8, delta_mean (B) f32.
struct TeamScoresOut {
  float* mean = nullptr;
  float* var = nullptr;
  float* pi = nullptr;
  float* trend = nullptr;
  float* mean_trend = nullptr;
  float* last = nullptr;
  std::uint8_t* death = nullptr;
  float* delta_mean = nullptr;
};

/// Score statistics (reference.team_scores): per-round mean and population variance of the present scores,
/// replicator weights pi (softmax over the last round's present nodes of eta * the summed excess over the round
/// means), least-squares trends over the last `window` present rounds, last scores, death flags and the change
/// of the mean. float64 throughout with the reference's summation order (ascending node index within a round,
/// ascending round across rounds), rounded to float32 once: every output equals the reference exactly except
/// pi, within 1 float32 ulp (libm's exp against numpy's). Requires present scores finite and in [0, 1]
/// (non_finite / out_of_range on "history", the first in C order). Cost per graph: O(T N).
Status team_scores(const TeamScoresArgs& args, const TeamScoresOut& out);

/// Inputs of topology_distance(): two batches of graphs on the same (B, N) and optional generations (B, N) i32.
struct TopologyDistanceArgs {
  TeamGraphs a, b;
  const std::int32_t* gen_a = nullptr;  ///< null = zeros
  const std::int32_t* gen_b = nullptr;  ///< null = zeros
  std::int64_t ga_sb = 0, ga_sn = 0, gb_sb = 0, gb_sn = 0;
};

/// |V xor V'| + |E xor E'| per graph (reference.topology_distance) into out (B) i32: a node is (slot,
/// generation); a slot alive in one graph counts 1, alive in both with different generations 2; an edge counts
/// 1 when present in one graph only, 2 when present in both with an endpoint's identity changed. Requires no
/// edge touching a dead node (invalid_argument on "adj_a", then "adj_b"). Cost per graph: O(N^2 / 8 + N).
Status topology_distance(const TopologyDistanceArgs& args, std::int32_t* out);

}  // namespace toporoute
