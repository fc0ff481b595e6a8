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
/// With args.q_rows / k_rows (indexed routing) each episode's rows are first gathered from the table into
/// per-thread scratch (zero rows for -1) and go through the same kernel, so the result equals route() over
/// the gathered (B, N, D) arrays bit for bit, with agents whose q_rows or k_rows is -1 inactive. Indices are
/// checked (check_route) before any row is read; a non-finite referenced row is reported on "table".
Status route(const RouteArgs& args, const RouteOut& out, Isa isa);

/// Everything route() checks before reading any float: dimensions, tau in [-1, 1], k_in >= 0, the inbox width
/// and, when indexed, every q_rows then k_rows entry -1 or in [0, M) (the first bad entry in C order is
/// reported as out_of_range). O(B N) when indexed, else O(1).
Status check_route(const RouteArgs& args);

/// Masked mean pooling + L2 normalisation of `count` inputs into one table (sentence-transformers semantics):
/// output row rows[i] of input b = v / max(|v|_2, 1e-12) with v = (sum of hidden[i, l] over tokens with
/// mask != 0) / max(tokens, 1e-9), all in float64, rounded to float32 once (a row without tokens is zero).
/// Every row index (in [0, M), distinct across all inputs) and every counted token (finite) is checked before
/// anything is written unless out.fresh, so a failed call leaves the table as it was. OpenMP over rows;
/// cost O(sum n L D), plus an (sum n) x D float32 staging buffer when not out.fresh.
Status mean_pool(const PoolArgs* inputs, std::int64_t count, const PoolOut& out);

/// Greedy topological order with cycle breaking (see reference.toposort). O(B N^2) unweighted with N <= 64
/// (bitsets), O(B N^3) otherwise.
Status toposort(const ToposortArgs& args, const ToposortOut& out);

/// Edge counts, density, degrees, reciprocity and (with prev) Jaccard distance. O(B N^2). Self-loops ignored.
Status graph_stats(const GraphStatsArgs& args, const GraphStatsOut& out);

/// AgentConductor density terms and r_g, elementwise. O(n).
Status conductor_density(const DensityArgs& args, const DensityOut& out);

}  // namespace toporoute
