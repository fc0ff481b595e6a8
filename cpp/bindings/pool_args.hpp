#pragma once
// mean_pool's out argument, checked once for the CPU and the CUDA host entries (pool.cpp, cuda_pool.cpp).
#include <cstdint>

#include "common.hpp"

namespace toporoute::bindings {

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
