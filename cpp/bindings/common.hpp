#pragma once
// Shared glue for the pybind11 module: the one place where a core Status or a C++ exception becomes a Python
// exception (toporoute.errors), zero-copy extraction of numpy views (dtype, ndim, shape and element strides
// checked, never converted) and the allocation of output arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "toporoute/status.hpp"
#include "toporoute/route.hpp"
#include "toporoute/toposort.hpp"
#include "toporoute/views.hpp"

namespace toporoute::bindings {

namespace py = pybind11;

/// Raises the toporoute.errors exception matching `s` (no-op when ok).
void raise_status(const Status& s);
/// Raises toporoute.errors.<cls>(message, arg).
[[noreturn]] void raise_error(const char* cls, const std::string& arg, const std::string& message);

/// Registers the module's exception translator (module-local, so other pybind11 modules are unaffected): a
/// std::bad_alloc (or std::length_error, a container asked for more than it can hold) escaping any binding
/// becomes toporoute.errors.OutOfMemoryError, any other C++ exception (pybind11's cast errors included)
/// toporoute.errors.CoreError. pybind11's own exceptions that map to TypeError, ValueError, ... keep them.
void register_error_translator();

/// Fails as `kind` names, through raise_status, the translator or run_core (module function _raise_for_test).
[[noreturn]] void raise_for_test(const std::string& kind);

/// The Status for the exception being handled (call only inside a catch block): StatusCode::out_of_memory for
/// an allocation failure, StatusCode::runtime for anything else, the message naming `op`. Never throws.
Status status_of_current_exception(const char* op) noexcept;

/// Runs the core call `f` (returning a Status) for `op` with the GIL released and raises what it returns. An
/// exception escaping the core is caught on this side of the GIL release and reported like a Status (see
/// status_of_current_exception), so it never unwinds through the released GIL.
template <class F>
void run_core(const char* op, F&& f) {
  Status s;
  {
    py::gil_scoped_release nogil;
    try {
      s = f();
    } catch (...) {
      s = status_of_current_exception(op);
    }
  }
  raise_status(s);
}

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

/// The core's view of an integer array of rank 1 or 2 and element type `type` (`a`: a HostView or a DLPack
/// DeviceArray; absent: an absent view). A 1-D array puts its stride in s1.
template <class View>
IntView int_view(const View& a, IntType type) {
  IntView v;
  if (!a.present()) return v;
  v.data = a.data;
  v.type = type;
  if (a.strides.size() == 1) {
    v.s1 = a.strides[0];
  } else if (a.strides.size() == 2) {
    v.s0 = a.strides[0];
    v.s1 = a.strides[1];
  }
  return v;
}

/// An integer array of dtype int32 or int64 (or bool when `allow_bool`), rank `ndim`, never copied.
struct IntHostView {
  HostView host;
  IntType type = IntType::i64;
  /// The core's view (int_view).
  IntView view() const { return int_view(host, type); }
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

/// An integer view for per-call hot paths: int32 or int64 (or bool when `allow_bool`), rank ND. Same checks and
/// messages as int_host_view, which it falls back to for anything but a native-order array of those dtypes.
template <int ND>
struct FastIntView {
  FastView<ND> v;
  IntType type = IntType::i64;
  /// The core's view (2-D only).
  IntView view() const {
    IntView out;
    out.data = v.data;
    out.type = type;
    out.s0 = v.strides[0];
    out.s1 = v.strides[ND - 1];
    return out;
  }
};

template <int ND>
FastIntView<ND> fast_int_view(const py::handle& obj, const char* name, bool allow_bool) {
  const auto& api = py::detail::npy_api::get();
  PyObject* p = obj.ptr();
  if (api.PyArray_Check_(p)) {
    const auto* a = py::detail::array_proxy(p);
    const auto* d = py::detail::array_descriptor_proxy(a->descr);
    FastIntView<ND> out;
    bool known = true;
    if (d->type_num == py::detail::npy_api::NPY_INT64_) {
      out.type = IntType::i64;
    } else if (d->type_num == py::detail::npy_api::NPY_INT32_) {
      out.type = IntType::i32;
    } else if (allow_bool && d->type_num == py::detail::npy_api::NPY_BOOL_) {
      out.type = IntType::u8;
    } else {
      known = false;
    }
    const auto item = static_cast<py::ssize_t>(out.type == IntType::i64 ? 8 : out.type == IntType::i32 ? 4 : 1);
    if (known && a->nd == ND && d->byteorder != '>') {
      out.v.data = a->data;
      out.v.given = true;
      for (int i = 0; i < ND; ++i) {
        out.v.shape[i] = static_cast<std::int64_t>(a->dimensions[i]);
        if (a->strides[i] % item != 0) out.v.given = false;
        out.v.strides[i] = static_cast<std::int64_t>(a->strides[i] / item);
      }
      if (out.v.given) return out;
    }
  }
  const IntHostView h = int_host_view(obj, name, ND, allow_bool);  // raises with the full message, or accepts
  FastIntView<ND> out;
  out.type = h.type;
  out.v.data = h.host.data;
  out.v.given = true;
  for (int i = 0; i < ND; ++i) {
    out.v.shape[i] = h.host.shape[static_cast<std::size_t>(i)];
    out.v.strides[i] = h.host.strides[static_cast<std::size_t>(i)];
  }
  return out;
}

/// Raises ShapeError unless view.shape == expected.
void expect_shape(const HostView& v, const char* name, const std::vector<std::int64_t>& expected,
                  const char* arg = nullptr);

/// Raises ShapeError naming `name` unless v.shape equals `want`, with expect_shape's message. View: FastView,
/// HostView or a DLPack device view (anything with shape[i]).
template <class View>
void expect_dims(const View& v, const char* name, std::initializer_list<std::int64_t> want) {
  std::size_t i = 0;
  for (const std::int64_t w : want) {
    if (v.shape[i++] != w) {
      std::vector<std::int64_t> got;
      for (std::size_t d = 0; d < want.size(); ++d) got.push_back(v.shape[d]);
      raise_shape(name, want, got);
    }
  }
}

/// The sizes the arrays of one call must agree on, each named by a letter of a shape spec such as "BNN" (a
/// digit is a fixed size): the first array to use a letter sets it, every later one must match. A core argument
/// struct is then filled one array per call: `dims.view(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc)`
/// checks dtype, rank and shape (the messages of fast_view and expect_dims) and copies the data pointer and the
/// element strides. std::uint8_t arrays are numpy bool, as every u8 input of the core is.
class Dims {
 public:
  /// Fixes `letter` before any array is read (a size the call already knows, e.g. from a config).
  void set(char letter, std::int64_t size);
  /// The size `letter` was set to (0 when nothing set it, e.g. only optional arrays use it and none was given).
  std::int64_t operator[](char letter) const;
  /// Raises ShapeError naming `name` unless shape[i] matches spec[i] for every axis (expect_dims' message),
  /// setting each letter seen for the first time from this shape.
  void check(const std::int64_t* shape, const char* spec, const char* name);

