// team_schedule, team_scores and topology_distance: the team graph ops (cpp/include/toporoute/team_schedule.hpp).
#include "toporoute/team_schedule.hpp"

#include "common.hpp"

namespace toporoute::bindings {

namespace {

py::tuple team_schedule(const py::handle& adj, const py::handle& alive) {
  Dims dims;
  const TeamGraphs g = graph_batch(dims, adj, alive);
  const std::int64_t B = g.B, N = g.N;
  TeamScheduleOut o;
  NewOutputs out("team_schedule");
  out.add<std::int32_t>({B, N}, &o.component);
  out.add<std::int32_t>({B, N}, &o.level);
  out.add<std::int32_t>({B}, &o.n_levels);
  out.add<bool>({B, N, N}, &o.lagged);
  out.add<bool>({B}, &o.cyclic);
  out.add<std::int32_t>({B, N}, &o.order);
  return out.run([&] { return toporoute::team_schedule(g, o); });
}

py::tuple team_scores(const py::handle& history, const py::handle& present, double eta, std::int64_t window,
                      double death_threshold) {
  TeamScoresArgs a;
  Dims dims;
  dims.view(history, "history", "BTN", a.history, a.h_sb, a.h_st, a.h_sn);
  dims.view(present, "present", "BTN", a.present, a.p_sb, a.p_st, a.p_sn);
  a.B = dims['B'];
  a.T = dims['T'];
  a.N = dims['N'];
  const std::int64_t B = a.B, T = a.T, N = a.N;
  a.eta = eta;
  a.window = window;
  a.death_threshold = death_threshold;
  TeamScoresOut o;
  NewOutputs out("team_scores");
  out.add<float>({B, T}, &o.mean);
  out.add<float>({B, T}, &o.var);
  out.add<float>({B, N}, &o.pi);
  out.add<float>({B, N}, &o.trend);
  out.add<float>({B}, &o.mean_trend);
  out.add<float>({B, N}, &o.last);
  out.add<bool>({B, N}, &o.death);
  out.add<float>({B}, &o.delta_mean);
  return out.run([&] { return toporoute::team_scores(a, o); });
}

py::object topology_distance(const py::handle& adj_a, const py::handle& alive_a, const py::handle& adj_b,
                             const py::handle& alive_b, const py::handle& gen_a, const py::handle& gen_b) {
  TopologyDistanceArgs a;
  Dims dims, dims_b;  // graph b is checked on its own first, then against a
  a.a = graph_batch(dims, adj_a, alive_a, "adj_a", "alive_a");
  a.b = graph_batch(dims_b, adj_b, alive_b, "adj_b", "alive_b");
  const std::int64_t B = a.a.B, N = a.a.N;
  if (a.b.B != B || a.b.N != N) raise_shape("adj_b", {B, N, N}, {a.b.B, a.b.N, a.b.N});
  const auto ga = optional_fast_view<std::int32_t, 2>(gen_a, "gen_a");
  const auto gb = optional_fast_view<std::int32_t, 2>(gen_b, "gen_b");
  dims.fill(ga, "gen_a", "BN", a.gen_a, a.ga_sb, a.ga_sn);
  dims.fill(gb, "gen_b", "BN", a.gen_b, a.gb_sb, a.gb_sn);
  std::int32_t* d = nullptr;
  NewOutputs out("topology_distance");
  out.add<std::int32_t>({B}, &d);
  py::tuple arrays = out.allocate();
  run_core("topology_distance", [&] { return toporoute::topology_distance(a, d); });
  return arrays[0];
}

}  // namespace

void bind_team_schedule(py::module_& m) {
  m.def("team_schedule", &team_schedule, py::arg("adj"), py::arg("alive"),
        "team_schedule(adj, alive) -> (component, level, n_levels, lagged, cyclic, order); batched.");
  m.def("team_scores", &team_scores, py::arg("history"), py::arg("present"), py::arg("eta"), py::arg("window"),
        py::arg("death_threshold"),
        "team_scores(history, present, eta, window, death_threshold) -> (mean, var, pi, trend, mean_trend, last, "
        "death, delta_mean); batched.");
  m.def("topology_distance", &topology_distance, py::arg("adj_a"), py::arg("alive_a"), py::arg("adj_b"),
        py::arg("alive_b"), py::arg("gen_a"), py::arg("gen_b"),
        "topology_distance(adj_a, alive_a, adj_b, alive_b, gen_a, gen_b) -> (B,) int32; batched.");
}

}  // namespace toporoute::bindings
