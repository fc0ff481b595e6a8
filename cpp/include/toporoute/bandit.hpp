#pragma once
/// \file bandit.hpp
/// HiVA bandit kernels: Thompson selection of each node's top-k successors, the edge weights it is given
/// (knowledge distance and synergy), the nodes' Beta update (Eq. B1, decay toward the prior) and the edges'
/// synergy update (Eq. B2). The semantics, the Philox4x32-10 counter
/// layout and the exact draw sequence are those of python/toporoute/backends/_reference_bandit.py; every
/// float64 step runs in the same order with the C library's log/cos/exp/pow, so results equal the reference's
/// bit for bit. Inputs are strided views (element strides); outputs are new C-contiguous arrays. No exceptions:
/// a Status names the first offending argument.
#include <cstdint>

#include "toporoute/status.hpp"

namespace toporoute {

/// Philox4x32-10 of the counter `ctr` under the key (k0, k1) = (seed mod 2^32, seed >> 32), in place.
/// O(1): ten rounds of two 32x32->64 multiplies.
void philox4x32_10(std::uint32_t ctr[4], std::uint64_t seed) noexcept;

/// Mode of bandit_select: a Beta draw per node, or its mean alpha / (alpha + beta).
enum class BanditMode : int { thompson = 0, mean = 1 };

/// Inputs of bandit_select(): adj (B,N,N) u8, alpha and beta (B,N) f32, optional weights (B,N,N) f32 and
/// active (B,N) u8; strides in elements. graph_offset + B <= 2^32; N < 2^31.
struct BanditSelectArgs {
  const std::uint8_t* adj = nullptr;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  const float* weights = nullptr;
  const std::uint8_t* active = nullptr;
  std::int64_t B = 0, N = 0, k = 1;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t al_sb = 0, al_sn = 0;
  std::int64_t be_sb = 0, be_sn = 0;
  std::int64_t w_sb = 0, w_sr = 0, w_sc = 0;
  std::int64_t a_sb = 0, a_sn = 0;
  std::uint64_t seed = 0;
  std::uint32_t step = 0;
  std::uint32_t graph_offset = 0;
  BanditMode mode = BanditMode::thompson;
};

/// Outputs of bandit_select(), C-contiguous: chosen (B,N,N) u8, choices (B,N,k) i32, theta (B,N) f32.
struct BanditSelectOut {
  std::uint8_t* chosen = nullptr;
  std::int32_t* choices = nullptr;
  float* theta = nullptr;
};

/// theta of every active node (0 for the others), score = theta[d] * weights[s, d] in float32, and each active
/// source's top-k candidates (adj, d != s, both active, weight > 0) by descending score, ties to the lower index.
/// Checks first (all graphs, in this order): alpha, beta finite and > 0 at active nodes; weights finite and >= 0.
/// O(B N (N + draws)); OpenMP over the graphs, each graph's result independent of the thread count.
Status bandit_select(const BanditSelectArgs& args, const BanditSelectOut& out);

/// The first bad input of bandit_select() in its order (success when there is none): the same Status as
/// bandit_select() for the same arguments. Serial, O(B N^2); the CUDA host path calls it once a kernel saw a fault.
Status check_bandit_select(const BanditSelectArgs& args);

/// The scalars of bandit_weights(), in the op's order: the sink, lambda, eta, omega1, omega3, the distance
/// threshold and c0.
struct BanditWeightsScalars {
  std::int64_t sink = 1;
  double lam = 1.0, eta = 1.0, omega1 = 0.25, omega3 = 0.25, threshold = 0.75, c0 = 1.0;
};

/// Inputs of bandit_weights(): adj (B,N,N) u8, alive (B,N) u8, alpha and beta (B,N) f32, c_syn (B,N,N) f32,
/// similarity (B,N,2) f64 (Jaccard, cosine), selected (B,N) u8; strides in elements.
struct BanditWeightsArgs {
  const std::uint8_t* adj = nullptr;
  const std::uint8_t* alive = nullptr;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  const float* c_syn = nullptr;
  const double* similarity = nullptr;
  const std::uint8_t* selected = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t al_sb = 0, al_sn = 0;
  std::int64_t a_sb = 0, a_sn = 0;
  std::int64_t b_sb = 0, b_sn = 0;
  std::int64_t c_s[3] = {};
  std::int64_t s_s[3] = {};
  std::int64_t se_sb = 0, se_sn = 0;
  BanditWeightsScalars scalars;
};

/// Outputs of bandit_weights(), C-contiguous: weights (B,N,N) f32, psi (B,N) f64.
struct BanditWeightsOut {
  float* weights = nullptr;
  double* psi = nullptr;
};

/// HiVA's edge weights, step for step as backends/_reference_bandit.py's bandit_weights: psi of every alive node
/// (omega1 Psi1 + omega3 Psi3), zeta of every live node d (the mean synergy of S + {d} over the largest live
/// synergy, numpy's pairwise sums), w[s, d] = exp(-lam log(2) psi[d]) * max(zeta[d], 0)^eta on the live edges
/// (1 into the sink), then the distance threshold (a source keeps its nearest successor). Checks first (all
/// graphs, in this order): sink in [0, N); alpha, beta finite and > 0 at alive nodes; c_syn finite; similarity
/// finite, Jaccard in [0, 1], cosine in [-1, 1]. O(B N (N + |S|^2)); OpenMP over the graphs.
Status bandit_weights(const BanditWeightsArgs& args, const BanditWeightsOut& out);

/// Inputs of bandit_update(): alpha, beta, reward (B,N) f32, selected (B,N) u8, optional dt and km (B,N) f32.
struct BanditUpdateArgs {
  const float* alpha = nullptr;
  const float* beta = nullptr;
  const std::uint8_t* selected = nullptr;
  const float* reward = nullptr;
  const float* dt = nullptr;
  const float* km = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t al_sb = 0, al_sn = 0, be_sb = 0, be_sn = 0, se_sb = 0, se_sn = 0;
  std::int64_t re_sb = 0, re_sn = 0, dt_sb = 0, dt_sn = 0, km_sb = 0, km_sn = 0;
  double gamma = 0.6, delta = 0.5, prior = 1.0;
};

/// Outputs of bandit_update(), C-contiguous (B,N) f32.
struct BanditUpdateOut {
  float* alpha = nullptr;
  float* beta = nullptr;
};

/// g = gamma^dt; alpha' = prior + g (alpha - prior) + sel (r + delta km); beta' = prior + g (beta - prior) +
/// sel (1 - r + delta (1 - km)) in float64, rounded once (no km: no delta terms). Checks: alpha, beta finite and
/// > 0; reward in [0, 1]; dt finite and >= 0; km in [0, 1]. O(B N).
Status bandit_update(const BanditUpdateArgs& args, const BanditUpdateOut& out);

/// Inputs of synergy_update(): c_syn, edge_alpha, edge_beta, routed (B,N,N) f32 and reward (B,N) f32.
struct SynergyUpdateArgs {
  const float* c_syn = nullptr;
  const float* edge_alpha = nullptr;
  const float* edge_beta = nullptr;
  const float* routed = nullptr;
  const float* reward = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t c_s[3] = {}, ea_s[3] = {}, eb_s[3] = {}, r_s[3] = {};
  std::int64_t re_sb = 0, re_sn = 0;
  double lr = 0.1;
};

/// Outputs of synergy_update(), C-contiguous (B,N,N) f32.
struct SynergyUpdateOut {
  float* c_syn = nullptr;
  float* edge_alpha = nullptr;
  float* edge_beta = nullptr;
};

/// For routed[b, i, j] > 0: ea += r_j, eb += 1 - r_j (each rounded to float32), then c += lr * ea / (ea + eb) *
/// routed; other entries copied. Checks: c_syn finite; edge_alpha, edge_beta, routed finite and >= 0; reward in
/// [0, 1]. O(B N^2).
Status synergy_update(const SynergyUpdateArgs& args, const SynergyUpdateOut& out);

}  // namespace toporoute