  /// Checks a view (FastView, HostView or a DLPack device view) against `spec` and copies its data pointer and
  /// leading element strides into `data` and `strides...`; an absent view leaves them as they are.
  template <class View, typename T, typename... S>
  void fill(const View& v, const char* name, const char* spec, T*& data, S&... strides) {
    if (!v.present()) return;
    check(std::data(v.shape), spec, name);
    data = static_cast<T*>(v.data);
    std::size_t axis = 0;
    ((strides = v.strides[axis++]), ...);
  }

  /// fast_view of the numpy argument `obj` (rank: the letters of `spec`), then fill.
  template <typename T, std::size_t L, typename... S>
  FastView<static_cast<int>(L - 1)> view(const py::handle& obj, const char* name, const char (&spec)[L], T*& data,
                                         S&... strides) {
    using E = std::remove_const_t<T>;
    const auto v = fast_view<E, static_cast<int>(L - 1)>(obj, name, std::is_same_v<E, std::uint8_t>);
    fill(v, name, spec, data, strides...);
    return v;
  }

  /// The same for an optional argument: None leaves data null.
  template <typename T, std::size_t L, typename... S>
  FastView<static_cast<int>(L - 1)> optional_view(const py::handle& obj, const char* name, const char (&spec)[L],
                                                  T*& data, S&... strides) {
    if (obj.is_none()) return {};
    return view(obj, name, spec, data, strides...);
  }

