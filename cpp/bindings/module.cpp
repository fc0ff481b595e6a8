// toporoute._core: private pybind11 module. Public API lives in toporoute.ops (Python).
// Each binding validates its arguments, releases the GIL, calls the plain C++ core and converts the
// returned Status once (common.cpp).
#include <pybind11/pybind11.h>

#include <string>

#include "common.hpp"
#include "cuda_bindings.hpp"

// The binding families, in registration order: each cpp/bindings/<family>.cpp defines bind_<family>(m) (the
// CUDA ones in cuda_bindings.hpp; without CUDA they register the entries that say so). One list, declared and
// called from here.
#define TOPOROUTE_BINDINGS(X)                                                                                  \
  X(info) X(results) X(route) X(toposort) X(graph_stats) X(pool) X(qmix) X(conductor) X(bandit) X(dag)          \
      X(team_project) X(team_schedule)
#define TOPOROUTE_CUDA_BINDINGS(X) X(cuda) X(cuda_pool) X(cuda_stats)

namespace toporoute::bindings {
#define TOPOROUTE_DECLARE(family) void bind_##family(pybind11::module_& m);
TOPOROUTE_BINDINGS(TOPOROUTE_DECLARE)
#undef TOPOROUTE_DECLARE
}  // namespace toporoute::bindings

PYBIND11_MODULE(_core, m) {
  namespace b = toporoute::bindings;
  m.doc() = "toporoute compiled core (private; use toporoute.ops)";
  b::register_error_translator();
#define TOPOROUTE_REGISTER(family) b::bind_##family,
  for (const auto bind : {TOPOROUTE_BINDINGS(TOPOROUTE_REGISTER) TOPOROUTE_CUDA_BINDINGS(TOPOROUTE_REGISTER)}) {
    bind(m);
  }
#undef TOPOROUTE_REGISTER
  m.def("_raise_for_test", &b::raise_for_test, pybind11::arg("kind"),
        "_raise_for_test(kind): fails the way `kind` names, through the module's one error-conversion point (for "
        "tests of the error classes): a Status ('status_runtime', 'status_out_of_memory', 'status_device'), a C++ "
        "exception reaching the translator ('bad_alloc', 'length_error', 'runtime_error', 'cast_error', "
        "'unknown') or escaping a core call ('core_bad_alloc', 'core_runtime_error').");
}
