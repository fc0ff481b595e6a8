#include "common.hpp"

#include <algorithm>
#include <new>
#include <sstream>
#include <stdexcept>

namespace toporoute::bindings {

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

namespace {

// Sets toporoute.errors.<cls>(message, arg) as the pending Python exception. When that class cannot be had
// (e.g. during interpreter shutdown) the builtin `fallback` is set instead, so an error is never lost.
void set_error(const char* cls, const std::string& arg, const std::string& message, PyObject* fallback) noexcept {
  try {
    py::object errors = py::module_::import("toporoute.errors");
    py::object exc = errors.attr(cls)(message, arg.empty() ? py::object(py::none()) : py::object(py::str(arg)));
    PyErr_SetObject(py::type::handle_of(exc).ptr(), exc.ptr());
  } catch (...) {
    PyErr_SetString(fallback, message.c_str());
  }
}

// The class of toporoute.errors for a Status code (CoreError for any code not listed).
const char* error_class(StatusCode code) {
  static constexpr std::pair<StatusCode, const char*> kClasses[] = {
      {StatusCode::invalid_argument, "InvalidArgumentError"}, {StatusCode::non_finite, "NonFiniteError"},
      {StatusCode::out_of_range, "OutOfRangeError"},         {StatusCode::unsupported, "BackendUnavailableError"},
      {StatusCode::out_of_memory, "OutOfMemoryError"},       {StatusCode::device, "DeviceError"}};
  for (const auto& [c, name] : kClasses) {
    if (c == code) return name;
  }
  return "CoreError";
}

}  // namespace

void raise_error(const char* cls, const std::string& arg, const std::string& message) {
  py::object errors = py::module_::import("toporoute.errors");
  py::object exc = errors.attr(cls)(message, arg.empty() ? py::object(py::none()) : py::object(py::str(arg)));
  PyErr_SetObject(py::type::handle_of(exc).ptr(), exc.ptr());
  throw py::error_already_set();
}

void raise_status(const Status& s) {
  if (s.ok()) return;
  raise_error(error_class(s.code), s.arg, s.message);
}

Status status_of_current_exception(const char* op) noexcept {
  try {
    try {
      throw;
    } catch (const std::bad_alloc&) {
      return Status::error(StatusCode::out_of_memory, "", std::string(op) + ": could not allocate memory (std::bad_alloc)");
    } catch (const std::length_error& e) {
      return Status::error(StatusCode::out_of_memory, "",
                           std::string(op) + ": could not allocate memory (" + e.what() + ")");
    } catch (const std::exception& e) {
      return Status::error(StatusCode::runtime, "", std::string(op) + " failed in the core: " + e.what());
    } catch (...) {
      return Status::error(StatusCode::runtime, "", std::string(op) + " failed in the core (unknown exception)");
    }
  } catch (...) {  // building the message itself failed: no memory left for it
    Status s;
    s.code = StatusCode::out_of_memory;
    return s;
  }
}

void register_error_translator() {
  py::register_local_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const py::cast_error& e) {
      set_error("CoreError", "", std::string("toporoute core: ") + e.what(), PyExc_RuntimeError);
    } catch (const py::reference_cast_error& e) {
      set_error("CoreError", "", std::string("toporoute core: ") + e.what(), PyExc_RuntimeError);
    } catch (const py::builtin_exception&) {
      throw;  // pybind11's TypeError, ValueError, IndexError, ...: its own translator keeps their classes
    } catch (const std::bad_alloc&) {
      set_error("OutOfMemoryError", "", "toporoute core: could not allocate memory (std::bad_alloc)",
                PyExc_MemoryError);
    } catch (const std::length_error& e) {
      set_error("OutOfMemoryError", "", std::string("toporoute core: could not allocate memory (") + e.what() + ")",
                PyExc_MemoryError);
    } catch (const std::exception& e) {
      set_error("CoreError", "", std::string("toporoute core: ") + e.what(), PyExc_RuntimeError);
    } catch (...) {
      set_error("CoreError", "", "toporoute core: unknown C++ exception", PyExc_RuntimeError);
    }
  });
}

