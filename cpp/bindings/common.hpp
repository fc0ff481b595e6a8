#pragma once
// Shared glue for the pybind11 module: the one place where a core Status becomes a Python exception, and
// zero-copy extraction of numpy views (dtype, ndim, shape and element strides checked, never converted).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "toporoute/status.hpp"

namespace toporoute::bindings {

namespace py = pybind11;

/// Raises the toporoute.errors exception matching `s` (no-op when ok).
void raise_status(const Status& s);
/// Raises toporoute.errors.<cls>(message, arg).
[[noreturn]] void raise_error(const char* cls, const std::string& arg, const std::string& message);

/// A numpy array checked for dtype and rank, with element strides.
struct HostView {
  py::array array;  // keeps the buffer alive
  void* data = nullptr;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
};

/// Checks that `obj` is a numpy array of dtype T (exactly; bool for std::uint8_t when `is_bool`) and rank
/// `ndim`; never copies. Element strides must be whole multiples of the item size.
template <typename T>
HostView host_view(const py::handle& obj, const char* name, int ndim, bool is_bool = false);

/// The same for an optional argument: returns an empty view for None.
template <typename T>
HostView optional_host_view(const py::handle& obj, const char* name, int ndim, bool is_bool = false) {
  if (obj.is_none()) return {};
  return host_view<T>(obj, name, ndim, is_bool);
}

/// Raises ShapeError unless view.shape == expected.
void expect_shape(const HostView& v, const char* name, const std::vector<std::int64_t>& expected);

/// A new C-contiguous numpy array of the given shape.
template <typename T>
py::array_t<T> empty_array(const std::vector<std::int64_t>& shape) {
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  return py::array_t<T>(s);
}

/// A new C-contiguous numpy bool array of the given shape.
py::array empty_bool_array(const std::vector<std::int64_t>& shape);

std::string shape_str(const std::vector<std::int64_t>& shape);

}  // namespace toporoute::bindings
