// graph_stats and conductor_density: the two small elementwise/per-graph ops.
#include "common.hpp"
#include "toporoute/ops.hpp"

namespace toporoute::bindings {

namespace {

py::tuple graph_stats(const py::handle& adj, const py::handle& active, const py::handle& prev) {
  const auto gv = fast_view<std::uint8_t, 3>(adj, "adj", true);
  const std::int64_t B = gv.shape[0], N = gv.shape[1];
  expect_dims(gv, "adj", {B, N, N});
  const auto pv = optional_fast_view<std::uint8_t, 3>(prev, "prev", true);
  if (pv.present()) expect_dims(pv, "prev", {B, N, N});
  const auto av = optional_fast_view<std::uint8_t, 2>(active, "active", true);
  if (av.present()) expect_dims(av, "active", {B, N});

  GraphStatsArgs a;
  a.adj = static_cast<const std::uint8_t*>(gv.data);
  a.B = B;
  a.N = N;
  a.adj_sb = gv.strides[0];
  a.adj_sr = gv.strides[1];
  a.adj_sc = gv.strides[2];
  if (pv.present()) {
    a.prev = static_cast<const std::uint8_t*>(pv.data);
    a.p_sb = pv.strides[0];
    a.p_sr = pv.strides[1];
    a.p_sc = pv.strides[2];
  }
  if (av.present()) {
    a.active = static_cast<const std::uint8_t*>(av.data);
    a.a_sb = av.strides[0];
    a.a_sn = av.strides[1];
  }
  NewOutputs out("graph_stats");
  out.add<std::int64_t>({B});
  out.add<double>({B});
  out.add<std::int32_t>({B, N});
  out.add<std::int32_t>({B, N});
  out.add<double>({B});
  if (pv.present()) {
    out.add<double>({B});
  } else {
    out.add_none();
  }
  py::tuple arrays = out.allocate();
  const GraphStatsOut o{out.data<std::int64_t>(0), out.data<double>(1),      out.data<std::int32_t>(2),
                        out.data<std::int32_t>(3), out.data<double>(4), pv.present() ? out.data<double>(5) : nullptr};
  run_core("graph_stats", [&] { return toporoute::graph_stats(a, o); });
  return arrays;
}

py::tuple conductor_density(const py::handle& nodes, const py::handle& edges, const py::handle& steps,
                            const py::handle& n_max) {
  const HostView nv = host_view<std::int64_t>(nodes, "nodes", 1);
  const std::int64_t n = nv.shape[0];
  const HostView ev = host_view<std::int64_t>(edges, "edges", 1);
  const HostView sv = host_view<std::int64_t>(steps, "steps", 1);
  const HostView cv = host_view<std::int64_t>(n_max, "n_max", 1);
  for (const auto* v : {&nv, &ev, &sv, &cv}) {
    if (v->shape[0] != n || (n > 1 && v->strides[0] != 1)) {
      raise_error("ShapeError", "nodes", "nodes, edges, steps and n_max must be contiguous 1-D arrays of one length");
    }
  }
  DensityArgs a;
  a.nodes = static_cast<const std::int64_t*>(nv.data);
  a.edges = static_cast<const std::int64_t*>(ev.data);
  a.steps = static_cast<const std::int64_t*>(sv.data);
  a.n_max = static_cast<const std::int64_t*>(cv.data);
  a.n = n;
  NewOutputs out("conductor_density");
  for (int i = 0; i < 5; ++i) out.add<double>({n});
  py::tuple arrays = out.allocate();
  const DensityOut o{out.data<double>(0), out.data<double>(1), out.data<double>(2), out.data<double>(3),
                     out.data<double>(4)};
  run_core("conductor_density", [&] { return toporoute::conductor_density(a, o); });
  return arrays;
}

}  // namespace

void bind_stats(py::module_& m) {
  m.def("graph_stats", &graph_stats, py::arg("adj"), py::arg("active"), py::arg("prev"),
        "graph_stats(adj, active, prev) -> (edges, density, in_degree, out_degree, reciprocity, jaccard).");
  m.def("conductor_density", &conductor_density, py::arg("nodes"), py::arg("edges"), py::arg("steps"),
        py::arg("n_max"), "conductor_density(nodes, edges, steps, n_max) -> (s_node, s_edge, s_depth, s_complex, reward).");
}

}  // namespace toporoute::bindings
