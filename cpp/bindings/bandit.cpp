// Bindings of the HiVA bandit kernels: shape and dtype checks on numpy views (never copied), new outputs, the
// core call with the GIL released and its Status converted once (common.cpp).
#include <cstdint>
#include <string>

#include "common.hpp"
#include "toporoute/bandit.hpp"

namespace toporoute::bindings {

namespace {

constexpr std::uint64_t kU32 = std::uint64_t{1} << 32;

py::tuple bandit_select(const py::handle& adj, const py::handle& alpha, const py::handle& beta,
                        const py::handle& weights, const py::handle& active, std::int64_t k, std::uint64_t seed,
                        std::uint64_t step, int mode, std::uint64_t graph_offset) {
  const FastView<3> g = fast_view<std::uint8_t, 3>(adj, "adj", true);
  const std::int64_t B = g.shape[0], N = g.shape[1];
  expect_dims(g, "adj", {B, N, N});
  const FastView<2> al = fast_view<float, 2>(alpha, "alpha");
  expect_dims(al, "alpha", {B, N});
  const FastView<2> be = fast_view<float, 2>(beta, "beta");
  expect_dims(be, "beta", {B, N});
  const FastView<3> w = optional_fast_view<float, 3>(weights, "weights");
  if (w.present()) expect_dims(w, "weights", {B, N, N});
  const FastView<2> act = optional_fast_view<std::uint8_t, 2>(active, "active", true);
  if (act.present()) expect_dims(act, "active", {B, N});
  if (k < 1) raise_error("OutOfRangeError", "k", "k must be >= 1; got " + std::to_string(k));
  if (step >= kU32) raise_error("OutOfRangeError", "step", "step must be in [0, 2**32); got " + std::to_string(step));
  if (graph_offset + static_cast<std::uint64_t>(B) > kU32) {
    raise_error("OutOfRangeError", "graph_offset",
                "graph_offset + B must be <= 2**32; got " + std::to_string(graph_offset) + " + " + std::to_string(B));
  }
  if (mode != 0 && mode != 1) {
    raise_error("InvalidArgumentError", "mode", "mode must be 0 (thompson) or 1 (mean); got " + std::to_string(mode));
  }
  if (N >= (std::int64_t{1} << 31)) raise_error("ShapeError", "adj", "adj must have N < 2**31 nodes");

  BanditSelectArgs a;
  a.adj = static_cast<const std::uint8_t*>(g.data);
  a.alpha = static_cast<const float*>(al.data);
  a.beta = static_cast<const float*>(be.data);
  a.weights = w.present() ? static_cast<const float*>(w.data) : nullptr;
  a.active = act.present() ? static_cast<const std::uint8_t*>(act.data) : nullptr;
  a.B = B;
  a.N = N;
  a.k = k;
  a.adj_sb = g.strides[0];
  a.adj_sr = g.strides[1];
  a.adj_sc = g.strides[2];
  a.al_sb = al.strides[0];
  a.al_sn = al.strides[1];
  a.be_sb = be.strides[0];
  a.be_sn = be.strides[1];
  if (w.present()) {
    a.w_sb = w.strides[0];
    a.w_sr = w.strides[1];
    a.w_sc = w.strides[2];
  }
  if (act.present()) {
    a.a_sb = act.strides[0];
    a.a_sn = act.strides[1];
  }
  a.seed = seed;
  a.step = static_cast<std::uint32_t>(step);
  a.graph_offset = static_cast<std::uint32_t>(graph_offset);
  a.mode = static_cast<BanditMode>(mode);

  NewOutputs o("bandit_select");
  o.add<bool>({B, N, N});
  o.add<std::int32_t>({B, N, k});
  o.add<float>({B, N});
  py::tuple arrays = o.allocate();
  BanditSelectOut out;
  out.chosen = o.data<std::uint8_t>(0);
  out.choices = o.data<std::int32_t>(1);
  out.theta = o.data<float>(2);
  run_core("bandit_select", [&] { return toporoute::bandit_select(a, out); });
  return arrays;
}

py::tuple bandit_update(const py::handle& alpha, const py::handle& beta, const py::handle& selected,
                        const py::handle& reward, const py::handle& dt, const py::handle& km, double gamma,
                        double delta, double prior) {
  const FastView<2> al = fast_view<float, 2>(alpha, "alpha");
  const std::int64_t B = al.shape[0], N = al.shape[1];
  const FastView<2> be = fast_view<float, 2>(beta, "beta");
  expect_dims(be, "beta", {B, N});
  const FastView<2> se = fast_view<std::uint8_t, 2>(selected, "selected", true);
  expect_dims(se, "selected", {B, N});
  const FastView<2> re = fast_view<float, 2>(reward, "reward");
  expect_dims(re, "reward", {B, N});
  const FastView<2> d = optional_fast_view<float, 2>(dt, "dt");
  if (d.present()) expect_dims(d, "dt", {B, N});
  const FastView<2> m = optional_fast_view<float, 2>(km, "km");
  if (m.present()) expect_dims(m, "km", {B, N});

  BanditUpdateArgs a;
  a.alpha = static_cast<const float*>(al.data);
  a.beta = static_cast<const float*>(be.data);
  a.selected = static_cast<const std::uint8_t*>(se.data);
  a.reward = static_cast<const float*>(re.data);
  a.dt = d.present() ? static_cast<const float*>(d.data) : nullptr;
  a.km = m.present() ? static_cast<const float*>(m.data) : nullptr;
  a.B = B;
  a.N = N;
  a.al_sb = al.strides[0];
  a.al_sn = al.strides[1];
  a.be_sb = be.strides[0];
  a.be_sn = be.strides[1];
  a.se_sb = se.strides[0];
  a.se_sn = se.strides[1];
  a.re_sb = re.strides[0];
  a.re_sn = re.strides[1];
  a.dt_sb = d.strides[0];
  a.dt_sn = d.strides[1];
  a.km_sb = m.strides[0];
  a.km_sn = m.strides[1];
  a.gamma = gamma;
  a.delta = delta;
  a.prior = prior;

  NewOutputs o("bandit_update");
  o.add<float>({B, N});
  o.add<float>({B, N});
  py::tuple arrays = o.allocate();
  BanditUpdateOut out;
  out.alpha = o.data<float>(0);
  out.beta = o.data<float>(1);
  run_core("bandit_update", [&] { return toporoute::bandit_update(a, out); });
  return arrays;
}

py::tuple synergy_update(const py::handle& c_syn, const py::handle& edge_alpha, const py::handle& edge_beta,
                         const py::handle& routed, const py::handle& reward, double lr) {
  const FastView<3> c = fast_view<float, 3>(c_syn, "c_syn");
  const std::int64_t B = c.shape[0], N = c.shape[1];
  expect_dims(c, "c_syn", {B, N, N});
  const FastView<3> ea = fast_view<float, 3>(edge_alpha, "edge_alpha");
  expect_dims(ea, "edge_alpha", {B, N, N});
  const FastView<3> eb = fast_view<float, 3>(edge_beta, "edge_beta");
  expect_dims(eb, "edge_beta", {B, N, N});
  const FastView<3> r = fast_view<float, 3>(routed, "routed");
  expect_dims(r, "routed", {B, N, N});
  const FastView<2> re = fast_view<float, 2>(reward, "reward");
  expect_dims(re, "reward", {B, N});

  SynergyUpdateArgs a;
  a.c_syn = static_cast<const float*>(c.data);
  a.edge_alpha = static_cast<const float*>(ea.data);
  a.edge_beta = static_cast<const float*>(eb.data);
  a.routed = static_cast<const float*>(r.data);
  a.reward = static_cast<const float*>(re.data);
  a.B = B;
  a.N = N;
  for (int i = 0; i < 3; ++i) {
    a.c_s[i] = c.strides[i];
    a.ea_s[i] = ea.strides[i];
    a.eb_s[i] = eb.strides[i];
    a.r_s[i] = r.strides[i];
  }
  a.re_sb = re.strides[0];
  a.re_sn = re.strides[1];
  a.lr = lr;

  NewOutputs o("synergy_update");
  o.add<float>({B, N, N});
  o.add<float>({B, N, N});
  o.add<float>({B, N, N});
  py::tuple arrays = o.allocate();
  SynergyUpdateOut out;
  out.c_syn = o.data<float>(0);
  out.edge_alpha = o.data<float>(1);
  out.edge_beta = o.data<float>(2);
  run_core("synergy_update", [&] { return toporoute::synergy_update(a, out); });
  return arrays;
}

}  // namespace

void bind_bandit(py::module_& m) {
  m.def("bandit_select", &bandit_select, py::arg("adj"), py::arg("alpha"), py::arg("beta"), py::arg("weights"),
        py::arg("active"), py::arg("k"), py::arg("seed"), py::arg("step"), py::arg("mode"), py::arg("graph_offset"),
        "bandit_select(adj: bool (B,N,N), alpha: f32 (B,N), beta: f32 (B,N), weights: f32 (B,N,N) | None, "
        "active: bool (B,N) | None, k: int, seed: uint64, step: uint32, mode: 0 thompson | 1 mean, graph_offset: "
        "int) -> (chosen, choices, theta)");
  m.def("bandit_update", &bandit_update, py::arg("alpha"), py::arg("beta"), py::arg("selected"), py::arg("reward"),
        py::arg("dt"), py::arg("km"), py::arg("gamma"), py::arg("delta"), py::arg("prior"),
        "bandit_update(alpha: f32 (B,N), beta: f32 (B,N), selected: bool (B,N), reward: f32 (B,N), dt: f32 (B,N) | "
        "None, km: f32 (B,N) | None, gamma: float, delta: float, prior: float) -> (alpha, beta)");
  m.def("synergy_update", &synergy_update, py::arg("c_syn"), py::arg("edge_alpha"), py::arg("edge_beta"),
        py::arg("routed"), py::arg("reward"), py::arg("lr"),
        "synergy_update(c_syn: f32 (B,N,N), edge_alpha: f32 (B,N,N), edge_beta: f32 (B,N,N), routed: f32 (B,N,N), "
        "reward: f32 (B,N), lr: float) -> (c_syn, edge_alpha, edge_beta)");
}

}  // namespace toporoute::bindings
