#pragma once
/// \file status.hpp
/// Error reporting for the core. Kernels and worker threads never throw: they return a Status, which the
/// pybind11 layer converts once into a Python exception (toporoute.errors).
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace toporoute {

/// Each code maps to one class of toporoute.errors (cpp/bindings/common.cpp, raise_status).
enum class StatusCode : int {
  ok = 0,
  invalid_argument = 1,  ///< shape, dtype, range or layout problem; `arg` names the argument (InvalidArgumentError)
  non_finite = 2,        ///< NaN or infinity in a float input; `arg` names the argument (NonFiniteError)
  unsupported = 3,       ///< valid request this build or machine cannot serve: ISA, CUDA, device
                         ///< (BackendUnavailableError)
  runtime = 4,           ///< an internal failure of the core that is none of the others (CoreError)
  out_of_range = 5,      ///< a value outside its allowed range (e.g. negative weight); `arg` names it (OutOfRangeError)
  out_of_memory = 6,     ///< host or device memory could not be allocated; the message names the op and the bytes
                         ///< (OutOfMemoryError)
  device = 7,            ///< a CUDA runtime failure other than memory: launch, copy, driver (DeviceError)
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
  /// StatusCode::out_of_memory: "`op`: could not allocate `bytes` bytes (x.y GiB) for `what`". `bytes` of
  /// UINT64_MAX means the size itself overflows 64 bits.
  static Status out_of_memory(const char* op, const std::string& what, std::uint64_t bytes) {
    std::string size;
    if (bytes == UINT64_MAX) {
      size = "more than 2^64 bytes";
    } else {
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f", static_cast<double>(bytes) / double(1u << 30));
      size = std::to_string(bytes) + " bytes (" + gib + " GiB)";
    }
    return error(StatusCode::out_of_memory, "", std::string(op) + ": could not allocate " + size + " for " + what);
  }
};

}  // namespace toporoute

/// Evaluates `expr` (a Status) once and returns it from the enclosing function unless it is ok.
#define TOPOROUTE_RETURN_IF_ERROR(expr)                     \
  do {                                                      \
    ::toporoute::Status toporoute_status_ = (expr);         \
    if (!toporoute_status_.ok()) return toporoute_status_;  \
  } while (false)
