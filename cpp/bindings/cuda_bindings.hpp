#pragma once
// CUDA part of the module (cuda.cpp). Compiled in every build; without TOPOROUTE_WITH_CUDA the functions raise
// BackendUnavailableError and cuda_info() reports compiled=False.
#include <pybind11/pybind11.h>

namespace toporoute::bindings {

void bind_cuda(pybind11::module_& m);
/// mean_pool and route_indexed on the GPU (cuda_pool.cpp).
void bind_cuda_pool(pybind11::module_& m);
/// graph_stats, conductor_density and bandit_select on the GPU (cuda_stats.cpp).
void bind_cuda_stats(pybind11::module_& m);
/// {"compiled": bool, "runtime_version": str | None, "architectures": [int], "device_count": int,
///  "devices": [str]}
pybind11::dict cuda_info();

}  // namespace toporoute::bindings
