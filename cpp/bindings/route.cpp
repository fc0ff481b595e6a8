#include <algorithm>
#include <string>

#include "common.hpp"
#include "toporoute/ops.hpp"

namespace toporoute::bindings {

namespace {

void require_unit_last_stride(const HostView& v, const char* name) {
  const bool empty = std::find(v.shape.begin(), v.shape.end(), 0) != v.shape.end();
  if (!empty && v.shape.back() > 1 && v.strides.back() != 1) {
    raise_error("DTypeError", name,
                std::string(name) + " must be contiguous along its last axis (stride 1); got stride " +
                    std::to_string(v.strides.back()) + " elements: pass numpy.ascontiguousarray(" + name + ")");
  }
}

py::tuple route(const py::handle& q, const py::handle& k, const py::handle& active, double tau, std::int64_t k_in,
                const std::string& isa) {
  const HostView qv = host_view<float>(q, "q", 3);
  const HostView kv = host_view<float>(k, "k", 3);
  expect_shape(kv, "k", qv.shape);
  require_unit_last_stride(qv, "q");
  require_unit_last_stride(kv, "k");
  const std::int64_t B = qv.shape[0], N = qv.shape[1];
  const HostView av = optional_host_view<std::uint8_t>(active, "active", 2, true);
  if (av.present()) expect_shape(av, "active", {B, N});
  Isa resolved;
  raise_status(resolve_isa(isa, &resolved));

  const RouteArgs a = route_args(qv, kv, av, tau, k_in);

  auto scores = empty_array<float>({B, N, N});
  py::array adjacency = empty_bool_array({B, N, N});
  auto inbox = empty_array<std::int32_t>({B, N, a.K});
  auto in_degree = empty_array<std::int32_t>({B, N});
  RouteOut o;
  o.scores = scores.mutable_data();
  o.adjacency = static_cast<std::uint8_t*>(adjacency.mutable_data());
  o.inbox = inbox.mutable_data();
  o.in_degree = in_degree.mutable_data();
  Status s;
  {
    py::gil_scoped_release nogil;
    s = toporoute::route(a, o, resolved);
  }
  raise_status(s);
  return py::make_tuple(scores, adjacency, inbox, in_degree);
}

}  // namespace

void bind_route(py::module_& m) {
  m.def("route", &route, py::arg("q"), py::arg("k"), py::arg("active"), py::arg("tau"), py::arg("k_in"),
        py::arg("isa") = "",
        "route(q, k, active, tau, k_in, isa='') -> (scores, adjacency, inbox, in_degree); batched (B, N, D) "
        "float32 inputs, never copied.");
}

}  // namespace toporoute::bindings
