#pragma once
// bandit_select's arguments and new outputs, checked and declared once for the CPU and the CUDA bindings
// (bandit.cpp, cuda_stats.cpp).
#include <cstdint>

#include "common.hpp"
#include "toporoute/bandit.hpp"

namespace toporoute::bindings {

/// Checked numpy inputs of bandit_select: adj (B, N, N) bool, alpha and beta (B, N) float32, optional weights
/// (B, N, N) float32 and active (B, N) bool (read in that order), and the core's arguments over them (B and N
/// set; the scalars are set_bandit_scalars').
struct BanditSelectInputs {
  FastView<3> adj;
  FastView<2> alpha, beta;
  FastView<3> weights;
  FastView<2> active;
  BanditSelectArgs args;
};
BanditSelectInputs bandit_select_inputs(const py::handle& adj, const py::handle& alpha, const py::handle& beta,
                                        const py::handle& weights, const py::handle& active);

/// Checks k, step, graph_offset (against a.B), mode and a.N with every backend's messages and stores them in `a`
/// (B and N must be set first).
void set_bandit_scalars(BanditSelectArgs& a, std::int64_t k, std::uint64_t seed, std::uint64_t step, int mode,
                        std::uint64_t graph_offset);

/// Declares bandit_select's outputs in `out`, their buffers stored in `o`: chosen bool (B,N,N), choices i32
/// (B,N,k), theta f32 (B,N) (a's scalars set first).
void add_bandit_select_outputs(NewOutputs& out, const BanditSelectArgs& a, BanditSelectOut& o);

}  // namespace toporoute::bindings
