#pragma once
// conductor_density's numpy inputs and new outputs, checked and declared once for the CPU and the CUDA host
// entries (conductor.cpp, cuda_stats.cpp).
#include "common.hpp"
#include "toporoute/conductor.hpp"

namespace toporoute::bindings {

/// The core's arguments over nodes, edges, steps and n_max: each a 1-D int64 numpy array (every dtype checked
/// before any layout), then one length n and unit strides (ShapeError naming nodes otherwise).
DensityArgs density_inputs(const py::handle& nodes, const py::handle& edges, const py::handle& steps,
                           const py::handle& n_max);

/// Declares conductor_density's five f64 (n,) outputs in `out`: s_node, s_edge, s_depth, s_complex, reward.
void add_density_outputs(NewOutputs& out, std::int64_t n, DensityOut& o);

}  // namespace toporoute::bindings
