// dag_edit and dag_repair: the HiVA DAG evolution ops (cpp/include/toporoute/dag.hpp).
#include <string>

#include "common.hpp"
#include "toporoute/dag.hpp"

namespace toporoute::bindings {

namespace {

DagGraphs graphs(const FastView<3>& adj, const FastView<2>& alive, std::int64_t source, std::int64_t sink,
                 std::int64_t max_out) {
  DagGraphs g;
  g.adj = static_cast<const std::uint8_t*>(adj.data);
  g.alive = static_cast<const std::uint8_t*>(alive.data);
  g.B = adj.shape[0];
  g.N = adj.shape[1];
  g.adj_sb = adj.strides[0];
  g.adj_sr = adj.strides[1];
  g.adj_sc = adj.strides[2];
  g.a_sb = alive.strides[0];
  g.a_sn = alive.strides[1];
  g.source = source;
  g.sink = sink;
  g.max_out = max_out;
  return g;
}

// adj (B, N, N) bool and alive (B, N) bool.
std::pair<FastView<3>, FastView<2>> graph_views(const py::handle& adj, const py::handle& alive) {
  const auto av = fast_view<std::uint8_t, 3>(adj, "adj", true);
  expect_dims(av, "adj", {av.shape[0], av.shape[1], av.shape[1]});
  const auto lv = fast_view<std::uint8_t, 2>(alive, "alive", true);
  expect_dims(lv, "alive", {av.shape[0], av.shape[1]});
  return {av, lv};
}

py::tuple dag_edit(const py::handle& adj, const py::handle& alive, const py::handle& edits, std::int64_t source,
                   std::int64_t sink, std::int64_t max_out) {
  const auto [av, lv] = graph_views(adj, alive);
  const auto ev = fast_view<std::int32_t, 3>(edits, "edits");
  const std::int64_t B = av.shape[0], N = av.shape[1], E = ev.shape[1];
  expect_dims(ev, "edits", {B, E, 3});
  DagEditArgs a;
  a.g = graphs(av, lv, source, sink, max_out);
  a.edits = static_cast<const std::int32_t*>(ev.data);
  a.E = E;
  a.e_sb = ev.strides[0];
  a.e_se = ev.strides[1];
  a.e_sc = ev.strides[2];
  NewOutputs out("dag_edit");
  out.add<bool>({B, N, N});
  out.add<bool>({B, N});
  out.add<bool>({B, E});
  out.add<std::int8_t>({B, E});
  out.add<std::int32_t>({B, E});
  py::tuple arrays = out.allocate();
  const DagEditOut o{out.data<std::uint8_t>(0), out.data<std::uint8_t>(1), out.data<std::uint8_t>(2),
                     out.data<std::int8_t>(3), out.data<std::int32_t>(4)};
  run_core("dag_edit", [&] { return toporoute::dag_edit(a, o); });
  return arrays;
}

py::tuple dag_repair(const py::handle& adj, const py::handle& alive, const py::handle& edge_alpha,
                     const py::handle& edge_beta, std::int64_t source, std::int64_t sink, double threshold,
                     double min_obs, double prior, std::int64_t max_out) {
  const auto [av, lv] = graph_views(adj, alive);
  const std::int64_t B = av.shape[0], N = av.shape[1];
  const auto ea = optional_fast_view<float, 3>(edge_alpha, "edge_alpha");
  const auto eb = optional_fast_view<float, 3>(edge_beta, "edge_beta");
  if (ea.present() != eb.present()) {
    const char* missing = ea.present() ? "edge_beta" : "edge_alpha";
    raise_error("InvalidArgumentError", missing,
                std::string("edge_alpha and edge_beta must be given together; got ") + missing + "=None");
  }
  DagRepairArgs a;
  a.g = graphs(av, lv, source, sink, max_out);
  if (ea.present()) {
    expect_dims(ea, "edge_alpha", {B, N, N});
    expect_dims(eb, "edge_beta", {B, N, N});
    a.edge_alpha = static_cast<const float*>(ea.data);
    a.edge_beta = static_cast<const float*>(eb.data);
    a.ea_sb = ea.strides[0];
    a.ea_sr = ea.strides[1];
    a.ea_sc = ea.strides[2];
    a.eb_sb = eb.strides[0];
    a.eb_sr = eb.strides[1];
    a.eb_sc = eb.strides[2];
  }
  a.threshold = threshold;
  a.min_obs = min_obs;
  a.prior = prior;
  NewOutputs out("dag_repair");
  out.add<bool>({B, N, N});
  out.add<bool>({B, N});
  out.add<bool>({B, N});
  out.add<bool>({B, N, N});
  out.add<bool>({B, N, N});
  py::tuple arrays = out.allocate();
  const DagRepairOut o{out.data<std::uint8_t>(0), out.data<std::uint8_t>(1), out.data<std::uint8_t>(2),
                       out.data<std::uint8_t>(3), out.data<std::uint8_t>(4)};
  run_core("dag_repair", [&] { return toporoute::dag_repair(a, o); });
  return arrays;
}

}  // namespace

void bind_dag(py::module_& m) {
  m.def("dag_edit", &dag_edit, py::arg("adj"), py::arg("alive"), py::arg("edits"), py::arg("source"),
        py::arg("sink"), py::arg("max_out"),
        "dag_edit(adj, alive, edits, source, sink, max_out) -> (adj, alive, accepted, reason, new_node); batched.");
  m.def("dag_repair", &dag_repair, py::arg("adj"), py::arg("alive"), py::arg("edge_alpha"), py::arg("edge_beta"),
        py::arg("source"), py::arg("sink"), py::arg("threshold"), py::arg("min_obs"), py::arg("prior"),
        py::arg("max_out"),
        "dag_repair(adj, alive, edge_alpha, edge_beta, source, sink, threshold, min_obs, prior, max_out) -> "
        "(adj, alive, pruned_nodes, pruned_edges, added_edges); batched.");
}

}  // namespace toporoute::bindings
