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
  const RouteInputs in = route_inputs(q, k, active);
  require_unit_last_stride(in.q, "q");
  require_unit_last_stride(in.k, "k");
  Isa resolved;
  raise_status(resolve_isa(isa, &resolved));
  const RouteArgs a = route_args(in.q, in.k, in.active, tau, k_in);
  const RouteOutputs out = route_outputs(a.B, a.N, a.K);
  Status s;
  {
    py::gil_scoped_release nogil;
    s = toporoute::route(a, out.view, resolved);
  }
  raise_status(s);
  return out.arrays;
}

}  // namespace

void bind_route(py::module_& m) {
  m.def("route", &route, py::arg("q"), py::arg("k"), py::arg("active"), py::arg("tau"), py::arg("k_in"),
        py::arg("isa") = "",
        "route(q, k, active, tau, k_in, isa='') -> (scores, adjacency, inbox, in_degree); batched (B, N, D) "
        "float32 inputs, never copied.");
}

}  // namespace toporoute::bindings
