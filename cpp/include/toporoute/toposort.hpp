#pragma once
/// \file toposort.hpp
/// Greedy topological order with cycle breaking and concurrent levels, on the CPU (cpp/src/toposort.cpp) and the
/// GPU (kernels/toposort.cu).
/// Semantics are defined by python/toporoute/backends/reference.py; the CPU implementation validates its views,
/// runs OpenMP across the batch, never throws and reports the first problem (lowest episode index) as a Status.
/// Views follow toporoute/views.hpp's conventions.
#include <cstdint>

#include "toporoute/status.hpp"

namespace toporoute {

/// Inputs of toposort(). adj: (B, N, N) u8; weights: (B, N, N) f32 >= 0 or null; active: (B, N) or null.
struct ToposortArgs {
  const std::uint8_t* adj = nullptr;
  const float* weights = nullptr;
  const std::uint8_t* active = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t w_sb = 0, w_sr = 0, w_sc = 0;
  std::int64_t a_sb = 0, a_sn = 0;
};

/// Outputs of toposort(), C-contiguous: order (B,N) i32, level (B,N) i32, removed (B,N,N) u8, is_dag (B) u8.
struct ToposortOut {
  std::int32_t* order = nullptr;
  std::int32_t* level = nullptr;
  std::uint8_t* removed = nullptr;
  std::uint8_t* is_dag = nullptr;
};

/// Greedy topological order with cycle breaking (see reference.toposort). O(B N^2) unweighted with N <= 64
/// (bitsets), O(B N^3) otherwise.
Status toposort(const ToposortArgs& args, const ToposortOut& out);

/// The weight checks of toposort() (CPU and CUDA), in the reference's order: any non-finite weight first
/// (non_finite), then any negative one (out_of_range), each naming its first position in C order. O(B N^2).
Status check_toposort_weights(const ToposortArgs& args);

}  // namespace toporoute
