// dag_edit and dag_repair: the HiVA DAG evolution ops (cpp/include/toporoute/dag.hpp).
#include <string>

#include "common.hpp"
#include "toporoute/dag.hpp"

namespace toporoute::bindings {

namespace {

DagGraphs dag_graphs(Dims& dims, const py::handle& adj, const py::handle& alive, std::int64_t source,
                     std::int64_t sink, std::int64_t max_out) {
  DagGraphs g;
  static_cast<GraphBatch&>(g) = graph_batch(dims, adj, alive);
  g.source = source;
  g.sink = sink;
  g.max_out = max_out;
  return g;
}

py::tuple dag_edit(const py::handle& adj, const py::handle& alive, const py::handle& edits, std::int64_t source,
                   std::int64_t sink, std::int64_t max_out) {
  DagEditArgs a;
  Dims dims;
  a.g = dag_graphs(dims, adj, alive, source, sink, max_out);
  dims.view(edits, "edits", "BE3", a.edits, a.e_sb, a.e_se, a.e_sc);
  a.E = dims['E'];
  const std::int64_t B = a.g.B, N = a.g.N, E = a.E;
  DagEditOut o;
  NewOutputs out("dag_edit");
  out.add<bool>({B, N, N}, &o.adj);
  out.add<bool>({B, N}, &o.alive);
  out.add<bool>({B, E}, &o.accepted);
  out.add<std::int8_t>({B, E}, &o.reason);
  out.add<std::int32_t>({B, E}, &o.new_node);
  return out.run([&] { return toporoute::dag_edit(a, o); });
}

py::tuple dag_repair(const py::handle& adj, const py::handle& alive, const py::handle& edge_alpha,
                     const py::handle& edge_beta, std::int64_t source, std::int64_t sink, double threshold,
                     double min_obs, double prior, std::int64_t max_out) {
  DagRepairArgs a;
  Dims dims;
  a.g = dag_graphs(dims, adj, alive, source, sink, max_out);
  const auto ea = optional_fast_view<float, 3>(edge_alpha, "edge_alpha");
  const auto eb = optional_fast_view<float, 3>(edge_beta, "edge_beta");
  if (ea.present() != eb.present()) {
    const char* missing = ea.present() ? "edge_beta" : "edge_alpha";
    raise_error("InvalidArgumentError", missing,
                std::string("edge_alpha and edge_beta must be given together; got ") + missing + "=None");
  }
  dims.fill(ea, "edge_alpha", "BNN", a.edge_alpha, a.ea_sb, a.ea_sr, a.ea_sc);
  dims.fill(eb, "edge_beta", "BNN", a.edge_beta, a.eb_sb, a.eb_sr, a.eb_sc);
  a.threshold = threshold;
  a.min_obs = min_obs;
  a.prior = prior;
  const std::int64_t B = a.g.B, N = a.g.N;
  DagRepairOut o;
  NewOutputs out("dag_repair");
  out.add<bool>({B, N, N}, &o.adj);
  out.add<bool>({B, N}, &o.alive);
  out.add<bool>({B, N}, &o.pruned_nodes);
  out.add<bool>({B, N, N}, &o.pruned_edges);
  out.add<bool>({B, N, N}, &o.added_edges);
  return out.run([&] { return toporoute::dag_repair(a, o); });
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
