#pragma once
// bandit_select's scalar arguments, checked once for the CPU and the CUDA bindings (bandit.cpp, cuda_stats.cpp).
#include <cstdint>

#include "toporoute/bandit.hpp"

namespace toporoute::bindings {

/// Checks k, step, graph_offset (against a.B), mode and a.N with every backend's messages and stores them in `a`
/// (B and N must be set first).
void set_bandit_scalars(BanditSelectArgs& a, std::int64_t k, std::uint64_t seed, std::uint64_t step, int mode,
                        std::uint64_t graph_offset);

}  // namespace toporoute::bindings
