// team_schedule, team_scores and topology_distance: the team graph ops (cpp/include/toporoute/team_schedule.hpp).
#include "toporoute/team_schedule.hpp"

#include "common.hpp"

namespace toporoute::bindings {

namespace {

// adj (B, N, N) bool and alive (B, N) bool, named as the caller's arguments.
TeamGraphs team_graphs(const py::handle& adj, const py::handle& alive, const char* adj_name,
                       const char* alive_name) {
  const auto av = fast_view<std::uint8_t, 3>(adj, adj_name, true);
  expect_dims(av, adj_name, {av.shape[0], av.shape[1], av.shape[1]});
  const auto lv = fast_view<std::uint8_t, 2>(alive, alive_name, true);
  expect_dims(lv, alive_name, {av.shape[0], av.shape[1]});
  TeamGraphs g;
  g.adj = static_cast<const std::uint8_t*>(av.data);
  g.alive = static_cast<const std::uint8_t*>(lv.data);
  g.B = av.shape[0];
  g.N = av.shape[1];
  g.adj_sb = av.strides[0];
  g.adj_sr = av.strides[1];
  g.adj_sc = av.strides[2];
  g.a_sb = lv.strides[0];
  g.a_sn = lv.strides[1];
  return g;
}

py::tuple team_schedule(const py::handle& adj, const py::handle& alive) {
  const TeamGraphs g = team_graphs(adj, alive, "adj", "alive");
  const std::int64_t B = g.B, N = g.N;
  NewOutputs out("team_schedule");
  out.add<std::int32_t>({B, N});
  out.add<std::int32_t>({B, N});
  out.add<std::int32_t>({B});
  out.add<bool>({B, N, N});
  out.add<bool>({B});
  out.add<std::int32_t>({B, N});
  py::tuple arrays = out.allocate();
  const TeamScheduleOut o{out.data<std::int32_t>(0), out.data<std::int32_t>(1), out.data<std::int32_t>(2),
                          out.data<std::uint8_t>(3), out.data<std::uint8_t>(4), out.data<std::int32_t>(5)};
  run_core("team_schedule", [&] { return toporoute::team_schedule(g, o); });
  return arrays;
}

py::tuple team_scores(const py::handle& history, const py::handle& present, double eta, std::int64_t window,
                      double death_threshold) {
  const auto hv = fast_view<float, 3>(history, "history");
  const auto pv = fast_view<std::uint8_t, 3>(present, "present", true);
  const std::int64_t B = hv.shape[0], T = hv.shape[1], N = hv.shape[2];
  expect_dims(pv, "present", {B, T, N});
  TeamScoresArgs a;
  a.history = static_cast<const float*>(hv.data);
  a.present = static_cast<const std::uint8_t*>(pv.data);
  a.B = B;
  a.T = T;
  a.N = N;
  a.h_sb = hv.strides[0];
  a.h_st = hv.strides[1];
  a.h_sn = hv.strides[2];
  a.p_sb = pv.strides[0];
  a.p_st = pv.strides[1];
  a.p_sn = pv.strides[2];
  a.eta = eta;
  a.window = window;
  a.death_threshold = death_threshold;
  NewOutputs out("team_scores");
  out.add<float>({B, T});
  out.add<float>({B, T});
  out.add<float>({B, N});
  out.add<float>({B, N});
  out.add<float>({B});
  out.add<float>({B, N});
  out.add<bool>({B, N});
  out.add<float>({B});
  py::tuple arrays = out.allocate();
  const TeamScoresOut o{out.data<float>(0), out.data<float>(1), out.data<float>(2),        out.data<float>(3),
                        out.data<float>(4), out.data<float>(5), out.data<std::uint8_t>(6), out.data<float>(7)};
  run_core("team_scores", [&] { return toporoute::team_scores(a, o); });
  return arrays;
}

py::object topology_distance(const py::handle& adj_a, const py::handle& alive_a, const py::handle& adj_b,
                             const py::handle& alive_b, const py::handle& gen_a, const py::handle& gen_b) {
  TopologyDistanceArgs a;
  a.a = team_graphs(adj_a, alive_a, "adj_a", "alive_a");
  a.b = team_graphs(adj_b, alive_b, "adj_b", "alive_b");
  const std::int64_t B = a.a.B, N = a.a.N;
  if (a.b.B != B || a.b.N != N) raise_shape("adj_b", {B, N, N}, {a.b.B, a.b.N, a.b.N});
  const auto ga = optional_fast_view<std::int32_t, 2>(gen_a, "gen_a");
  const auto gb = optional_fast_view<std::int32_t, 2>(gen_b, "gen_b");
  if (ga.present()) {
    expect_dims(ga, "gen_a", {B, N});
    a.gen_a = static_cast<const std::int32_t*>(ga.data);
    a.ga_sb = ga.strides[0];
    a.ga_sn = ga.strides[1];
  }
  if (gb.present()) {
    expect_dims(gb, "gen_b", {B, N});
    a.gen_b = static_cast<const std::int32_t*>(gb.data);
    a.gb_sb = gb.strides[0];
    a.gb_sn = gb.strides[1];
  }
  NewOutputs out("topology_distance");
  out.add<std::int32_t>({B});
  py::tuple arrays = out.allocate();
  std::int32_t* d = out.data<std::int32_t>(0);
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
