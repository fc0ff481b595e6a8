#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "cuda_bindings.hpp"
#include "toporoute/build_info.hpp"
#include "toporoute/dispatch.hpp"

#ifndef TOPOROUTE_VERSION
#define TOPOROUTE_VERSION "unknown"
#endif

namespace toporoute::bindings {

namespace py = pybind11;

namespace {

py::dict build_info() {
  py::dict d;
  d["core_version"] = TOPOROUTE_VERSION;
  d["compiler"] = compiler_id();
  py::dict omp;
  omp["enabled"] = openmp_enabled();
  omp["max_threads"] = openmp_max_threads();
  d["openmp"] = omp;
  std::vector<std::string> compiled, supported;
  for (Isa isa : compiled_isas()) {
    compiled.emplace_back(isa_name(isa));
    if (isa_supported(isa)) supported.emplace_back(isa_name(isa));
  }
  py::dict simd;
  simd["compiled"] = compiled;
  simd["supported"] = supported;
  Isa active;
  const Status s = default_isa(&active);
  simd["active"] = s.ok() ? py::object(py::str(isa_name(active))) : py::object(py::none());
  if (!s.ok()) simd["error"] = s.message;
  d["simd"] = simd;
  d["cuda"] = cuda_info();
  return d;
}

}  // namespace

void bind_info(py::module_& m) {
  m.def("build_info", &build_info, "How the core was built: compiler, OpenMP, SIMD levels, CUDA.");
}

}  // namespace toporoute::bindings