void raise_for_test(const std::string& kind) {
  if (kind == "bad_alloc") throw std::bad_alloc();
  if (kind == "length_error") throw std::length_error("vector::_M_default_append");
  if (kind == "runtime_error") throw std::runtime_error("a failure inside the core");
  if (kind == "unknown") throw 42;
  if (kind == "cast_error") throw py::cast_error("Unable to cast Python instance to C++ type");
  const std::pair<const char*, StatusCode> codes[] = {{"status_runtime", StatusCode::runtime},
                                                      {"status_out_of_memory", StatusCode::out_of_memory},
                                                      {"status_device", StatusCode::device}};
  for (const auto& [name, code] : codes) {
    if (kind == name) raise_status(Status::error(code, "", std::string("_raise_for_test: ") + name));
  }
  if (kind == "core_bad_alloc") run_core("_raise_for_test", []() -> Status { throw std::bad_alloc(); });
  if (kind == "core_runtime_error") {
    run_core("_raise_for_test", []() -> Status { throw std::runtime_error("a failure inside the core"); });
  }
  raise_error("InvalidArgumentError", "kind", "unknown kind '" + kind + "'");
}

namespace {

// The numpy array `obj`, else DTypeError.
py::array numpy_array(const py::handle& obj, const char* name, const char* arg) {
  if (!py::isinstance<py::array>(obj)) {
    raise_error("DTypeError", arg,
                std::string(name) + " must be a numpy array; got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  return py::reinterpret_borrow<py::array>(obj);
}

// Equivalent, not identical: '=f4' and '<f4' are the same dtype here, a byte-swapped '>f4' is not.
bool has_dtype(const py::array& a, const py::dtype& want) {
  return py::detail::npy_api::get().PyArray_EquivTypes_(a.dtype().ptr(), want.ptr()) != 0;
}

// View of a numpy array whose dtype was checked: rank and element strides.
HostView checked_view(const py::array& a, const char* name, int ndim, const char* arg) {
  if (a.ndim() != ndim) {
    raise_error("ShapeError", arg,
                std::string(name) + " must have " + std::to_string(ndim) + " dimensions; got " +
                    std::to_string(a.ndim()));
  }
  HostView v;
  v.array = a;
  v.data = const_cast<void*>(a.data());
  const auto item = static_cast<std::int64_t>(a.itemsize());
  for (int d = 0; d < ndim; ++d) {
    v.shape.push_back(static_cast<std::int64_t>(a.shape(d)));
    const auto st = static_cast<std::int64_t>(a.strides(d));
    if (st % item != 0) {
      raise_error("DTypeError", arg, std::string(name) + " has a stride that is not a multiple of its item size");
    }
    v.strides.push_back(st / item);
  }
  return v;
}

}  // namespace

template <typename T>
HostView host_view(const py::handle& obj, const char* name, int ndim, bool is_bool, const char* arg) {
  if (arg == nullptr) arg = name;
  py::array a = numpy_array(obj, name, arg);
  const py::dtype want = is_bool ? py::dtype::of<bool>() : py::dtype::of<T>();
  if (!has_dtype(a, want)) {
    raise_error("DTypeError", arg,
                std::string(name) + " must have dtype " + std::string(py::str(want)) + "; got " +
                    std::string(py::str(a.dtype())));
  }
  return checked_view(a, name, ndim, arg);
}

template HostView host_view<float>(const py::handle&, const char*, int, bool, const char*);
template HostView host_view<double>(const py::handle&, const char*, int, bool, const char*);
template HostView host_view<std::uint8_t>(const py::handle&, const char*, int, bool, const char*);
template HostView host_view<std::int64_t>(const py::handle&, const char*, int, bool, const char*);
template HostView host_view<std::int32_t>(const py::handle&, const char*, int, bool, const char*);

IntHostView int_host_view(const py::handle& obj, const char* name, int ndim, bool allow_bool, const char* arg) {
  if (arg == nullptr) arg = name;
  py::array a = numpy_array(obj, name, arg);
  IntHostView v;
  if (has_dtype(a, py::dtype::of<std::int64_t>())) {
    v.type = IntType::i64;
  } else if (has_dtype(a, py::dtype::of<std::int32_t>())) {
    v.type = IntType::i32;
  } else if (allow_bool && has_dtype(a, py::dtype::of<bool>())) {
    v.type = IntType::u8;
  } else {
    raise_error("DTypeError", arg,
                std::string(name) + " must have dtype " + (allow_bool ? "bool, int32 or int64" : "int32 or int64") +
                    "; got " + std::string(py::str(a.dtype())));
  }
  v.host = checked_view(a, name, ndim, arg);
  return v;
}

void raise_shape(const char* name, const std::vector<std::int64_t>& expected, const std::vector<std::int64_t>& got,
                 const char* arg) {
  raise_error("ShapeError", arg != nullptr ? arg : name,
              std::string(name) + " must have shape " + shape_str(expected) + "; got " + shape_str(got));
}

void Dims::set(char letter, std::int64_t size) {
  for (int i = 0; i < count_; ++i) {
    if (letters_[i] == letter) {
      sizes_[i] = size;
      return;
    }
  }
  if (count_ == kMax) throw std::logic_error("toporoute::bindings::Dims: more than 8 letters");
  letters_[count_] = letter;
  sizes_[count_++] = size;
}

std::int64_t Dims::operator[](char letter) const {
  for (int i = 0; i < count_; ++i) {
    if (letters_[i] == letter) return sizes_[i];
  }
  return 0;
}

void Dims::check(const std::int64_t* shape, const char* spec, const char* name) {
  const auto expected = [&](int axis) -> std::int64_t {
    const char c = spec[axis];
    if (c >= '0' && c <= '9') return c - '0';
    for (int i = 0; i < count_; ++i) {
      if (letters_[i] == c) return sizes_[i];
    }
    set(c, shape[axis]);
    return shape[axis];
  };
  bool ok = true;
  int ndim = 0;
  for (; spec[ndim] != '\0'; ++ndim) ok = expected(ndim) == shape[ndim] && ok;
  if (!ok) {
    std::vector<std::int64_t> want, got;
    for (int axis = 0; axis < ndim; ++axis) {
      want.push_back(expected(axis));
      got.push_back(shape[axis]);
    }
    raise_shape(name, want, got);
  }
}

void expect_shape(const HostView& v, const char* name, const std::vector<std::int64_t>& expected, const char* arg) {
  if (v.shape != expected) raise_shape(name, expected, v.shape, arg);
}

void require_unit_last_stride(const std::int64_t* shape, const std::int64_t* strides, int ndim, const char* name,
                              const char* arg) {
  const bool empty = std::find(shape, shape + ndim, 0) != shape + ndim;
  if (!empty && shape[ndim - 1] > 1 && strides[ndim - 1] != 1) {
    raise_error("DTypeError", arg != nullptr ? arg : name,
                std::string(name) + " must be contiguous along its last axis (stride 1); got stride " +
                    std::to_string(strides[ndim - 1]) + " elements: pass numpy.ascontiguousarray(" + name + ")");
  }
}

void require_writeable_c_contiguous(const py::handle& array, const char* name) {
  const py::array a = py::reinterpret_borrow<py::array>(array);
  if (!(a.flags() & py::array::c_style)) {
    std::vector<std::int64_t> shape, strides;
    for (py::ssize_t d = 0; d < a.ndim(); ++d) {
      shape.push_back(static_cast<std::int64_t>(a.shape(d)));
      strides.push_back(static_cast<std::int64_t>(a.strides(d) / a.itemsize()));
    }
    raise_error("DTypeError", name,
                std::string(name) + " must be C-contiguous (it is written in place); got strides " +
                    shape_str(strides) + " elements for shape " + shape_str(shape));
  }
  if (!a.writeable()) {
    raise_error("InvalidArgumentError", name,
                std::string(name) + " must be writeable (it is written in place); got a read-only array");
  }
}

py::tuple NewOutputs::allocate() {
  const auto& api = py::detail::npy_api::get();
  py::tuple arrays(count_);
  for (int i = 0; i < count_; ++i) {
    const Spec& s = specs_[i];
    if (s.ndim < 0) {
      arrays[static_cast<std::size_t>(i)] = py::none();
      continue;
    }
    // PyArray_NewFromDescr steals the descriptor reference, also on failure.
    PyObject* a = api.PyArray_NewFromDescr_(api.PyArray_Type_, api.PyArray_DescrFromType_(s.type), s.ndim, s.shape,
                                            nullptr, nullptr, 0, nullptr);
    if (a == nullptr) {
      PyErr_Clear();  // numpy's MemoryError (or "array is too big"): replaced by one that names the op
      std::uint64_t bytes = 0;
      std::string names;
      for (int j = 0; j < count_; ++j) {
        std::uint64_t n = specs_[j].ndim < 0 ? 0 : specs_[j].item;
        for (int d = 0; d < specs_[j].ndim; ++d) {
          if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(specs_[j].shape[d]), &n)) n = UINT64_MAX;
        }
        if (__builtin_add_overflow(bytes, n, &bytes)) bytes = UINT64_MAX;
      }
      raise_status(Status::out_of_memory(op_, "its output arrays", bytes));
    }
    data_[i] = py::detail::array_proxy(a)->data;
    if (dst_[i].assign != nullptr) dst_[i].assign(dst_[i].slot, data_[i]);
    arrays[static_cast<std::size_t>(i)] = py::reinterpret_steal<py::object>(a);
  }
  return arrays;
}

