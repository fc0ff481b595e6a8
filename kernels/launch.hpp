#pragma once
/// \file launch.hpp
/// Host entry points of the CUDA kernels. This header is plain C++ (no CUDA types) so the pybind11 layer can
/// include it without the CUDA toolkit; streams are passed as opaque pointers (cudaStream_t).
/// Semantics are identical to the CPU ops in toporoute/ops.hpp (the reference backend is the oracle).
#include <cstdint>
#include <string>
#include <vector>

#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute::cuda {

/// Number of visible CUDA devices; 0 when the driver or a device is missing (never an error).
int device_count() noexcept;
/// CUDA runtime version the module was built with, e.g. "13.0".
std::string runtime_version();
/// SM architectures compiled into the module, e.g. {80, 90}.
std::vector<int> compiled_architectures();

/// route() on device memory. All pointers in args/out are device pointers (outputs C-contiguous).
/// `err` is a device uint64 initialised by the caller to UINT64_MAX; the kernel atomically lowers it to
/// (b * 2 + which) * N + n for the first non-finite row (which: 0 = q, 1 = k). Asynchronous on `stream`.
Status launch_route(const RouteArgs& args, const RouteOut& out, unsigned long long* err, void* stream);

/// toposort() on device memory, asynchronous on `stream`.
Status launch_toposort(const ToposortArgs& args, const ToposortOut& out, void* stream);

/// Names of the visible devices, e.g. "NVIDIA H100 80GB HBM3 (sm_90)"; empty when none (never an error).
std::vector<std::string> device_names();

/// launch_route / launch_toposort with `device` made current for the launch and the caller's current device
/// restored afterwards (the arrays of a DLPack call live on `device`, the calling thread may have another).
Status launch_route_on(int device, const RouteArgs& args, const RouteOut& out, unsigned long long* err,
                       void* stream);
Status launch_toposort_on(int device, const ToposortArgs& args, const ToposortOut& out, void* stream);

/// Convenience paths for host (numpy) memory: copy inputs to `device`, launch, copy outputs back, free.
/// Inputs must be C-contiguous here. Synchronous. Non-finite input gives StatusCode::non_finite.
Status route_host(const RouteArgs& args, const RouteOut& out, int device);
Status toposort_host(const ToposortArgs& args, const ToposortOut& out, int device);

}  // namespace toporoute::cuda
