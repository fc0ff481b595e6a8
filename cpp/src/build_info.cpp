#include "toporoute/build_info.hpp"

#if defined(TOPOROUTE_WITH_OPENMP)
#include <omp.h>
#endif

#ifndef TOPOROUTE_COMPILER
#define TOPOROUTE_COMPILER "unknown"
#endif

namespace toporoute {

std::string compiler_id() { return TOPOROUTE_COMPILER; }

bool openmp_enabled() noexcept {
#if defined(TOPOROUTE_WITH_OPENMP)
  return true;
#else
  return false;
#endif
}

int openmp_max_threads() noexcept {
#if defined(TOPOROUTE_WITH_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace toporoute