 private:
  static constexpr int kMax = 8;
  char letters_[kMax] = {};
  std::int64_t sizes_[kMax] = {};
  int count_ = 0;
};

/// Sets the batch and node counts of a core argument struct (fields B and N) from the letters B and N.
template <class Args>
void set_graph_sizes(Args& a, const Dims& dims) {
  a.B = dims['B'];
  a.N = dims['N'];
}

/// Raises DTypeError unless the last axis of a rank-`ndim` view has unit stride (rows are read as vectors,
/// never copied); empty arrays and rows of one element impose nothing.
void require_unit_last_stride(const std::int64_t* shape, const std::int64_t* strides, int ndim, const char* name,
                              const char* arg = nullptr);
inline void require_unit_last_stride(const HostView& v, const char* name, const char* arg = nullptr) {
  require_unit_last_stride(v.shape.data(), v.strides.data(), static_cast<int>(v.shape.size()), name, arg);
}
template <int ND>
void require_unit_last_stride(const FastView<ND>& v, const char* name, const char* arg = nullptr) {
  require_unit_last_stride(v.shape, v.strides, ND, name, arg);
}

/// Raises unless the numpy array `array` (dtype already checked) can be written in place as one C-contiguous
/// block (DTypeError for the layout, InvalidArgumentError for a read-only array).
void require_writeable_c_contiguous(const py::handle& array, const char* name);

/// The outputs of one call: each a new C-contiguous numpy array, allocated once, straight through numpy's C
/// API (no intermediate shape vectors or dtype objects: this runs on every microsecond call). Declare every
/// output with add / add_none, then allocate(); a failed allocation raises OutOfMemoryError naming the op and
/// the bytes of all its outputs.
class NewOutputs {
 public:
  static constexpr int kMax = 10;
  explicit NewOutputs(const char* op) : op_(op) {}

  /// Declares the next output (T: float, double, std::int32_t, std::int64_t, or bool).
  template <typename T>
  void add(std::initializer_list<std::int64_t> shape) {
    Spec& s = specs_[count_++];
    s.type = type_num<T>();
    s.item = sizeof(T);
    s.ndim = static_cast<int>(shape.size());
    int d = 0;
    for (const std::int64_t x : shape) s.shape[d++] = static_cast<py::ssize_t>(x);
  }
  /// Declares the next output and where allocate() stores its buffer (`*dst`, e.g. a field of the core's Out
  /// struct; P has T's size: std::uint8_t for bool).
  template <typename T, typename P>
  void add(std::initializer_list<std::int64_t> shape, P** dst) {
    static_assert(sizeof(T) == sizeof(P), "an output's buffer has its element type's size");
    dst_[count_] = {dst, [](void* slot, void* data) { *static_cast<P**>(slot) = static_cast<P*>(data); }};
    add<T>(shape);
  }
  /// Declares an absent output (None in the tuple).
  void add_none() { specs_[count_++].ndim = -1; }

  /// Allocates every declared output; data<T>(i) is output i's buffer afterwards.
  py::tuple allocate();
  /// Allocates every declared output, runs the core call `f` for this op (run_core: the GIL released, its
  /// Status raised) and returns the outputs: the last three lines of every binding, written once.
  template <class F>
  py::tuple run(F&& f) {
    py::tuple arrays = allocate();
    run_core(op_, std::forward<F>(f));
    return arrays;
  }
  template <typename T>
  T* data(int i) const {
    return static_cast<T*>(data_[i]);
  }

