#pragma once
/// \file launch_stats.hpp
/// Host entry points of the CUDA kernels of graph_stats, conductor_density and bandit_select (kernels/stats.cu).
/// Plain C++ like launch.hpp: the bindings include it without the CUDA toolkit. Semantics are the CPU ops' of
/// toporoute/graph_stats.hpp, conductor.hpp and bandit.hpp (the reference backend is the oracle).
#include "launch.hpp"
#include "toporoute/bandit.hpp"
#include "toporoute/conductor.hpp"
#include "toporoute/graph_stats.hpp"
#include "toporoute/status.hpp"

namespace toporoute::cuda {

/// graph_stats() on device memory (strided inputs, C-contiguous outputs), asynchronous on `stream`. Cannot fail
/// on its data (no error sink). jaccard is written only when args.prev is set.
Status launch_graph_stats(const GraphStatsArgs& args, const GraphStatsOut& out, void* stream);
/// launch_graph_stats with `device` made current for the launch.
Status launch_graph_stats_on(int device, const GraphStatsArgs& args, const GraphStatsOut& out, void* stream);
/// Host memory (C-contiguous): copied to `device` in chunks of graphs, outputs copied back. Synchronous.
Status graph_stats_host(const GraphStatsArgs& args, const GraphStatsOut& out, int device);

/// conductor_density() on device memory (C-contiguous arrays of length n), asynchronous on `stream`. Bad input
/// at element x is reported as x * 4 + check (check 0: nodes < 1, 1: edges < 0, 2: steps outside [1, nodes],
/// 3: n_max < 1; the first failing check of the element), so the final word names the CPU's first error.
Status launch_conductor_density(const DensityArgs& args, const DensityOut& out, const ErrorSink& err,
                                void* stream);
Status launch_conductor_density_on(int device, const DensityArgs& args, const DensityOut& out,
                                   const ErrorSink& err, void* stream);
/// Host memory: synchronous; bad input gives the CPU's exact Status (the CPU op names it once a chunk failed).
Status conductor_density_host(const DensityArgs& args, const DensityOut& out, int device);

/// bandit_select() on device memory (strided inputs, C-contiguous outputs), asynchronous on `stream`. theta is
/// drawn with the CPU's Philox counters and Marsaglia-Tsang steps (toporoute/bandit_draw.hpp, shared by both).
/// Bad input is reported as (fault * B + b) * P + where with P = max(N * N, 1): fault in the CPU's order
/// (0 alpha non-finite, 1 alpha <= 0, 2 beta non-finite, 3 beta <= 0, 4 weights non-finite, 5 weights < 0),
/// where = the node n, or s * N + d for weights; the outputs of a graph with bad input are unspecified.
Status launch_bandit_select(const BanditSelectArgs& args, const BanditSelectOut& out, const ErrorSink& err,
                            void* stream);
Status launch_bandit_select_on(int device, const BanditSelectArgs& args, const BanditSelectOut& out,
                               const ErrorSink& err, void* stream);
/// Host memory: synchronous; bad input gives the CPU's exact Status (check_bandit_select over the whole batch).
Status bandit_select_host(const BanditSelectArgs& args, const BanditSelectOut& out, int device);

}  // namespace toporoute::cuda
