// conductor_density(): AgentConductor's normalised topology density and r_g (methods/agentconductor.md §4.2,
// §4.4), elementwise.
#include <cmath>
#include <string>

#include "toporoute/conductor.hpp"

namespace toporoute {

Status conductor_density(const DensityArgs& a, const DensityOut& o) {
  for (std::int64_t x = 0; x < a.n; ++x) {
    const std::int64_t V = a.nodes[x], E = a.edges[x], s = a.steps[x], cap = a.n_max[x];
    auto at = [x] { return " at index " + std::to_string(x); };
    if (V < 1) return Status::error(StatusCode::out_of_range, "nodes", "nodes must be >= 1; got " + std::to_string(V) + at());
    if (E < 0) return Status::error(StatusCode::out_of_range, "edges", "edges must be >= 0; got " + std::to_string(E) + at());
    if (s < 1 || s > V) {
      return Status::error(StatusCode::out_of_range, "steps",
                           "steps must be in [1, nodes]; got " + std::to_string(s) + " with nodes=" + std::to_string(V) + at());
    }
    if (cap < 1) return Status::error(StatusCode::out_of_range, "n_max", "n_max must be >= 1; got " + std::to_string(cap) + at());
    // staged as float64 in the outputs, so the loop below reads only doubles
    o.s_node[x] = static_cast<double>(V);
    o.s_edge[x] = static_cast<double>(E);
    o.s_depth[x] = static_cast<double>(s);
    o.reward[x] = static_cast<double>(cap);
  }
  // One branch-free loop over doubles: vectorised where the C library has vector exp and tanh (glibc's
  // libmvec, declared under -ffast-math: within 4 ulps, like the scalar calls), scalar calls elsewhere.
#pragma omp simd
  for (std::int64_t x = 0; x < a.n; ++x) {
    const double v = o.s_node[x], e = o.s_edge[x], st = o.s_depth[x], cap = o.reward[x];
    const double s_node = std::exp(-v / cap);
    const double s_edge = std::exp(-e / (v * (v - 0.5)));
    const double s_depth = 1.0 - st / v;
    const double s_complex = std::exp(s_node + 2.0 * s_edge + s_depth);
    const double over = std::tanh((cap - v) / cap);
    o.s_node[x] = s_node;
    o.s_edge[x] = s_edge;
    o.s_depth[x] = s_depth;
    o.s_complex[x] = s_complex;
    o.reward[x] = v <= cap ? s_complex : over;
  }
  return Status::success();
}

}  // namespace toporoute
