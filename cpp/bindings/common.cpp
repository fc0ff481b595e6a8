#include "common.hpp"

#include <algorithm>
#include <sstream>

namespace toporoute::bindings {

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

void raise_error(const char* cls, const std::string& arg, const std::string& message) {
  py::object errors = py::module_::import("toporoute.errors");
  py::object exc = errors.attr(cls)(message, arg.empty() ? py::object(py::none()) : py::object(py::str(arg)));
  PyErr_SetObject(py::type::handle_of(exc).ptr(), exc.ptr());
  throw py::error_already_set();
}

void raise_status(const Status& s) {
  switch (s.code) {
    case StatusCode::ok:
      return;
    case StatusCode::invalid_argument:
      raise_error("InvalidArgumentError", s.arg, s.message);
    case StatusCode::non_finite:
      raise_error("NonFiniteError", s.arg, s.message);
    case StatusCode::out_of_range:
      raise_error("OutOfRangeError", s.arg, s.message);
    case StatusCode::unsupported:
      raise_error("BackendUnavailableError", s.arg, s.message);
    case StatusCode::runtime:
      break;
  }
  throw std::runtime_error(s.message);
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
template HostView host_view<std::uint8_t>(const py::handle&, const char*, int, bool, const char*);
template HostView host_view<std::int64_t>(const py::handle&, const char*, int, bool, const char*);

IntView IntHostView::view() const {
  IntView v;
  if (!host.present()) return v;
  v.data = host.data;
  v.type = type;
  if (host.strides.size() == 1) {
    v.s1 = host.strides[0];
  } else if (host.strides.size() == 2) {
    v.s0 = host.strides[0];
    v.s1 = host.strides[1];
  }
  return v;
}

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

void expect_shape(const HostView& v, const char* name, const std::vector<std::int64_t>& expected, const char* arg) {
  if (v.shape != expected) raise_shape(name, expected, v.shape, arg);
}

void require_unit_last_stride(const HostView& v, const char* name, const char* arg) {
  const bool empty = std::find(v.shape.begin(), v.shape.end(), 0) != v.shape.end();
  if (!empty && v.shape.back() > 1 && v.strides.back() != 1) {
    raise_error("DTypeError", arg != nullptr ? arg : name,
                std::string(name) + " must be contiguous along its last axis (stride 1); got stride " +
                    std::to_string(v.strides.back()) + " elements: pass numpy.ascontiguousarray(" + name + ")");
  }
}

void require_writeable_c_contiguous(const HostView& v, const char* name) {
  const py::array a = py::reinterpret_borrow<py::array>(v.array);
  if (!(a.flags() & py::array::c_style)) {
    raise_error("DTypeError", name,
                std::string(name) + " must be C-contiguous (it is written in place); got strides " +
                    shape_str(v.strides) + " elements for shape " + shape_str(v.shape));
  }
  if (!a.writeable()) {
    raise_error("InvalidArgumentError", name,
                std::string(name) + " must be writeable (it is written in place); got a read-only array");
  }
}

py::array empty_bool_array(const std::vector<std::int64_t>& shape) {
  std::vector<py::ssize_t> s(shape.begin(), shape.end());
  return py::array(py::dtype::of<bool>(), s);
}

RouteInputs route_inputs(const py::handle& q, const py::handle& k, const py::handle& active) {
  RouteInputs in;
  in.q = host_view<float>(q, "q", 3);
  in.k = host_view<float>(k, "k", 3);
  expect_shape(in.k, "k", in.q.shape);
  in.active = optional_host_view<std::uint8_t>(active, "active", 2, true);
  if (in.active.present()) expect_shape(in.active, "active", {in.q.shape[0], in.q.shape[1]});
  return in;
}

IndexedRouteInputs indexed_route_inputs(const py::handle& table, const py::handle& q_rows, const py::handle& k_rows,
                                        const py::handle& active) {
  IndexedRouteInputs in;
  in.table = host_view<float>(table, "table", 2);
  require_unit_last_stride(in.table, "table");
  in.q_rows = int_host_view(q_rows, "q_rows", 2, false);
  in.k_rows = int_host_view(k_rows, "k_rows", 2, false);
  expect_shape(in.k_rows.host, "k_rows", in.q_rows.host.shape);
  in.active = optional_host_view<std::uint8_t>(active, "active", 2, true);
  if (in.active.present()) expect_shape(in.active, "active", in.q_rows.host.shape);
  return in;
}

RouteArgs indexed_route_args(const IndexedRouteInputs& in, double tau, std::int64_t k_in) {
  RouteArgs a;
  a.q = a.k = static_cast<const float*>(in.table.data);
  a.M = in.table.shape[0];
  a.D = in.table.shape[1];
  a.q_sn = a.k_sn = in.table.strides[0];
  a.B = in.q_rows.host.shape[0];
  a.N = in.q_rows.host.shape[1];
  a.q_rows = in.q_rows.view();
  a.k_rows = in.k_rows.view();
  if (in.active.present()) {
    a.active = static_cast<const std::uint8_t*>(in.active.data);
    a.a_sb = in.active.strides[0];
    a.a_sn = in.active.strides[1];
  }
  a.tau = static_cast<float>(tau);
  a.k_in = k_in;
  a.K = inbox_width(a.N, k_in);
  return a;
}

ToposortInputs toposort_inputs(const py::handle& adj, const py::handle& weights, const py::handle& active) {
  ToposortInputs in;
  in.adj = host_view<std::uint8_t>(adj, "adj", 3, true);
  const std::int64_t B = in.adj.shape[0], N = in.adj.shape[1];
  expect_shape(in.adj, "adj", {B, N, N});
  in.weights = optional_host_view<float>(weights, "weights", 3);
  if (in.weights.present()) expect_shape(in.weights, "weights", in.adj.shape);
  in.active = optional_host_view<std::uint8_t>(active, "active", 2, true);
  if (in.active.present()) expect_shape(in.active, "active", {B, N});
  return in;
}

RouteOutputs route_outputs(std::int64_t B, std::int64_t N, std::int64_t K) {
  auto scores = empty_array<float>({B, N, N});
  py::array adjacency = empty_bool_array({B, N, N});
  auto inbox = empty_array<std::int32_t>({B, N, K});
  auto in_degree = empty_array<std::int32_t>({B, N});
  RouteOutputs out;
  out.view.scores = scores.mutable_data();
  out.view.adjacency = static_cast<std::uint8_t*>(adjacency.mutable_data());
  out.view.inbox = inbox.mutable_data();
  out.view.in_degree = in_degree.mutable_data();
  out.arrays = py::make_tuple(scores, adjacency, inbox, in_degree);
  return out;
}

ToposortOutputs toposort_outputs(std::int64_t B, std::int64_t N) {
  auto order = empty_array<std::int32_t>({B, N});
  auto level = empty_array<std::int32_t>({B, N});
  py::array removed = empty_bool_array({B, N, N});
  py::array is_dag = empty_bool_array({B});
  ToposortOutputs out;
  out.view.order = order.mutable_data();
  out.view.level = level.mutable_data();
  out.view.removed = static_cast<std::uint8_t*>(removed.mutable_data());
  out.view.is_dag = static_cast<std::uint8_t*>(is_dag.mutable_data());
  out.arrays = py::make_tuple(order, level, removed, is_dag);
  return out;
}

}  // namespace toporoute::bindings
