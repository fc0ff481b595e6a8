#pragma once
/// \file status.hpp
/// Error reporting for the core. Kernels and worker threads never throw: they return a Status, which the
/// pybind11 layer converts once into a Python exception (toporoute.errors).
#include <string>
#include <utility>

namespace toporoute {

enum class StatusCode : int {
  ok = 0,
  invalid_argument = 1,  ///< shape, dtype, range or layout problem; `arg` names the argument
  non_finite = 2,        ///< NaN or infinity in a float input; `arg` names the argument
  unsupported = 3,       ///< valid request this build or machine cannot serve (ISA, CUDA, device)
  runtime = 4,           ///< anything else (CUDA launch failure, allocation failure)
  out_of_range = 5,      ///< a value outside its allowed range (e.g. negative weight); `arg` names it
};

/// Result of a core call. Cheap to copy when ok (empty strings).
struct Status {
  StatusCode code = StatusCode::ok;
  std::string arg;      ///< the offending argument, e.g. "q"; may be empty
  std::string message;  ///< full human-readable message

  bool ok() const noexcept { return code == StatusCode::ok; }
  static Status success() { return {}; }
  static Status error(StatusCode c, std::string a, std::string m) {
    Status s;
    s.code = c;
    s.arg = std::move(a);
    s.message = std::move(m);
    return s;
  }
};

}  // namespace toporoute
