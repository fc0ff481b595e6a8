#include "common.hpp"
#include "toporoute/ops.hpp"

namespace toporoute::bindings {

namespace {

py::tuple toposort(const py::handle& adj, const py::handle& weights, const py::handle& active) {
  const HostView gv = host_view<std::uint8_t>(adj, "adj", 3, true);
  const std::int64_t B = gv.shape[0], N = gv.shape[1];
  expect_shape(gv, "adj", {B, N, N});
  const HostView wv = optional_host_view<float>(weights, "weights", 3);
  if (wv.present()) expect_shape(wv, "weights", gv.shape);
  const HostView av = optional_host_view<std::uint8_t>(active, "active", 2, true);
  if (av.present()) expect_shape(av, "active", {B, N});

  const ToposortArgs a = toposort_args(gv, wv, av);
  auto order = empty_array<std::int32_t>({B, N});
  auto level = empty_array<std::int32_t>({B, N});
  py::array removed = empty_bool_array({B, N, N});
  py::array is_dag = empty_bool_array({B});
  ToposortOut o;
  o.order = order.mutable_data();
  o.level = level.mutable_data();
  o.removed = static_cast<std::uint8_t*>(removed.mutable_data());
  o.is_dag = static_cast<std::uint8_t*>(is_dag.mutable_data());
  Status s;
  {
    py::gil_scoped_release nogil;
    s = toporoute::toposort(a, o);
  }
  raise_status(s);
  return py::make_tuple(order, level, removed, is_dag);
}

}  // namespace

void bind_toposort(py::module_& m) {
  m.def("toposort", &toposort, py::arg("adj"), py::arg("weights"), py::arg("active"),
        "toposort(adj, weights, active) -> (order, level, removed, is_dag); batched (B, N, N) bool input.");
}

}  // namespace toporoute::bindings
