// team_project: the team edit projection (cpp/include/toporoute/team_project.hpp).
#include "common.hpp"
#include "toporoute/team_project.hpp"

namespace toporoute::bindings {

namespace {

py::tuple team_project(const py::handle& adj, const py::handle& alive, const py::handle& roles, const py::handle& sink,
                       const py::handle& edits, const py::handle& protected_, const py::handle& critical,
                       const py::handle& scores, const py::handle& generation, std::int64_t budget_pairs,
                       std::int64_t budget_edges, std::int64_t max_removals, std::int64_t max_pure_births,
                       std::int64_t max_pure_deaths, std::int64_t n_min, std::int64_t n_max) {
  TeamProjectArgs a;
  Dims dims;
  static_cast<GraphBatch&>(a) = graph_batch(dims, adj, alive);
  dims.view(roles, "roles", "BN", a.roles, a.ro_sb, a.ro_sn);
  dims.view(sink, "sink", "B", a.sink, a.si_sb);
  dims.view(edits, "edits", "BP4", a.edits, a.e_sb, a.e_sp, a.e_sc);
  // every optional array's dtype is checked before any of their shapes
  const auto pv = optional_fast_view<std::uint8_t, 2>(protected_, "protected", true);
  const auto cv = optional_fast_view<std::uint8_t, 2>(critical, "critical", true);
  const auto scv = optional_fast_view<float, 2>(scores, "scores");
  const auto gv = optional_fast_view<std::int32_t, 2>(generation, "generation");
  dims.fill(pv, "protected", "BN", a.protected_, a.pr_sb, a.pr_sn);
  dims.fill(cv, "critical", "BR", a.critical, a.cr_sb, a.cr_sr);
  dims.fill(scv, "scores", "BN", a.scores, a.sc_sb, a.sc_sn);
  dims.fill(gv, "generation", "BN", a.generation, a.ge_sb, a.ge_sn);
  a.P = dims['P'];
  a.R = dims['R'];
  const std::int64_t B = a.B, N = a.N, P = a.P;
  a.budget_pairs = budget_pairs;
  a.budget_edges = budget_edges;
  a.max_removals = max_removals;
  a.max_pure_births = max_pure_births;
  a.max_pure_deaths = max_pure_deaths;
  a.n_min = n_min;
  a.n_max = n_max;
  TeamProjectOut o;
  NewOutputs out("team_project");
  out.add<bool>({B, N, N}, &o.adj);
  out.add<bool>({B, N}, &o.alive);
  out.add<std::int32_t>({B, N}, &o.roles);
  out.add<std::int32_t>({B, N}, &o.generation);
  out.add<bool>({B, P}, &o.accepted);
  out.add<std::int8_t>({B, P}, &o.reason);
  out.add<std::int32_t>({B, P}, &o.new_node);
  out.add<bool>({B, N, N}, &o.inherited);
  out.add<bool>({B, N, N}, &o.repaired);
  return out.run([&] { return toporoute::team_project(a, o); });
}

}  // namespace

void bind_team_project(py::module_& m) {
  m.def("team_project", &team_project, py::arg("adj"), py::arg("alive"), py::arg("roles"), py::arg("sink"),
        py::arg("edits"), py::arg("protected"), py::arg("critical"), py::arg("scores"), py::arg("generation"),
        py::arg("budget_pairs"), py::arg("budget_edges"), py::arg("max_removals"), py::arg("max_pure_births"),
        py::arg("max_pure_deaths"), py::arg("n_min"), py::arg("n_max"),
        "team_project(adj, alive, roles, sink, edits, protected, critical, scores, generation, budget_pairs, "
        "budget_edges, max_removals, max_pure_births, max_pure_deaths, n_min, n_max) -> (adj, alive, roles, "
        "generation, accepted, reason, new_node, inherited, repaired); batched.");
}

}  // namespace toporoute::bindings
