#pragma once
// Glue shared by the CPU (qmix.cpp) and CUDA (cuda.cpp) bindings of the Q-Mix networks: the config read from a
// Python QMixConfig and the raw weight tensors checked against it.
#include <pybind11/pybind11.h>

#include <vector>

#include "common.hpp"
#include "toporoute/qmix.hpp"

namespace toporoute::bindings {

/// Reads a QMixConfig-like object (attributes obs_dim, hidden, ..., adj_mode as a string, ln_eps) and checks it.
QMixConfig qmix_config(const py::handle& config);

/// Checked raw tensors: float32 C-contiguous arrays of the spec shapes, in qmix_agent_specs / qmix_mixer_specs
/// order. `arrays` keeps them alive while the pointers are used.
struct QMixTensors {
  std::vector<HostView> arrays;
  std::vector<const float*> agent, mixer;
};
/// `mixer` may be None. Errors name "params" and the tensor.
QMixTensors qmix_tensors(const QMixConfig& c, const py::handle& agent, const py::handle& mixer);

/// QMixForwardArgs over obs (B, N, obs_dim), adj (B, N, N), optional hidden (B, N, H) and active (B, N) views
/// (element strides), after checking every shape against the config. Views need data, shape, strides and
/// present(); the ranks were checked when the views were made.
template <class View3, class View2>
QMixForwardArgs qmix_forward_args(const QMixConfig& c, const View3& obs, const View3& adj, const View3& hidden,
                                  const View2& active) {
  const std::int64_t B = obs.shape[0], N = obs.shape[1];
  expect_dims(obs, "obs", {B, N, c.obs_dim});
  expect_dims(adj, "adj", {B, N, N});
  QMixForwardArgs a;
  a.obs = static_cast<const float*>(obs.data);
  a.adj = static_cast<const std::uint8_t*>(adj.data);
  a.B = B;
  a.N = N;
  a.obs_sb = obs.strides[0];
  a.obs_sn = obs.strides[1];
  a.obs_sd = obs.strides[2];
  a.adj_sb = adj.strides[0];
  a.adj_sr = adj.strides[1];
  a.adj_sc = adj.strides[2];
  if (hidden.present()) {
    expect_dims(hidden, "hidden", {B, N, c.hidden});
    a.hidden = static_cast<const float*>(hidden.data);
    a.hid_sb = hidden.strides[0];
    a.hid_sn = hidden.strides[1];
    a.hid_sd = hidden.strides[2];
  }
  if (active.present()) {
    expect_dims(active, "active", {B, N});
    a.active = static_cast<const std::uint8_t*>(active.data);
    a.act_sb = active.strides[0];
    a.act_sn = active.strides[1];
  }
  return a;
}

/// QMixMixArgs over q_taken (B, n_agents) and state (B, state_dim) views, shapes checked.
template <class View>
QMixMixArgs qmix_mix_args(const QMixConfig& c, const View& q_taken, const View& state) {
  const std::int64_t B = q_taken.shape[0];
  expect_dims(q_taken, "q_taken", {B, c.n_agents});
  expect_dims(state, "state", {B, c.state_dim});
  QMixMixArgs a;
  a.q_taken = static_cast<const float*>(q_taken.data);
  a.state = static_cast<const float*>(state.data);
  a.B = B;
  a.q_sb = q_taken.strides[0];
  a.q_sa = q_taken.strides[1];
  a.s_sb = state.strides[0];
  a.s_sd = state.strides[1];
  return a;
}

/// Raises InvalidArgumentError (arg "params") for weights without a mixer.
[[noreturn]] void raise_no_mixer();

}  // namespace toporoute::bindings
