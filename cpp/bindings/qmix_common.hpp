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
  QMixForwardArgs a;
  Dims dims;
  dims.set('D', c.obs_dim);
  dims.set('H', c.hidden);
  dims.fill(obs, "obs", "BND", a.obs, a.obs_sb, a.obs_sn, a.obs_sd);
  dims.fill(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  dims.fill(hidden, "hidden", "BNH", a.hidden, a.hid_sb, a.hid_sn, a.hid_sd);
  dims.fill(active, "active", "BN", a.active, a.act_sb, a.act_sn);
  a.B = dims['B'];
  a.N = dims['N'];
  return a;
}

/// QMixMixArgs over q_taken (B, n_agents) and state (B, state_dim) views, shapes checked.
template <class View>
QMixMixArgs qmix_mix_args(const QMixConfig& c, const View& q_taken, const View& state) {
  QMixMixArgs a;
  Dims dims;
  dims.set('A', c.n_agents);
  dims.set('S', c.state_dim);
  dims.fill(q_taken, "q_taken", "BA", a.q_taken, a.q_sb, a.q_sa);
  dims.fill(state, "state", "BS", a.state, a.s_sb, a.s_sd);
  a.B = dims['B'];
  return a;
}

/// Raises InvalidArgumentError (arg "params") for weights without a mixer.
[[noreturn]] void raise_no_mixer();

}  // namespace toporoute::bindings
