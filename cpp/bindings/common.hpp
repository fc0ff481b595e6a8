#pragma once
// Shared glue for the pybind11 module: the one place where a core Status becomes a Python exception, and
// zero-copy extraction of numpy views (dtype, ndim, shape and element strides checked, never converted).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "toporoute/status.hpp"
#include "toporoute/views.hpp"

namespace toporoute::bindings {

namespace py = pybind11;

/// Raises the toporoute.errors exception matching `s` (no-op when ok).
void raise_status(const Status& s);
/// Raises toporoute.errors.<cls>(message, arg).
[[noreturn]] void raise_error(const char* cls, const std::string& arg, const std::string& message);

/// A numpy array checked for dtype and rank, with element strides; default-constructed = absent argument.
struct HostView {
  py::object array;  // keeps the buffer alive
  void* data = nullptr;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  bool present() const { return static_cast<bool>(array); }
};

/// Checks that `obj` is a numpy array of dtype T (exactly; bool for std::uint8_t when `is_bool`) and rank
/// `ndim`; never copies. Element strides must be whole multiples of the item size. Messages start with
/// `name`; the exception's `arg` is `arg` when given (e.g. "pool" for "pool[1] hidden"), else `name`.
template <typename T>
HostView host_view(const py::handle& obj, const char* name, int ndim, bool is_bool = false,
                   const char* arg = nullptr);

/// The same for an optional argument: returns an empty view for None.
template <typename T>
HostView optional_host_view(const py::handle& obj, const char* name, int ndim, bool is_bool = false) {
  if (obj.is_none()) return {};
  return host_view<T>(obj, name, ndim, is_bool);
}

/// An integer array of dtype int32 or int64 (or bool when `allow_bool`), rank `ndim`, never copied.
struct IntHostView {
  HostView host;
  IntType type = IntType::i64;
  /// The core's view; a 1-D array puts its stride in s1.
  IntView view() const;
};
IntHostView int_host_view(const py::handle& obj, const char* name, int ndim, bool allow_bool,
                          const char* arg = nullptr);

/// Raises ShapeError: "`name` must have shape `expected`; got `got`".
[[noreturn]] void raise_shape(const char* name, const std::vector<std::int64_t>& expected,
                              const std::vector<std::int64_t>& got, const char* arg = nullptr);

/// A fixed-rank view for per-call hot paths (microsecond ops): no allocation and no reference taken (the
/// call's arguments keep the array alive). Same checks and messages as host_view, which it falls back to for
/// anything but a native-order array of exactly dtype T and rank ND. `given` is false for None when optional.
template <int ND>
struct FastView {
  void* data = nullptr;
  std::int64_t shape[ND] = {};
  std::int64_t strides[ND] = {};  // in elements
  bool given = false;
  bool present() const { return given; }
};

template <typename T, int ND>
FastView<ND> fast_view(const py::handle& obj, const char* name, bool is_bool = false) {
  const auto& api = py::detail::npy_api::get();
  PyObject* p = obj.ptr();
  FastView<ND> v;
  if (api.PyArray_Check_(p)) {
    const auto* a = py::detail::array_proxy(p);
    const auto* d = py::detail::array_descriptor_proxy(a->descr);
    const int want = is_bool ? py::detail::npy_api::NPY_BOOL_ : py::detail::npy_format_descriptor<T>::value;
    if (a->nd == ND && d->type_num == want && d->byteorder != '>') {
      v.data = a->data;
      v.given = true;
      for (int i = 0; i < ND; ++i) {
        v.shape[i] = static_cast<std::int64_t>(a->dimensions[i]);
        if (a->strides[i] % static_cast<py::ssize_t>(sizeof(T)) != 0) v.given = false;
        v.strides[i] = static_cast<std::int64_t>(a->strides[i]) / static_cast<std::int64_t>(sizeof(T));
      }
      if (v.given) return v;
    }
  }
  const HostView h = host_view<T>(obj, name, ND, is_bool);  // raises with the full message, or accepts
  v.data = h.data;
  v.given = true;
  for (int i = 0; i < ND; ++i) {
    v.shape[i] = h.shape[static_cast<std::size_t>(i)];
    v.strides[i] = h.strides[static_cast<std::size_t>(i)];
  }
  return v;
}

template <typename T, int ND>
FastView<ND> optional_fast_view(const py::handle& obj, const char* name, bool is_bool = false) {
  if (obj.is_none()) return {};
  return fast_view<T, ND>(obj, name, is_bool);
}

/// Raises ShapeError unless view.shape == expected.
void expect_shape(const HostView& v, const char* name, const std::vector<std::int64_t>& expected,
                  const char* arg = nullptr);

/// Raises DTypeError unless the last axis has unit stride (rows are read as vectors, never copied).
void require_unit_last_stride(const HostView& v, const char* name, const char* arg = nullptr);

/// Raises unless the array can be written in place as one C-contiguous block (DTypeError for the layout,
/// InvalidArgumentError for a read-only array).
void require_writeable_c_contiguous(const HostView& v, const char* name);

/// A new C-contiguous numpy array of the given shape.
template <typename T>
py::array_t<T> empty_array(const std::vector<std::int64_t>& shape) {
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  return py::array_t<T>(s);
}

/// A new C-contiguous numpy bool array of the given shape.
py::array empty_bool_array(const std::vector<std::int64_t>& shape);

std::string shape_str(const std::vector<std::int64_t>& shape);

/// Checked numpy inputs of route: q, k (B, N, D) float32 of one shape, optional active (B, N) bool.
struct RouteInputs {
  HostView q, k, active;
};
RouteInputs route_inputs(const py::handle& q, const py::handle& k, const py::handle& active);

/// Checked numpy inputs of toposort: adj (B, N, N) bool, optional weights (B, N, N) float32 and active (B, N).
struct ToposortInputs {
  HostView adj, weights, active;
};
ToposortInputs toposort_inputs(const py::handle& adj, const py::handle& weights, const py::handle& active);

/// New numpy outputs of route and the view the core writes into.
struct RouteOutputs {
  py::tuple arrays;  // (scores f32 (B,N,N), adjacency bool (B,N,N), inbox i32 (B,N,K), in_degree i32 (B,N))
  RouteOut view;
};
RouteOutputs route_outputs(std::int64_t B, std::int64_t N, std::int64_t K);

/// New numpy outputs of toposort and the view the core writes into.
struct ToposortOutputs {
  py::tuple arrays;  // (order i32 (B,N), level i32 (B,N), removed bool (B,N,N), is_dag bool (B,))
  ToposortOut view;
};
ToposortOutputs toposort_outputs(std::int64_t B, std::int64_t N);

/// Checked numpy inputs of an indexed route: table (M, D) float32 with unit last stride, q_rows and k_rows
/// (B, N) int32 / int64 of one shape, optional active (B, N) bool.
struct IndexedRouteInputs {
  HostView table, active;
  IntHostView q_rows, k_rows;
};
IndexedRouteInputs indexed_route_inputs(const py::handle& table, const py::handle& q_rows, const py::handle& k_rows,
                                        const py::handle& active);

/// Inbox width K: k_in when capped, else N - 1 (0 for N = 0), as reference.inbox_width.
inline std::int64_t inbox_width(std::int64_t n, std::int64_t k_in) { return k_in > 0 ? k_in : (n > 1 ? n - 1 : 0); }

/// RouteArgs over q, k (B, N, D) and an optional active (B, N) view. View: HostView or a DLPack device view
/// (members data, shape, strides in elements, present()).
template <typename View>
RouteArgs route_args(const View& q, const View& k, const View& active, double tau, std::int64_t k_in) {
  RouteArgs a;
  a.q = static_cast<const float*>(q.data);
  a.k = static_cast<const float*>(k.data);
  a.B = q.shape[0];
  a.N = q.shape[1];
  a.D = q.shape[2];
  a.q_sb = q.strides[0];
  a.q_sn = q.strides[1];
  a.k_sb = k.strides[0];
  a.k_sn = k.strides[1];
  if (active.present()) {
    a.active = static_cast<const std::uint8_t*>(active.data);
    a.a_sb = active.strides[0];
    a.a_sn = active.strides[1];
  }
  a.tau = static_cast<float>(tau);  // decisions compare float32 scores with float32(tau)
  a.k_in = k_in;
  a.K = inbox_width(a.N, k_in);
  return a;
}

/// ToposortArgs over adj (B, N, N) and optional weights (B, N, N) and active (B, N) views.
template <typename View>
ToposortArgs toposort_args(const View& adj, const View& weights, const View& active) {
  ToposortArgs a;
  a.adj = static_cast<const std::uint8_t*>(adj.data);
  a.B = adj.shape[0];
  a.N = adj.shape[1];
  a.adj_sb = adj.strides[0];
  a.adj_sr = adj.strides[1];
  a.adj_sc = adj.strides[2];
  if (weights.present()) {
    a.weights = static_cast<const float*>(weights.data);
    a.w_sb = weights.strides[0];
    a.w_sr = weights.strides[1];
    a.w_sc = weights.strides[2];
  }
  if (active.present()) {
    a.active = static_cast<const std::uint8_t*>(active.data);
    a.a_sb = active.strides[0];
    a.a_sn = active.strides[1];
  }
  return a;
}

/// RouteArgs of an indexed route: q and k both point at the table (row stride q_sn = k_sn, q_sb = k_sb = 0).
RouteArgs indexed_route_args(const IndexedRouteInputs& in, double tau, std::int64_t k_in);

}  // namespace toporoute::bindings
