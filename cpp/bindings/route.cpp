#include <string>

#include "common.hpp"
#include "toporoute/route.hpp"

namespace toporoute::bindings {

namespace {

// Allocates the outputs and runs the kernel without the GIL.
py::tuple run_route(const char* op, const RouteArgs& a, Isa isa) {
  const RouteOutputs out = route_outputs(op, a.B, a.N, a.K);
  run_core(op, [&] { return toporoute::route(a, out.view, isa); });
  return out.arrays;
}

py::tuple route(const py::handle& q, const py::handle& k, const py::handle& active, double tau, std::int64_t k_in,
                const std::string& isa) {
  const RouteInputs in = route_inputs(q, k, active, tau, k_in);
  require_unit_last_stride(in.q, "q");
  require_unit_last_stride(in.k, "k");
  Isa resolved;
  raise_status(resolve_isa(isa, &resolved));
  return run_route("route", in.args, resolved);
}

}  // namespace

void bind_route(py::module_& m) {
  m.def("route", &route, py::arg("q"), py::arg("k"), py::arg("active"), py::arg("tau"), py::arg("k_in"),
        py::arg("isa") = "",
        "route(q, k, active, tau, k_in, isa='') -> (scores, adjacency, inbox, in_degree); batched (B, N, D) "
        "float32 inputs, never copied.");
}

}  // namespace toporoute::bindings
