#pragma once
// graph_stats' new outputs, declared once for the CPU and the CUDA host entries (graph_stats.cpp,
// cuda_stats.cpp).
#include "common.hpp"
#include "toporoute/graph_stats.hpp"

namespace toporoute::bindings {

/// Declares graph_stats' outputs in `out`, their buffers stored in `o`: edges i64 (B,), density f64 (B,),
/// in_degree and out_degree i32 (B,N), reciprocity f64 (B,), then jaccard f64 (B,) when prev is given, else None.
void add_graph_stats_outputs(NewOutputs& out, const GraphStatsArgs& a, bool has_prev, GraphStatsOut& o);

}  // namespace toporoute::bindings
