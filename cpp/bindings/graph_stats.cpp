// graph_stats: edge counts, density, degrees, reciprocity and Jaccard distance per graph.
#include "graph_stats_args.hpp"

namespace toporoute::bindings {

void add_graph_stats_outputs(NewOutputs& out, const GraphStatsArgs& a, bool has_prev, GraphStatsOut& o) {
  const std::int64_t B = a.B, N = a.N;
  out.add<std::int64_t>({B}, &o.edges);
  out.add<double>({B}, &o.density);
  out.add<std::int32_t>({B, N}, &o.in_degree);
  out.add<std::int32_t>({B, N}, &o.out_degree);
  out.add<double>({B}, &o.reciprocity);
  if (has_prev) {
    out.add<double>({B}, &o.jaccard);
  } else {
    out.add_none();
  }
}

namespace {

py::tuple graph_stats(const py::handle& adj, const py::handle& active, const py::handle& prev) {
  GraphStatsArgs a;
  Dims dims;
  dims.view(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  const bool has_prev = dims.optional_view(prev, "prev", "BNN", a.prev, a.p_sb, a.p_sr, a.p_sc).present();
  dims.optional_view(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  set_graph_sizes(a, dims);
  GraphStatsOut o;
  NewOutputs out("graph_stats");
  add_graph_stats_outputs(out, a, has_prev, o);
  return out.run([&] { return toporoute::graph_stats(a, o); });
}

}  // namespace

void bind_graph_stats(py::module_& m) {
  m.def("graph_stats", &graph_stats, py::arg("adj"), py::arg("active"), py::arg("prev"),
        "graph_stats(adj, active, prev) -> (edges, density, in_degree, out_degree, reciprocity, jaccard).");
}

}  // namespace toporoute::bindings
