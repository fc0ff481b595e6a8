#pragma once
/// \file build_info.hpp
/// How the core was built (compiler, OpenMP), independent of Python.
#include <string>

namespace toporoute {

std::string compiler_id();
bool openmp_enabled() noexcept;
int openmp_max_threads() noexcept;

}  // namespace toporoute
