// toporoute._core: private pybind11 module. Public API lives in toporoute.ops (Python).
// Each binding validates its arguments, releases the GIL, calls the plain C++ core and converts the
// returned Status once (common.cpp).
#include <pybind11/pybind11.h>

#include <string>

#include "common.hpp"
#include "cuda_bindings.hpp"

namespace toporoute::bindings {
void bind_info(pybind11::module_& m);
void bind_results(pybind11::module_& m);
void bind_route(pybind11::module_& m);
void bind_toposort(pybind11::module_& m);
void bind_graph_stats(pybind11::module_& m);
void bind_pool(pybind11::module_& m);
void bind_qmix(pybind11::module_& m);
void bind_conductor(pybind11::module_& m);
void bind_bandit(pybind11::module_& m);
void bind_dag(pybind11::module_& m);
void bind_team_project(pybind11::module_& m);
void bind_team_schedule(pybind11::module_& m);
}  // namespace toporoute::bindings

PYBIND11_MODULE(_core, m) {
  namespace b = toporoute::bindings;
  m.doc() = "toporoute compiled core (private; use toporoute.ops)";
  b::register_error_translator();
  for (const auto bind : {b::bind_info, b::bind_results, b::bind_route, b::bind_toposort, b::bind_graph_stats,
                          b::bind_pool, b::bind_qmix, b::bind_conductor, b::bind_bandit, b::bind_dag,
                          b::bind_team_project, b::bind_team_schedule, b::bind_cuda, b::bind_cuda_pool,
                          b::bind_cuda_stats}) {
    bind(m);
  }
  m.def("_raise_for_test", &b::raise_for_test, pybind11::arg("kind"),
        "_raise_for_test(kind): fails the way `kind` names, through the module's one error-conversion point (for "
        "tests of the error classes): a Status ('status_runtime', 'status_out_of_memory', 'status_device'), a C++ "
        "exception reaching the translator ('bad_alloc', 'length_error', 'runtime_error', 'cast_error', "
        "'unknown') or escaping a core call ('core_bad_alloc', 'core_runtime_error').");
}
