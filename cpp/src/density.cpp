// conductor_density(): AgentConductor's normalised topology density and r_g (methods/agentconductor.md §4.2,
// §4.4), elementwise.
#include <cmath>
#include <string>

#include "toporoute/ops.hpp"

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
    const double v = static_cast<double>(V);
    o.s_node[x] = std::exp(-v / static_cast<double>(cap));
    o.s_edge[x] = std::exp(-static_cast<double>(E) / (v * (v - 0.5)));
    o.s_depth[x] = 1.0 - static_cast<double>(s) / v;
    o.s_complex[x] = std::exp(o.s_node[x] + 2.0 * o.s_edge[x] + o.s_depth[x]);
    o.reward[x] = V <= cap ? o.s_complex[x] : std::tanh((static_cast<double>(cap) - v) / static_cast<double>(cap));
  }
  return Status::success();
}

}  // namespace toporoute
