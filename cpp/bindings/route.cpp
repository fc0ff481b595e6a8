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

py::tuple route_indexed(const py::handle& table, const py::handle& q_rows, const py::handle& k_rows,
                        const py::handle& active, double tau, std::int64_t k_in, const std::string& isa) {
  const IndexedRouteInputs in = indexed_route_inputs(table, q_rows, k_rows, active, tau, k_in);
  Isa resolved;
  raise_status(resolve_isa(isa, &resolved));
  return run_route("route_indexed", in.args, resolved);
}

}  // namespace

void bind_route(py::module_& m) {
  m.def("route", &route, py::arg("q"), py::arg("k"), py::arg("active"), py::arg("tau"), py::arg("k_in"),
        py::arg("isa") = "",
        "route(q, k, active, tau, k_in, isa='') -> (scores, adjacency, inbox, in_degree); batched (B, N, D) "
        "float32 inputs, never copied.");
  m.def("route_indexed", &route_indexed, py::arg("table"), py::arg("q_rows"), py::arg("k_rows"), py::arg("active"),
        py::arg("tau"), py::arg("k_in"), py::arg("isa") = "",
        "route_indexed(table, q_rows, k_rows, active, tau, k_in, isa='') -> (scores, adjacency, inbox, in_degree); "
        "route over rows of an (M, D) float32 table named by (B, N) int32/int64 indices (-1: inactive agent).");
}

}  // namespace toporoute::bindings