 private:
  struct Spec {
    int type = 0;
    std::size_t item = 1;
    int ndim = 0;
    py::ssize_t shape[3] = {};
  };
  template <typename T>
  static constexpr int type_num() {
    if constexpr (std::is_same_v<T, bool>) {
      return py::detail::npy_api::NPY_BOOL_;
    } else {
      return py::detail::npy_format_descriptor<T>::value;
    }
  }

  struct Destination {
    void* slot = nullptr;
    void (*assign)(void* slot, void* data) = nullptr;
  };

  const char* op_;
  Spec specs_[kMax];
  Destination dst_[kMax];
  void* data_[kMax] = {};
  int count_ = 0;
};

std::string shape_str(const std::vector<std::int64_t>& shape);

/// Checked graphs: adj (B, N, N) bool and alive (B, N) bool, named as the caller's arguments; sets B and N.
GraphBatch graph_batch(Dims& dims, const py::handle& adj, const py::handle& alive, const char* adj_name = "adj",
                       const char* alive_name = "alive");

/// Inbox width K: k_in when capped, else N - 1 (0 for N = 0), as reference.inbox_width.
inline std::int64_t inbox_width(std::int64_t n, std::int64_t k_in) { return k_in > 0 ? k_in : (n > 1 ? n - 1 : 0); }

/// Sets a route's sizes from the letters B, N, D (and M when indexed) of `dims`, tau and the inbox width.
void set_route_sizes(RouteArgs& a, const Dims& dims, double tau, std::int64_t k_in);

/// Checked numpy inputs of route: q, k (B, N, D) float32 of one shape, optional active (B, N) bool, and the
/// core's arguments over them.
struct RouteInputs {
  FastView<3> q, k;
  FastView<2> active;
  RouteArgs args;
};
RouteInputs route_inputs(const py::handle& q, const py::handle& k, const py::handle& active, double tau,
                         std::int64_t k_in);

/// Checked numpy inputs of an indexed route: table (M, D) float32 with unit last stride, q_rows and k_rows
/// (B, N) int32 / int64 of one shape, optional active (B, N) bool. In args, q and k both point at the table
/// (row stride q_sn = k_sn, q_sb = k_sb = 0).
struct IndexedRouteInputs {
  FastView<2> table, active;
  FastIntView<2> q_rows, k_rows;
  RouteArgs args;
};
IndexedRouteInputs indexed_route_inputs(const py::handle& table, const py::handle& q_rows, const py::handle& k_rows,
                                        const py::handle& active, double tau, std::int64_t k_in);

/// Checked numpy inputs of toposort: adj (B, N, N) bool, optional weights (B, N, N) float32 and active (B, N),
/// and the core's arguments over them.
struct ToposortInputs {
  FastView<3> adj, weights;
  FastView<2> active;
  ToposortArgs args;
};
ToposortInputs toposort_inputs(const py::handle& adj, const py::handle& weights, const py::handle& active);

/// New numpy outputs of route and the view the core writes into.
struct RouteOutputs {
  py::tuple arrays;  // (scores f32 (B,N,N), adjacency bool (B,N,N), inbox i32 (B,N,K), in_degree i32 (B,N))
  RouteOut view;
};
RouteOutputs route_outputs(const char* op, std::int64_t B, std::int64_t N, std::int64_t K);

/// New numpy outputs of toposort and the view the core writes into.
struct ToposortOutputs {
  py::tuple arrays;  // (order i32 (B,N), level i32 (B,N), removed bool (B,N,N), is_dag bool (B,))
  ToposortOut view;
};
ToposortOutputs toposort_outputs(const char* op, std::int64_t B, std::int64_t N);

}  // namespace toporoute::bindings
