// graph_stats and conductor_density: the two small elementwise/per-graph ops.
#include "common.hpp"
#include "toporoute/ops.hpp"

namespace toporoute::bindings {

namespace {

py::tuple graph_stats(const py::handle& adj, const py::handle& active, const py::handle& prev) {
  const HostView gv = host_view<std::uint8_t>(adj, "adj", 3, true);
  const std::int64_t B = gv.shape[0], N = gv.shape[1];
  expect_shape(gv, "adj", {B, N, N});
  const HostView pv = optional_host_view<std::uint8_t>(prev, "prev", 3, true);
  if (pv.present()) expect_shape(pv, "prev", gv.shape);
  const HostView av = optional_host_view<std::uint8_t>(active, "active", 2, true);
  if (av.present()) expect_shape(av, "active", {B, N});

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
  auto edges = empty_array<std::int64_t>({B});
  auto density = empty_array<double>({B});
  auto in_degree = empty_array<std::int32_t>({B, N});
  auto out_degree = empty_array<std::int32_t>({B, N});
  auto reciprocity = empty_array<double>({B});
  py::object jaccard = py::none();
  GraphStatsOut o;
  o.edges = edges.mutable_data();
  o.density = density.mutable_data();
  o.in_degree = in_degree.mutable_data();
  o.out_degree = out_degree.mutable_data();
  o.reciprocity = reciprocity.mutable_data();
  if (pv.present()) {
    auto j = empty_array<double>({B});
    o.jaccard = j.mutable_data();
    jaccard = j;
  }
  Status s;
  {
    py::gil_scoped_release nogil;
    s = toporoute::graph_stats(a, o);
  }
  raise_status(s);
  return py::make_tuple(edges, density, in_degree, out_degree, reciprocity, jaccard);
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
  auto s_node = empty_array<double>({n}), s_edge = empty_array<double>({n}), s_depth = empty_array<double>({n}),
       s_complex = empty_array<double>({n}), reward = empty_array<double>({n});
  DensityOut o{s_node.mutable_data(), s_edge.mutable_data(), s_depth.mutable_data(), s_complex.mutable_data(),
               reward.mutable_data()};
  Status s;
  {
    py::gil_scoped_release nogil;
    s = toporoute::conductor_density(a, o);
  }
  raise_status(s);
  return py::make_tuple(s_node, s_edge, s_depth, s_complex, reward);
}

}  // namespace

void bind_stats(py::module_& m) {
  m.def("graph_stats", &graph_stats, py::arg("adj"), py::arg("active"), py::arg("prev"),
        "graph_stats(adj, active, prev) -> (edges, density, in_degree, out_degree, reciprocity, jaccard).");
  m.def("conductor_density", &conductor_density, py::arg("nodes"), py::arg("edges"), py::arg("steps"),
        py::arg("n_max"), "conductor_density(nodes, edges, steps, n_max) -> (s_node, s_edge, s_depth, s_complex, reward).");
}

}  // namespace toporoute::bindings
