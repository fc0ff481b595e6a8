#pragma once
/// \file team_project.hpp
/// The team edit projection on batches of graphs (methods/tacomas.md §3 "Validation/apply", §8 A4-A6): a
/// meta-LLM's proposed births, deaths and edge edits checked against budgets and rules, the accepted ones applied,
/// the graph repaired so that every alive node reaches the sink. Semantics are defined by
/// python/toporoute/backends/_reference_team.py; outputs equal the reference exactly. Graphs: adj[b, src, dst]
/// (u8, any strides), alive[b, n] marks the nodes that exist; cycles are allowed. N <= 64: each graph is held as
/// N 64-bit rows (bit v of row u: edge u -> v). The batch runs in parallel over the OpenMP pool; no exception
/// crosses a thread.
#include <cstdint>

#include "toporoute/status.hpp"
#include "toporoute/team_schedule.hpp"  // kTeamMaxNodes: the team ops' node capacity
#include "toporoute/views.hpp"

namespace toporoute {

/// Operation kinds, column 0 of an edit row (kind, a, b, role). Mirror of python/toporoute/ops/team_codes.py
/// (TEAM_*).
enum class TeamKind : std::int32_t {
  padding = -1,
  replace = 0,
  birth = 1,
  death = 2,
  edge_add = 3,
  edge_remove = 4,
};

/// Outcome of one row. Mirror of python/toporoute/ops/team_codes.py (REASON_*, TEAM_REASONS).
enum class TeamReason : std::int8_t {
  ok = 0,
  padding = 1,
  bad_kind = 2,
  unknown_node = 3,
  placeholder = 4,
  self_loop = 5,
  duplicate = 6,
  conflict = 7,
  edge_exists = 8,
  edge_missing = 9,
  dead_node = 10,
  sink = 11,
  protected_node = 12,  ///< "protected" in TEAM_REASONS (a C++ keyword)
  critical_role = 13,
  min_nodes = 14,
  max_nodes = 15,
  no_capacity = 16,
  budget_nodes = 17,
  budget_pure = 18,
  budget_edges = 19,
  bad_role = 20,
};

/// Parent of a pure birth meaning "the best scorer among the surviving nodes other than the sink". Mirror of
/// team_codes.TEAM_BEST_SCORER; a reference r <= -2 names the child of row -2 - r (edge rows only).
constexpr std::int32_t kTeamBestScorer = -1;

/// Inputs of team_project(); strides in elements. Optional arrays are nullptr when absent (protected: none,
/// critical: no critical role, scores: zeros, generation: zeros).
struct TeamProjectArgs : GraphBatch {
  const std::int32_t* roles = nullptr;  ///< (B, N), >= 0 where alive
  const std::int32_t* sink = nullptr;   ///< (B,), in [0, N) and alive
  const std::int32_t* edits = nullptr;  ///< (B, P, 4) rows (kind, a, b, role)
  const std::uint8_t* protected_ = nullptr;  ///< (B, N) or nullptr
  const std::uint8_t* critical = nullptr;    ///< (B, R) or nullptr
  const float* scores = nullptr;             ///< (B, N) or nullptr; finite where alive
  const std::int32_t* generation = nullptr;  ///< (B, N) or nullptr; in [0, 2^31 - 2]
  std::int64_t P = 0, R = 0;
  std::int64_t ro_sb = 0, ro_sn = 0;
  std::int64_t si_sb = 0;
  std::int64_t e_sb = 0, e_sp = 0, e_sc = 0;
  std::int64_t pr_sb = 0, pr_sn = 0;
  std::int64_t cr_sb = 0, cr_sr = 0;
  std::int64_t sc_sb = 0, sc_sn = 0;
  std::int64_t ge_sb = 0, ge_sn = 0;
  std::int64_t budget_pairs = 2;     ///< >= 0: births and deaths per step (a REPLACE is one of each)
  std::int64_t budget_edges = 4;     ///< >= 0: accepted removals + adds per step
  std::int64_t max_removals = 2;     ///< >= 0
  std::int64_t max_pure_births = 1;  ///< >= 0
  std::int64_t max_pure_deaths = 1;  ///< >= 0
  std::int64_t n_min = 2;            ///< 0 <= n_min <= n_max
  std::int64_t n_max = 20;
};

/// Outputs of team_project(), C-contiguous: adj (B,N,N) u8, alive (B,N) u8, roles (B,N) i32, generation (B,N)
/// i32, accepted (B,P) u8, reason (B,P) i8, new_node (B,P) i32, inherited (B,N,N) u8, repaired (B,N,N) u8.
struct TeamProjectOut {
  std::uint8_t* adj = nullptr;
  std::uint8_t* alive = nullptr;
  std::int32_t* roles = nullptr;
  std::int32_t* generation = nullptr;
  std::uint8_t* accepted = nullptr;
  std::int8_t* reason = nullptr;
  std::int32_t* new_node = nullptr;
  std::uint8_t* inherited = nullptr;
  std::uint8_t* repaired = nullptr;
};

/// Validates and applies each graph's rows in phases (reference.team_project: screening, deaths, births,
/// removals, adds, repair); a rejected row changes nothing and consumes no budget. Input problems (a dead or
/// out-of-range sink, a self-loop, an edge touching a dead node, a negative role or non-finite score of an alive
/// node, a generation out of range) return invalid_argument / out_of_range / non_finite naming the argument, the
/// first bad graph reported as the reference does. Cost per graph: O(N^2 / 8) to load and store, O(P + N) per
/// phase over the rows (one bitset word per node), O(N^2) for the repair's reachability at worst.
Status team_project(const TeamProjectArgs& args, const TeamProjectOut& out);

}  // namespace toporoute
