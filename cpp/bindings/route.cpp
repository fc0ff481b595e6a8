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

py::object nearest(const py::handle& table, const py::handle& queries, std::int64_t k, const py::handle& keep) {
  NearestArgs a;
  Dims dims;
  dims.view(table, "table", "MD", a.table.data, a.table.s0, a.table.s1);
  dims.view(queries, "queries", "BD", a.queries.data, a.queries.s0, a.queries.s1);
  dims.optional_view(keep, "keep", "BM", a.keep.data, a.keep.s0, a.keep.s1);
  a.B = dims['B'];
  a.M = dims['M'];
  a.D = dims['D'];
  a.k = k;
  std::int64_t* rows = nullptr;
  NewOutputs out("nearest");
  out.add<std::int64_t>({a.B, std::max<std::int64_t>(k, 0)}, &rows);
  py::tuple arrays = out.allocate();
  run_core("nearest", [&] { return toporoute::nearest(a, rows); });
  return arrays[0];
}

}  // namespace

void bind_route(py::module_& m) {
  m.def("route", &route, py::arg("q"), py::arg("k"), py::arg("active"), py::arg("tau"), py::arg("k_in"),
        py::arg("isa") = "",
        "route(q, k, active, tau, k_in, isa='') -> (scores, adjacency, inbox, in_degree); batched (B, N, D) "
        "float32 inputs, never copied.");
  m.def("nearest", &nearest, py::arg("table"), py::arg("queries"), py::arg("k"), py::arg("keep"),
        "nearest(table, queries, k, keep) -> (B, k) int64 rows; batched (B, D) float32 queries, never copied.");
}

}  // namespace toporoute::bindings
