#pragma once
/// \file ops.hpp
/// CPU implementations of the core ops. Semantics are defined by python/toporoute/backends/reference.py;
/// every function here is tested against it. All functions validate their views, run OpenMP across the batch,
/// never throw, and report the first problem (lowest episode index) as a Status.
#include "toporoute/dispatch.hpp"
#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute {

/// Cosine routing, one fused pass per episode: row norms and the N x N dot products in float64 (SIMD kernel
/// of `isa`), score = clamp(dot / (|k_j| |q_i|), -1, 1) rounded to float32 (0 for zero or inactive rows),
/// candidate edge j -> i iff score > tau, j != i, both active and non-zero; each recipient keeps its k_in best
/// providers (ties to the lower index). Cost O(B N^2 D). Non-finite input gives StatusCode::non_finite.
Status route(const RouteArgs& args, const RouteOut& out, Isa isa);

/// Greedy topological order with cycle breaking (see reference.toposort). O(B N^2) unweighted with N <= 64
/// (bitsets), O(B N^3) otherwise.
Status toposort(const ToposortArgs& args, const ToposortOut& out);

/// Edge counts, density, degrees, reciprocity and (with prev) Jaccard distance. O(B N^2). Self-loops ignored.
Status graph_stats(const GraphStatsArgs& args, const GraphStatsOut& out);

/// AgentConductor density terms and r_g, elementwise. O(n).
Status conductor_density(const DensityArgs& args, const DensityOut& out);

}  // namespace toporoute
