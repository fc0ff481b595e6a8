// toporoute._core: private pybind11 module. Public API lives in toporoute.ops (Python).
// Each binding validates its arguments, releases the GIL, calls the plain C++ core and converts the
// returned Status once (common.cpp).
#include <pybind11/pybind11.h>

#include "cuda_bindings.hpp"

namespace toporoute::bindings {
void bind_info(pybind11::module_& m);
void bind_route(pybind11::module_& m);
void bind_toposort(pybind11::module_& m);
void bind_stats(pybind11::module_& m);
void bind_pool(pybind11::module_& m);
void bind_qmix(pybind11::module_& m);
void bind_conductor(pybind11::module_& m);
}  // namespace toporoute::bindings

PYBIND11_MODULE(_core, m) {
  m.doc() = "toporoute compiled core (private; use toporoute.ops)";
  toporoute::bindings::bind_info(m);
  toporoute::bindings::bind_route(m);
  toporoute::bindings::bind_toposort(m);
  toporoute::bindings::bind_stats(m);
  toporoute::bindings::bind_pool(m);
  toporoute::bindings::bind_qmix(m);
  toporoute::bindings::bind_conductor(m);
  toporoute::bindings::bind_cuda(m);
}
