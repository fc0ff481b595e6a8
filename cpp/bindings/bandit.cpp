// Bindings of the HiVA bandit kernels: shape and dtype checks on numpy views (never copied), new outputs, the
// core call with the GIL released and its Status converted once (common.cpp).
#include <cstdint>
#include <string>

#include "bandit_args.hpp"
#include "common.hpp"
#include "toporoute/bandit.hpp"

namespace toporoute::bindings {

void set_bandit_scalars(BanditSelectArgs& a, std::int64_t k, std::uint64_t seed, std::uint64_t step, int mode,
                        std::uint64_t graph_offset) {
  constexpr std::uint64_t kU32 = std::uint64_t{1} << 32;
  if (k < 1) raise_error("OutOfRangeError", "k", "k must be >= 1; got " + std::to_string(k));
  if (step >= kU32) raise_error("OutOfRangeError", "step", "step must be in [0, 2**32); got " + std::to_string(step));
  if (graph_offset + static_cast<std::uint64_t>(a.B) > kU32) {
    raise_error("OutOfRangeError", "graph_offset",
                "graph_offset + B must be <= 2**32; got " + std::to_string(graph_offset) + " + " + std::to_string(a.B));
  }
  if (mode != 0 && mode != 1) {
    raise_error("InvalidArgumentError", "mode", "mode must be 0 (thompson) or 1 (mean); got " + std::to_string(mode));
  }
  if (a.N >= (std::int64_t{1} << 31)) raise_error("ShapeError", "adj", "adj must have N < 2**31 nodes");
  a.k = k;
  a.seed = seed;
  a.step = static_cast<std::uint32_t>(step);
  a.graph_offset = static_cast<std::uint32_t>(graph_offset);
  a.mode = static_cast<BanditMode>(mode);
}

BanditSelectInputs bandit_select_inputs(const py::handle& adj, const py::handle& alpha, const py::handle& beta,
                                        const py::handle& weights, const py::handle& active) {
  BanditSelectInputs in;
  BanditSelectArgs& a = in.args;
  Dims dims;
  in.adj = dims.view(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  in.alpha = dims.view(alpha, "alpha", "BN", a.alpha, a.al_sb, a.al_sn);
  in.beta = dims.view(beta, "beta", "BN", a.beta, a.be_sb, a.be_sn);
  in.weights = dims.optional_view(weights, "weights", "BNN", a.weights, a.w_sb, a.w_sr, a.w_sc);
  in.active = dims.optional_view(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  set_graph_sizes(a, dims);
  return in;
}

void add_bandit_select_outputs(NewOutputs& out, const BanditSelectArgs& a, BanditSelectOut& o) {
  out.add<bool>({a.B, a.N, a.N}, &o.chosen);
  out.add<std::int32_t>({a.B, a.N, a.k}, &o.choices);
  out.add<float>({a.B, a.N}, &o.theta);
}

namespace {

// The op table's argument order, `mode` by name (the CUDA bindings take the code: bandit_args.hpp).
py::tuple bandit_select(const py::handle& adj, const py::handle& alpha, const py::handle& beta, std::int64_t k,
                        const py::handle& weights, std::uint64_t seed, std::uint64_t step, const std::string& mode,
                        const py::handle& active, std::uint64_t graph_offset) {
  BanditSelectInputs in = bandit_select_inputs(adj, alpha, beta, weights, active);
  const int code = mode == "thompson" ? 0 : mode == "mean" ? 1 : -1;
  if (code < 0) raise_error("InvalidArgumentError", "mode", "mode must be 'thompson' or 'mean'; got '" + mode + "'");
  set_bandit_scalars(in.args, k, seed, step, code, graph_offset);
  BanditSelectOut o;
  NewOutputs out("bandit_select");
  add_bandit_select_outputs(out, in.args, o);
  return out.run([&] { return toporoute::bandit_select(in.args, o); });
}

py::tuple bandit_update(const py::handle& alpha, const py::handle& beta, const py::handle& selected,
                        const py::handle& reward, const py::handle& dt, const py::handle& km, double gamma,
                        double delta, double prior) {
  BanditUpdateArgs a;
  Dims dims;
  dims.view(alpha, "alpha", "BN", a.alpha, a.al_sb, a.al_sn);
  dims.view(beta, "beta", "BN", a.beta, a.be_sb, a.be_sn);
  dims.view(selected, "selected", "BN", a.selected, a.se_sb, a.se_sn);
  dims.view(reward, "reward", "BN", a.reward, a.re_sb, a.re_sn);
  dims.optional_view(dt, "dt", "BN", a.dt, a.dt_sb, a.dt_sn);
  dims.optional_view(km, "km", "BN", a.km, a.km_sb, a.km_sn);
  a.B = dims['B'];
  a.N = dims['N'];
  a.gamma = gamma;
  a.delta = delta;
  a.prior = prior;

  BanditUpdateOut out;
  NewOutputs o("bandit_update");
  o.add<float>({a.B, a.N}, &out.alpha);
  o.add<float>({a.B, a.N}, &out.beta);
  py::tuple arrays = o.allocate();
  run_core("bandit_update", [&] { return toporoute::bandit_update(a, out); });
  return arrays;
}

py::tuple synergy_update(const py::handle& c_syn, const py::handle& edge_alpha, const py::handle& edge_beta,
                         const py::handle& routed, const py::handle& reward, double lr) {
  SynergyUpdateArgs a;
  Dims dims;
  dims.view(c_syn, "c_syn", "BNN", a.c_syn, a.c_s[0], a.c_s[1], a.c_s[2]);
  dims.view(edge_alpha, "edge_alpha", "BNN", a.edge_alpha, a.ea_s[0], a.ea_s[1], a.ea_s[2]);
  dims.view(edge_beta, "edge_beta", "BNN", a.edge_beta, a.eb_s[0], a.eb_s[1], a.eb_s[2]);
  dims.view(routed, "routed", "BNN", a.routed, a.r_s[0], a.r_s[1], a.r_s[2]);
  dims.view(reward, "reward", "BN", a.reward, a.re_sb, a.re_sn);
  a.B = dims['B'];
  a.N = dims['N'];
  a.lr = lr;

  SynergyUpdateOut out;
  NewOutputs o("synergy_update");
  o.add<float>({a.B, a.N, a.N}, &out.c_syn);
  o.add<float>({a.B, a.N, a.N}, &out.edge_alpha);
  o.add<float>({a.B, a.N, a.N}, &out.edge_beta);
  py::tuple arrays = o.allocate();
  run_core("synergy_update", [&] { return toporoute::synergy_update(a, out); });
  return arrays;
}

py::tuple bandit_weights(const py::handle& adj, const py::handle& alive, const py::handle& alpha,
                         const py::handle& beta, const py::handle& c_syn, const py::handle& similarity,
                         const py::handle& selected, std::int64_t sink, double lam, double eta, double omega1,
                         double omega3, double threshold, double c0) {
  BanditWeightsArgs a;
  Dims dims;
  dims.view(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  dims.view(alive, "alive", "BN", a.alive, a.al_sb, a.al_sn);
  dims.view(alpha, "alpha", "BN", a.alpha, a.a_sb, a.a_sn);
  dims.view(beta, "beta", "BN", a.beta, a.b_sb, a.b_sn);
  dims.view(c_syn, "c_syn", "BNN", a.c_syn, a.c_s[0], a.c_s[1], a.c_s[2]);
  dims.view(similarity, "similarity", "BN2", a.similarity, a.s_s[0], a.s_s[1], a.s_s[2]);
  dims.view(selected, "selected", "BN", a.selected, a.se_sb, a.se_sn);
  set_graph_sizes(a, dims);
  a.scalars = {sink, lam, eta, omega1, omega3, threshold, c0};

  BanditWeightsOut out;
  NewOutputs o("bandit_weights");
  o.add<float>({a.B, a.N, a.N}, &out.weights);
  o.add<double>({a.B, a.N}, &out.psi);
  return o.run([&] { return toporoute::bandit_weights(a, out); });
}

}  // namespace

void bind_bandit(py::module_& m) {
  m.def("bandit_select", &bandit_select, py::arg("adj"), py::arg("alpha"), py::arg("beta"), py::arg("k"),
        py::arg("weights"), py::arg("seed"), py::arg("step"), py::arg("mode"), py::arg("active"),
        py::arg("graph_offset"),
        "bandit_select(adj: bool (B,N,N), alpha: f32 (B,N), beta: f32 (B,N), k: int, weights: f32 (B,N,N) | None, "
        "seed: uint64, step: uint32, mode: 'thompson' | 'mean', active: bool (B,N) | None, graph_offset: int) -> "
        "(chosen, choices, theta)");
  m.def("bandit_update", &bandit_update, py::arg("alpha"), py::arg("beta"), py::arg("selected"), py::arg("reward"),
        py::arg("dt"), py::arg("km"), py::arg("gamma"), py::arg("delta"), py::arg("prior"),
        "bandit_update(alpha: f32 (B,N), beta: f32 (B,N), selected: bool (B,N), reward: f32 (B,N), dt: f32 (B,N) | "
        "None, km: f32 (B,N) | None, gamma: float, delta: float, prior: float) -> (alpha, beta)");
  m.def("synergy_update", &synergy_update, py::arg("c_syn"), py::arg("edge_alpha"), py::arg("edge_beta"),
        py::arg("routed"), py::arg("reward"), py::arg("lr"),
        "synergy_update(c_syn: f32 (B,N,N), edge_alpha: f32 (B,N,N), edge_beta: f32 (B,N,N), routed: f32 (B,N,N), "
        "reward: f32 (B,N), lr: float) -> (c_syn, edge_alpha, edge_beta)");
  m.def("bandit_weights", &bandit_weights, py::arg("adj"), py::arg("alive"), py::arg("alpha"), py::arg("beta"),
        py::arg("c_syn"), py::arg("similarity"), py::arg("selected"), py::arg("sink"), py::arg("lam"), py::arg("eta"),
        py::arg("omega1"), py::arg("omega3"), py::arg("threshold"), py::arg("c0"),
        "bandit_weights(adj: bool (B,N,N), alive: bool (B,N), alpha: f32 (B,N), beta: f32 (B,N), c_syn: f32 (B,N,N), "
        "similarity: f64 (B,N,2), selected: bool (B,N), sink: int, lam: float, eta: float, omega1: float, "
        "omega3: float, threshold: float, c0: float) -> (weights, psi)");
}

}  // namespace toporoute::bindings
