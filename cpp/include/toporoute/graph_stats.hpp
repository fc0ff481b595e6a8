#pragma once
/// \file graph_stats.hpp
/// Per-graph statistics: edges, density, degrees, reciprocity, Jaccard distance to a previous graph
/// (cpp/src/graph_stats.cpp).
/// Semantics are defined by python/toporoute/backends/reference.py; the CPU implementation validates its views,
/// runs OpenMP across the batch, never throws and reports the first problem (lowest episode index) as a Status.
/// Views follow toporoute/views.hpp's conventions.
#include <cstdint>

#include "toporoute/status.hpp"

namespace toporoute {

/// Inputs of graph_stats(): adj and optional prev (B,N,N) u8, optional active (B,N).
struct GraphStatsArgs {
  const std::uint8_t* adj = nullptr;
  const std::uint8_t* prev = nullptr;
  const std::uint8_t* active = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t p_sb = 0, p_sr = 0, p_sc = 0;
  std::int64_t a_sb = 0, a_sn = 0;
};

/// Outputs of graph_stats(), C-contiguous: edges (B) i64, density (B) f64, in/out_degree (B,N) i32,
/// reciprocity (B) f64, jaccard (B) f64 (written only when prev is given).
struct GraphStatsOut {
  std::int64_t* edges = nullptr;
  double* density = nullptr;
  std::int32_t* in_degree = nullptr;
  std::int32_t* out_degree = nullptr;
  double* reciprocity = nullptr;
  double* jaccard = nullptr;
};

/// Edge counts, density, degrees, reciprocity and (with prev) Jaccard distance. O(B N^2). Self-loops ignored.
Status graph_stats(const GraphStatsArgs& args, const GraphStatsOut& out);

}  // namespace toporoute
