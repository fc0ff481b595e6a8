#pragma once
// mean_pool's numpy views and out argument, read and checked once for the CPU and the CUDA host entries (pool.cpp,
// cuda_pool.cpp).
#include <cstdint>

#include "common.hpp"

namespace toporoute::bindings {

/// Sets a pooling input's core view (PoolArgs, or the CUDA kernels' PoolInput: the same fields) from checked numpy
/// views: hidden (n, L, D) float32, mask (n, L), rows (n,) or absent.
template <class In>
void set_pool_views(In& a, const HostView& hidden, const IntHostView& mask, const IntHostView& rows) {
  a.hidden = static_cast<const float*>(hidden.data);
  a.n = hidden.shape[0];
  a.L = hidden.shape[1];
  a.D = hidden.shape[2];
  a.h_sn = hidden.strides[0];
  a.h_sl = hidden.strides[1];
  a.mask = mask.view();
  a.rows = rows.view();
}

/// Where mean_pool writes: `array` is what the call returns (the caller's out, or a new array).
struct PoolDestination {
  py::object array;
  float* data = nullptr;
  std::int64_t M = 0;
  bool fresh = false;  ///< a new (n, D) array of this call
};

/// `out` None: a new C-contiguous (n, D) float32 array, allocated for `op` (InvalidArgumentError when rows are
/// given, as they name rows of an existing array). Otherwise a writeable C-contiguous (M, D) float32 numpy array,
/// with M >= n when rows are not given (row i goes to out[i]).
PoolDestination mean_pool_destination(const py::handle& out, std::int64_t n, std::int64_t D, bool has_rows,
                                      const char* op);

}  // namespace toporoute::bindings