GraphBatch graph_batch(Dims& dims, const py::handle& adj, const py::handle& alive, const char* adj_name,
                       const char* alive_name) {
  GraphBatch g;
  dims.view(adj, adj_name, "BNN", g.adj, g.adj_sb, g.adj_sr, g.adj_sc);
  dims.view(alive, alive_name, "BN", g.alive, g.a_sb, g.a_sn);
  g.B = dims['B'];
  g.N = dims['N'];
  return g;
}

void set_route_sizes(RouteArgs& a, const Dims& dims, double tau, std::int64_t k_in) {
  a.M = dims['M'];
  a.B = dims['B'];
  a.N = dims['N'];
  a.D = dims['D'];
  a.tau = static_cast<float>(tau);  // decisions compare float32 scores with float32(tau)
  a.k_in = k_in;
  a.K = inbox_width(a.N, k_in);
}

RouteInputs route_inputs(const py::handle& q, const py::handle& k, const py::handle& active, double tau,
                         std::int64_t k_in) {
  RouteInputs in;
  RouteArgs& a = in.args;
  Dims dims;
  in.q = dims.view(q, "q", "BND", a.q, a.q_sb, a.q_sn);
  in.k = dims.view(k, "k", "BND", a.k, a.k_sb, a.k_sn);
  in.active = dims.optional_view(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  set_route_sizes(a, dims, tau, k_in);
  return in;
}

IndexedRouteInputs indexed_route_inputs(const py::handle& table, const py::handle& q_rows, const py::handle& k_rows,
                                        const py::handle& active, double tau, std::int64_t k_in) {
  IndexedRouteInputs in;
  RouteArgs& a = in.args;
  Dims dims;
  in.table = dims.view(table, "table", "MD", a.q, a.q_sn);
  require_unit_last_stride(in.table, "table");
  a.k = a.q;
  a.k_sn = a.q_sn;
  in.q_rows = fast_int_view<2>(q_rows, "q_rows", false);
  dims.check(in.q_rows.v.shape, "BN", "q_rows");
  in.k_rows = fast_int_view<2>(k_rows, "k_rows", false);
  dims.check(in.k_rows.v.shape, "BN", "k_rows");
  a.q_rows = in.q_rows.view();
  a.k_rows = in.k_rows.view();
  in.active = dims.optional_view(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  set_route_sizes(a, dims, tau, k_in);
  return in;
}

ToposortInputs toposort_inputs(const py::handle& adj, const py::handle& weights, const py::handle& active) {
  ToposortInputs in;
  ToposortArgs& a = in.args;
  Dims dims;
  in.adj = dims.view(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  in.weights = dims.optional_view(weights, "weights", "BNN", a.weights, a.w_sb, a.w_sr, a.w_sc);
  in.active = dims.optional_view(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  a.B = dims['B'];
  a.N = dims['N'];
  return in;
}

RouteOutputs route_outputs(const char* op, std::int64_t B, std::int64_t N, std::int64_t K) {
  RouteOutputs out;
  NewOutputs o(op);
  o.add<float>({B, N, N}, &out.view.scores);
  o.add<bool>({B, N, N}, &out.view.adjacency);
  o.add<std::int32_t>({B, N, K}, &out.view.inbox);
  o.add<std::int32_t>({B, N}, &out.view.in_degree);
  out.arrays = o.allocate();
  return out;
}

ToposortOutputs toposort_outputs(const char* op, std::int64_t B, std::int64_t N) {
  ToposortOutputs out;
  NewOutputs o(op);
  o.add<std::int32_t>({B, N}, &out.view.order);
  o.add<std::int32_t>({B, N}, &out.view.level);
  o.add<bool>({B, N, N}, &out.view.removed);
  o.add<bool>({B}, &out.view.is_dag);
  out.arrays = o.allocate();
  return out;
}

}  // namespace toporoute::bindings
