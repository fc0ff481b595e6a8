#include "common.hpp"

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

template <typename T>
HostView host_view(const py::handle& obj, const char* name, int ndim, bool is_bool) {
  if (!py::isinstance<py::array>(obj)) {
    raise_error("DTypeError", name,
                std::string(name) + " must be a numpy array; got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  const py::dtype want = is_bool ? py::dtype::of<bool>() : py::dtype::of<T>();
  // Equivalent, not identical: '=f4' and '<f4' are the same dtype here, a byte-swapped '>f4' is not.
  if (!py::detail::npy_api::get().PyArray_EquivTypes_(a.dtype().ptr(), want.ptr())) {
    raise_error("DTypeError", name,
                std::string(name) + " must have dtype " + std::string(py::str(want)) + "; got " +
                    std::string(py::str(a.dtype())));
  }
  if (a.ndim() != ndim) {
    raise_error("ShapeError", name,
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
      raise_error("DTypeError", name, std::string(name) + " has a stride that is not a multiple of its item size");
    }
    v.strides.push_back(st / item);
  }
  return v;
}

template HostView host_view<float>(const py::handle&, const char*, int, bool);
template HostView host_view<std::uint8_t>(const py::handle&, const char*, int, bool);
template HostView host_view<std::int64_t>(const py::handle&, const char*, int, bool);

void expect_shape(const HostView& v, const char* name, const std::vector<std::int64_t>& expected) {
  if (v.shape != expected) {
    raise_error("ShapeError", name,
                std::string(name) + " must have shape " + shape_str(expected) + "; got " + shape_str(v.shape));
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
