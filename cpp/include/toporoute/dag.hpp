#pragma once
/// \file dag.hpp
/// HiVA DAG evolution ops on batches of graphs (methods/hiva.md §3.3): topology edits checked one at a time
/// (f_G) and RepairTopology. Semantics are defined by python/toporoute/backends/_reference_dag.py; outputs equal
/// the reference exactly. Graphs: adj[b, src, dst] (u8, any strides), alive[b, n] marks the nodes that exist.
/// Each graph is held as N rows of ceil(N / 64) 64-bit words, so one reachability search costs O(N * ceil(N/64))
/// word operations (O(V + E) on the dense layout). OpenMP across the batch; no exception crosses a thread.
#include <cstdint>

#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute {

/// Edit kinds, column 0 of an edit row (kind, node, arg). Mirror of python/toporoute/ops/dag_codes.py (EDIT_*).
enum class EditKind : std::int32_t {
  padding = -1,
  no_change = 0,
  add_parallel = 1,
  add_serial = 2,
  remove_successor = 3,
  connect_to_aggregator = 4,
};

/// Outcome of one edit. Mirror of python/toporoute/ops/dag_codes.py (REASON_*, EDIT_REASONS).
enum class EditReason : std::int8_t {
  ok = 0,
  no_change = 1,
  padding = 2,
  unknown_node = 3,
  bad_kind = 4,
  not_a_successor = 5,
  sink = 6,
  out_degree = 7,
  cycle = 8,
  last_path = 9,
  duplicate_edge = 10,
  no_capacity = 11,
};

/// The batch of graphs both ops read, with the ends every path runs between.
struct DagGraphs : GraphBatch {
  std::int64_t source = 0, sink = 1;  ///< distinct, in [0, N)
  std::int64_t max_out = 5;           ///< >= 1
};

/// Inputs of dag_edit(): the graphs and edits (B, E, 3) i32 (strides in elements).
struct DagEditArgs {
  DagGraphs g;
  const std::int32_t* edits = nullptr;
  std::int64_t E = 0;
  std::int64_t e_sb = 0, e_se = 0, e_sc = 0;
};

/// Outputs of dag_edit(), C-contiguous: adj (B,N,N) u8, alive (B,N) u8, accepted (B,E) u8, reason (B,E) i8,
/// new_node (B,E) i32.
struct DagEditOut {
  std::uint8_t* adj = nullptr;
  std::uint8_t* alive = nullptr;
  std::uint8_t* accepted = nullptr;
  std::int8_t* reason = nullptr;
  std::int32_t* new_node = nullptr;
};

/// Inputs of dag_repair(): the graphs and optional per-edge Betas (B, N, N) f32 (both or neither).
struct DagRepairArgs {
  DagGraphs g;
  const float* edge_alpha = nullptr;
  const float* edge_beta = nullptr;
  std::int64_t ea_sb = 0, ea_sr = 0, ea_sc = 0;
  std::int64_t eb_sb = 0, eb_sr = 0, eb_sc = 0;
  double threshold = 0.3;  ///< in [0, 1]
  double min_obs = 3.0;    ///< >= 0
  double prior = 1.0;      ///< >= 0
};

/// Outputs of dag_repair(), C-contiguous: adj (B,N,N) u8, alive (B,N) u8, pruned_nodes (B,N) u8,
/// pruned_edges (B,N,N) u8, added_edges (B,N,N) u8.
struct DagRepairOut {
  std::uint8_t* adj = nullptr;
  std::uint8_t* alive = nullptr;
  std::uint8_t* pruned_nodes = nullptr;
  std::uint8_t* pruned_edges = nullptr;
  std::uint8_t* added_edges = nullptr;
};

/// Applies each graph's edits in order, each checked at once (reference.dag_edit): a rejected edit leaves the
/// graph unchanged and gets its reason. Requires the source and the sink alive and no edge touching a dead node
/// (else invalid_argument on "alive" / "adj", the first bad graph reported). Cost per edit: O(N W) with
/// W = ceil(N / 64) (at most two reachability searches plus row copies); O(N^2) per graph to load and store.
Status dag_edit(const DagEditArgs& args, const DagEditOut& out);

/// RepairTopology (reference.dag_repair): consistency, DFS back-edge breaking, source -> sink, out-degree cap,
/// Beta-threshold pruning (never the last source -> sink path) and degree-zero pruning to a fixpoint. Requires
/// the source and the sink alive; Betas finite and > 0 (non_finite / out_of_range naming edge_alpha or
/// edge_beta). Cost per graph: O(N^2) to load, plus O(N W) per reachability search, one per edge the cap or the
/// threshold considers.
Status dag_repair(const DagRepairArgs& args, const DagRepairOut& out);

}  // namespace toporoute
