// team_project: the team edit projection (cpp/include/toporoute/team.hpp).
#include "common.hpp"
#include "toporoute/team.hpp"

namespace toporoute::bindings {

namespace {

py::tuple team_project(const py::handle& adj, const py::handle& alive, const py::handle& roles, const py::handle& sink,
                       const py::handle& edits, const py::handle& protected_, const py::handle& critical,
                       const py::handle& scores, const py::handle& generation, std::int64_t budget_pairs,
                       std::int64_t budget_edges, std::int64_t max_removals, std::int64_t max_pure_births,
                       std::int64_t max_pure_deaths, std::int64_t n_min, std::int64_t n_max) {
  const auto av = fast_view<std::uint8_t, 3>(adj, "adj", true);
  const std::int64_t B = av.shape[0], N = av.shape[1];
  expect_dims(av, "adj", {B, N, N});
  const auto lv = fast_view<std::uint8_t, 2>(alive, "alive", true);
  expect_dims(lv, "alive", {B, N});
  const auto rv = fast_view<std::int32_t, 2>(roles, "roles");
  expect_dims(rv, "roles", {B, N});
  const auto sv = fast_view<std::int32_t, 1>(sink, "sink");
  expect_dims(sv, "sink", {B});
  const auto ev = fast_view<std::int32_t, 3>(edits, "edits");
  const std::int64_t P = ev.shape[1];
  expect_dims(ev, "edits", {B, P, 4});
  const auto pv = optional_fast_view<std::uint8_t, 2>(protected_, "protected", true);
  const auto cv = optional_fast_view<std::uint8_t, 2>(critical, "critical", true);
  const auto scv = optional_fast_view<float, 2>(scores, "scores");
  const auto gv = optional_fast_view<std::int32_t, 2>(generation, "generation");
  TeamProjectArgs a;
  a.adj = static_cast<const std::uint8_t*>(av.data);
  a.alive = static_cast<const std::uint8_t*>(lv.data);
  a.roles = static_cast<const std::int32_t*>(rv.data);
  a.sink = static_cast<const std::int32_t*>(sv.data);
  a.edits = static_cast<const std::int32_t*>(ev.data);
  a.B = B;
  a.N = N;
  a.P = P;
  a.adj_sb = av.strides[0];
  a.adj_sr = av.strides[1];
  a.adj_sc = av.strides[2];
  a.al_sb = lv.strides[0];
  a.al_sn = lv.strides[1];
  a.ro_sb = rv.strides[0];
  a.ro_sn = rv.strides[1];
  a.si_sb = sv.strides[0];
  a.e_sb = ev.strides[0];
  a.e_sp = ev.strides[1];
  a.e_sc = ev.strides[2];
  if (pv.present()) {
    expect_dims(pv, "protected", {B, N});
    a.protected_ = static_cast<const std::uint8_t*>(pv.data);
    a.pr_sb = pv.strides[0];
    a.pr_sn = pv.strides[1];
  }
  if (cv.present()) {
    a.R = cv.shape[1];
    expect_dims(cv, "critical", {B, a.R});
    a.critical = static_cast<const std::uint8_t*>(cv.data);
    a.cr_sb = cv.strides[0];
    a.cr_sr = cv.strides[1];
  }
  if (scv.present()) {
    expect_dims(scv, "scores", {B, N});
    a.scores = static_cast<const float*>(scv.data);
    a.sc_sb = scv.strides[0];
    a.sc_sn = scv.strides[1];
  }
  if (gv.present()) {
    expect_dims(gv, "generation", {B, N});
    a.generation = static_cast<const std::int32_t*>(gv.data);
    a.ge_sb = gv.strides[0];
    a.ge_sn = gv.strides[1];
  }
  a.budget_pairs = budget_pairs;
  a.budget_edges = budget_edges;
  a.max_removals = max_removals;
  a.max_pure_births = max_pure_births;
  a.max_pure_deaths = max_pure_deaths;
  a.n_min = n_min;
  a.n_max = n_max;
  NewOutputs out("team_project");
  out.add<bool>({B, N, N});
  out.add<bool>({B, N});
  out.add<std::int32_t>({B, N});
  out.add<std::int32_t>({B, N});
  out.add<bool>({B, P});
  out.add<std::int8_t>({B, P});
  out.add<std::int32_t>({B, P});
  out.add<bool>({B, N, N});
  out.add<bool>({B, N, N});
  py::tuple arrays = out.allocate();
  const TeamProjectOut o{out.data<std::uint8_t>(0), out.data<std::uint8_t>(1), out.data<std::int32_t>(2),
                         out.data<std::int32_t>(3), out.data<std::uint8_t>(4), out.data<std::int8_t>(5),
                         out.data<std::int32_t>(6), out.data<std::uint8_t>(7), out.data<std::uint8_t>(8)};
  run_core("team_project", [&] { return toporoute::team_project(a, o); });
  return arrays;
}

}  // namespace

void bind_team(py::module_& m) {
  m.def("team_project", &team_project, py::arg("adj"), py::arg("alive"), py::arg("roles"), py::arg("sink"),
        py::arg("edits"), py::arg("protected"), py::arg("critical"), py::arg("scores"), py::arg("generation"),
        py::arg("budget_pairs"), py::arg("budget_edges"), py::arg("max_removals"), py::arg("max_pure_births"),
        py::arg("max_pure_deaths"), py::arg("n_min"), py::arg("n_max"),
        "team_project(adj, alive, roles, sink, edits, protected, critical, scores, generation, budget_pairs, "
        "budget_edges, max_removals, max_pure_births, max_pure_deaths, n_min, n_max) -> (adj, alive, roles, "
        "generation, accepted, reason, new_node, inherited, repaired); batched.");
}

}  // namespace toporoute::bindings
