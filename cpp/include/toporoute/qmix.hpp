#pragma once
/// \file qmix.hpp
/// The Agent Q-Mix networks on the CPU (semantics: python/toporoute/backends/reference.py qmix_forward and
/// qmix_mix; tensor names and shapes: python/toporoute/qmix_params.py). Weights are packed once into a
/// QMixWeights (immutable, shareable across threads); every call then runs float32 kernels of the requested
/// ISA, OpenMP across episodes when the batch pays for it, and never allocates except to grow a per-thread
/// scratch buffer the first time a larger tile is seen.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "toporoute/dispatch.hpp"
#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute {

/// Whose messages node i averages: in-neighbours (adj[j, i]), out_rows (adj[i, j]) or both (sym).
enum class QMixAdjMode : int { in = 0, out_rows = 1, sym = 2 };

/// Parses "in" | "out_rows" | "sym".
bool parse_qmix_adj_mode(const std::string& name, QMixAdjMode* out) noexcept;

/// Network shapes (python QMixConfig). state_dim must already be resolved (> 0).
struct QMixConfig {
  std::int64_t obs_dim = 51, hidden = 128, n_actions = 6, head_hidden = 64, gnn_layers = 2;
  QMixAdjMode adj_mode = QMixAdjMode::in;
  bool self_loops = true;
  std::int64_t n_agents = 3, state_dim = 156, mix_hidden = 64, hyper_hidden = 64;
  bool b1_hidden = false;
  float ln_eps = 1e-5f;
};

/// Checks every dimension (>= 1, gnn_layers >= 0, state_dim >= 1, ln_eps > 0).
Status check_qmix_config(const QMixConfig& c);

/// One raw weight tensor: name (state_dict key) and shape ((out, in) for Linear weights).
struct QMixTensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
};
/// The agent network's tensors in python agent_keys() order.
std::vector<QMixTensorSpec> qmix_agent_specs(const QMixConfig& c);
/// The mixer's tensors in python mixer_keys() order.
std::vector<QMixTensorSpec> qmix_mixer_specs(const QMixConfig& c);

/// Inputs of qmix_forward(): obs (B, N, obs_dim) f32, adj (B, N, N) u8, hidden (B, N, H) f32 or null (zeros),
/// active (B, N) u8 or null (all active). Any element strides (e.g. negative or zero); rows are copied into
/// per-thread scratch, so nothing needs to be contiguous.
struct QMixForwardArgs {
  const float* obs = nullptr;
  const std::uint8_t* adj = nullptr;
  const float* hidden = nullptr;
  const std::uint8_t* active = nullptr;
  std::int64_t B = 0, N = 0;
  std::int64_t obs_sb = 0, obs_sn = 0, obs_sd = 1;
  std::int64_t adj_sb = 0, adj_sr = 0, adj_sc = 0;
  std::int64_t hid_sb = 0, hid_sn = 0, hid_sd = 1;
  std::int64_t act_sb = 0, act_sn = 0;
};

/// Outputs of qmix_forward(), C-contiguous: q (B, N, n_actions) f32 and hidden (B, N, H) f32, both 0 for
/// inactive agents.
struct QMixForwardOut {
  float* q = nullptr;
  float* hidden = nullptr;
};

/// Inputs of qmix_mix(): q_taken (B, n_agents) f32 and state (B, state_dim) f32, any element strides.
struct QMixMixArgs {
  const float* q_taken = nullptr;
  const float* state = nullptr;
  std::int64_t B = 0;
  std::int64_t q_sb = 0, q_sa = 1;
  std::int64_t s_sb = 0, s_sd = 1;
};

/// Weights repacked for the CPU kernels: every Linear as column panels of 16 outputs (K x 16 floats each,
/// zero-padded), each GRUCell as panels of its r, z, n gates side by side with the r and z biases summed, the
/// mixer's four first hypernetwork layers fused into one. One 64-byte aligned allocation; the layout is the
/// same for every ISA, so one object serves any kernel. Immutable after create().
class QMixWeights {
 public:
  /// Packs raw float32 C-contiguous tensors given in qmix_agent_specs() / qmix_mixer_specs() order (shapes
  /// are the caller's responsibility: the binding checks them). `mixer` may be empty (no mixer). Weights
  /// must be finite. O(total weights).
  static Status create(const QMixConfig& config, const std::vector<const float*>& agent,
                       const std::vector<const float*>& mixer, std::shared_ptr<const QMixWeights>* out);

