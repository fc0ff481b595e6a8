#include "common.hpp"
#include "toporoute/toposort.hpp"

namespace toporoute::bindings {

namespace {

py::tuple toposort(const py::handle& adj, const py::handle& weights, const py::handle& active) {
  const ToposortInputs in = toposort_inputs(adj, weights, active);
  const ToposortOutputs out = toposort_outputs("toposort", in.args.B, in.args.N);
  run_core("toposort", [&] { return toporoute::toposort(in.args, out.view); });
  return out.arrays;
}

}  // namespace

void bind_toposort(py::module_& m) {
  m.def("toposort", &toposort, py::arg("adj"), py::arg("weights"), py::arg("active"),
        "toposort(adj, weights, active) -> (order, level, removed, is_dag); batched (B, N, N) bool input.");
}

}  // namespace toporoute::bindings