  const QMixConfig& config() const noexcept { return config_; }
  bool has_mixer() const noexcept { return has_mixer_; }
  /// Bytes of packed weights.
  std::size_t bytes() const noexcept { return floats_ * sizeof(float); }

  struct Impl;  // layer offsets (qmix.cpp)
  const Impl& impl() const noexcept { return *impl_; }
  const float* data() const noexcept { return data_.get(); }

  ~QMixWeights();
  QMixWeights(const QMixWeights&) = delete;
  QMixWeights& operator=(const QMixWeights&) = delete;

 private:
  QMixWeights();
  struct Free {
    void operator()(float* p) const noexcept;
  };
  QMixConfig config_;
  bool has_mixer_ = false;
  std::size_t floats_ = 0;
  std::unique_ptr<float[], Free> data_;
  std::unique_ptr<Impl> impl_;
};

/// Where the AMX level of the qmix networks starts to pay when no level is named (resolve_isa_for_rows): below
/// this many rows (agent rows B * N for qmix_forward, episodes B for qmix_mix) a call runs at avx512, whose
/// plain float32 FMAs beat the tiles' set-up and the bf16x3 packing of a few rows. Measured on a 2-vCPU Xeon with
/// AMX, the default networks, N = 3 (bench/test_bench_qmix.py::test_qmix_level_by_size): the tiles lost at
/// every B up to 16 (48 rows) in every run, by 1.2 to 2.6x for the forward and 1.2 to 3x for the mixer up to
/// B = 8; above, they won or lost by run (the tiles' speed on a shared VM varies).
constexpr std::int64_t kQMixForwardAmxMinRows = 64;
constexpr std::int64_t kQMixMixAmxMinRows = 16;

/// The agent network over B episodes of N agents: input Linear + ReLU; gnn_layers x (message Linear + ReLU,
/// mean over the neighbours of config.adj_mode / self_loops among active agents (0 without any), GRUCell, the
/// shared LayerNorm); GRUCell memory; Q-head (Linear, ReLU, Linear). float32 with FMA; about 1e-6 from the
/// float64 reference at the default shapes. Cost O(B N (obs_dim H + L 7 H^2 + 6 H^2 + H Hq + Hq A) + B L N^2 H).
/// Non-finite obs (checked first, over the whole batch) or hidden gives StatusCode::non_finite naming the
/// first episode and agent in C order.
Status qmix_forward(const QMixWeights& w, const QMixForwardArgs& args, const QMixForwardOut& out, Isa isa);

/// The monotonic mixer: q_tot (B,) f32 from q_taken and state (python reference qmix_mix). Needs
/// w.has_mixer(). Non-finite q_taken (first) or state gives StatusCode::non_finite naming the episode.
/// Cost O(B S (3 Hh + M) + B Hh (n M + 2 M + 1)).
Status qmix_mix(const QMixWeights& w, const QMixMixArgs& args, float* q_tot, Isa isa);

/// Agent Q-Mix's round graph phi from B joint actions (python reference: backends/reference.py qmix_graph).
/// actions (B, N) int32/int64, N <= 64, any strides; every action is checked to lie in [0, 6) before anything
/// is written (out_of_range names the first bad one in (episode, agent) order). Writes adj (B, N, N) u8 and
/// debate (B, N) i32 (the partner each agent's debate_check paired it with, else -1), C-contiguous. Each
/// graph keeps one 64-bit row per agent, so a reachability test costs at most N word-ORs per step.
Status qmix_graph(const IntView& actions, std::int64_t B, std::int64_t N, std::uint8_t* adj, std::int32_t* debate);

}  // namespace toporoute
