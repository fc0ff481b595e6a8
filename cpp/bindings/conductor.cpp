// conductor_check: AgentConductor plans (UTF-8 bytes and flattened contexts in, CSR numpy arrays out). The
// bytes, ids and context arrays are copied, so the core runs without the GIL on memory nobody else can touch.
// conductor_density: the plans' density reward, elementwise.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "common.hpp"
#include "density_args.hpp"
#include "toporoute/conductor.hpp"

namespace toporoute::bindings {

namespace {

std::string type_name(const py::handle& obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

// A list or tuple (never a str or bytes); its items are checked by the caller.
py::sequence list_arg(const py::handle& obj, const char* name) {
  if (!py::isinstance<py::list>(obj) && !py::isinstance<py::tuple>(obj)) {
    raise_error("InvalidArgumentError", name, std::string(name) + " must be a list; got " + type_name(obj));
  }
  return py::reinterpret_borrow<py::sequence>(obj);
}

// Items of a list, each accepted by `is` (else "name[i] must be <what>; got <type>") and copied as the bytes
// `bytes` gives (a new reference).
template <class Is, class Bytes>
std::vector<std::string> list_items(const py::handle& obj, const char* name, const char* what, Is is, Bytes bytes) {
  const py::sequence seq = list_arg(obj, name);
  std::vector<std::string> out;
  out.reserve(seq.size());
  for (std::size_t i = 0; i < seq.size(); ++i) {
    const py::object x = seq[i];
    if (!is(x.ptr())) {
      raise_error("InvalidArgumentError", name,
                  std::string(name) + "[" + std::to_string(i) + "] must be " + what + "; got " + type_name(x));
    }
    const auto b = py::reinterpret_steal<py::object>(bytes(x.ptr()));
    if (!b) throw py::error_already_set();
    out.emplace_back(PyBytes_AS_STRING(b.ptr()), static_cast<std::size_t>(PyBytes_GET_SIZE(b.ptr())));
  }
  return out;
}

// Items of a list of bytes, copied.
std::vector<std::string> bytes_list(const py::handle& obj, const char* name) {
  return list_items(
      obj, name, "bytes", [](PyObject* x) { return PyBytes_Check(x); },
      [](PyObject* x) {
        Py_INCREF(x);
        return x;
      });
}

// Items of a list of str as UTF-8 (lone surrogates kept, as Python's "surrogatepass" writes them).
std::vector<std::string> str_list(const py::handle& obj, const char* name) {
  return list_items(
      obj, name, "a str", [](PyObject* x) { return PyUnicode_Check(x); },
      [](PyObject* x) { return PyUnicode_AsEncodedString(x, "utf-8", "surrogatepass"); });
}

// A 1-D numpy array of exactly dtype T (any strides) and length n (any when n < 0), copied.
template <typename T>
std::vector<T> array_arg(const py::handle& obj, const char* name, std::int64_t n) {
  if (!py::isinstance<py::array>(obj)) {
    raise_error("DTypeError", name, std::string(name) + " must be a numpy array; got " + type_name(obj));
  }
  const auto a = py::reinterpret_borrow<py::array>(obj);
  const py::dtype want = py::dtype::of<T>();
  if (!py::detail::npy_api::get().PyArray_EquivTypes_(a.dtype().ptr(), want.ptr())) {
    raise_error("DTypeError", name,
                std::string(name) + " must have dtype " + std::string(py::str(want)) + "; got " +
                    std::string(py::str(a.dtype())));
  }
  if (a.ndim() != 1) {
    raise_error("ShapeError", name, std::string(name) + " must have 1 dimensions; got " + std::to_string(a.ndim()));
  }
  const auto len = static_cast<std::int64_t>(a.shape(0));
  if (n >= 0 && len != n) raise_shape(name, {n}, {len});
  std::vector<T> out(static_cast<std::size_t>(len));
  const auto* base = static_cast<const char*>(a.data());
  for (std::int64_t i = 0; i < len; ++i) {
    std::memcpy(&out[static_cast<std::size_t>(i)], base + i * a.strides(0), sizeof(T));
  }
  return out;
}

// A new 1-D numpy array of dtype Out (T, or bool for a vector of 0/1 bytes) holding v.
template <typename Out = void, typename T>
py::object to_array(const std::vector<T>& v) {
  using Elem = std::conditional_t<std::is_void_v<Out>, T, Out>;
  static_assert(sizeof(Elem) == sizeof(T));
  NewOutputs out("conductor_check");
  out.add<Elem>({static_cast<std::int64_t>(v.size())});
  py::object array = out.allocate()[0];
  if (!v.empty()) std::memcpy(out.data<Elem>(0), v.data(), v.size() * sizeof(T));
  return array;
}

py::list bytes_out(const std::vector<std::string>& v) {
  py::list out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = py::bytes(v[i]);
  return out;
}

py::dict conductor_check(const py::handle& texts, const py::handle& pool, const py::handle& ctx_index,
                         const py::handle& ctx_turn, const py::handle& ctx_off, const py::handle& ctx_id,
                         const py::handle& ctx_role, const py::handle& ctx_node_turn, bool lenient, bool strict_tester,
                         bool concise, std::int64_t max_bytes, std::int64_t max_depth, std::int64_t max_agents,
                         std::int64_t max_refs) {
  const std::vector<std::string> text = bytes_list(texts, "texts");
  const std::vector<std::string> roles = str_list(pool, "pool");
  const auto B = static_cast<std::int64_t>(text.size());
  const std::vector<std::int64_t> index = array_arg<std::int64_t>(ctx_index, "ctx_index", B);
  const std::vector<std::int32_t> turn = array_arg<std::int32_t>(ctx_turn, "ctx_turn", -1);
  const auto C = static_cast<std::int64_t>(turn.size());
  const std::vector<std::int64_t> off = array_arg<std::int64_t>(ctx_off, "ctx_off", C + 1);
  const std::vector<std::string> ids = str_list(ctx_id, "ctx_id");
  const auto M = static_cast<std::int64_t>(ids.size());
  const std::vector<std::int16_t> role = array_arg<std::int16_t>(ctx_role, "ctx_role", M);
  const std::vector<std::int32_t> node_turn = array_arg<std::int32_t>(ctx_node_turn, "ctx_node_turn", M);

  ConductorArgs a;
  a.texts = text.data();
  a.B = B;
  a.pool = roles.data();
  a.P = static_cast<std::int64_t>(roles.size());
  a.ctx_index = index.data();
  a.ctx_turn = turn.data();
  a.ctx_off = off.data();
  a.C = C;
  a.ctx_id = ids.data();
  a.ctx_role = role.data();
  a.ctx_node_turn = node_turn.data();
  a.M = M;
  a.options.lenient = lenient;
  a.options.strict_tester = strict_tester;
  a.options.concise = concise;
  a.options.max_bytes = max_bytes;
  a.options.max_depth = max_depth;
  a.options.max_agents = max_agents;
  a.options.max_refs = max_refs;
  ConductorBatch o;
  run_core("conductor_check", [&] { return toporoute::conductor_check(a, &o); });

  py::dict d;
  d["error"] = to_array(o.error);
  d["message"] = bytes_out(o.message);
  py::list yaml(o.yaml.size());
  for (std::size_t b = 0; b < o.yaml.size(); ++b) {
    yaml[b] = o.has_yaml[b] ? py::object(py::bytes(o.yaml[b])) : py::object(py::none());
  }
  d["yaml"] = yaml;
  d["nodes"] = to_array(o.nodes);
  d["edges"] = to_array(o.edges);
  d["steps"] = to_array(o.steps);
  d["depth"] = to_array(o.depth);
  d["node_off"] = to_array(o.node_off);
  d["node_role"] = to_array(o.node_role);
  d["node_step"] = to_array(o.node_step);
  d["node_layer"] = to_array(o.node_layer);
  d["node_self"] = to_array(o.node_self);
  d["ref_off"] = to_array(o.ref_off);
  d["ref_src"] = to_array(o.ref_src);
  d["ref_cross"] = to_array<bool>(o.ref_cross);
  py::list node_id(o.node_id.size());
  for (std::size_t i = 0; i < o.node_id.size(); ++i) node_id[i] = py::str(o.node_id[i]);
  d["node_id"] = node_id;
  py::list warnings(o.warnings.size());
  for (std::size_t b = 0; b < o.warnings.size(); ++b) warnings[b] = bytes_out(o.warnings[b]);
  d["warnings"] = warnings;
  return d;
}

py::tuple conductor_density(const py::handle& nodes, const py::handle& edges, const py::handle& steps,
                            const py::handle& n_max) {
  const DensityArgs a = density_inputs(nodes, edges, steps, n_max);
  DensityOut o;
  NewOutputs out("conductor_density");
  add_density_outputs(out, a.n, o);
  return out.run([&] { return toporoute::conductor_density(a, o); });
}

}  // namespace

DensityArgs density_inputs(const py::handle& nodes, const py::handle& edges, const py::handle& steps,
                           const py::handle& n_max) {
  DensityArgs a;
  a.n = -1;
  bool one_layout = true;  // checked once every dtype is
  for (const auto& [obj, name, data] : {std::tuple{&nodes, "nodes", &a.nodes}, std::tuple{&edges, "edges", &a.edges},
                                        std::tuple{&steps, "steps", &a.steps}, std::tuple{&n_max, "n_max", &a.n_max}}) {
    const HostView v = host_view<std::int64_t>(*obj, name, 1);
    if (a.n < 0) a.n = v.shape[0];
    one_layout = one_layout && v.shape[0] == a.n && !(a.n > 1 && v.strides[0] != 1);
    *data = static_cast<const std::int64_t*>(v.data);
  }
  if (!one_layout) {
    raise_error("ShapeError", "nodes", "nodes, edges, steps and n_max must be contiguous 1-D arrays of one length");
  }
  return a;
}

void add_density_outputs(NewOutputs& out, std::int64_t n, DensityOut& o) {
  for (double** data : {&o.s_node, &o.s_edge, &o.s_depth, &o.s_complex, &o.reward}) out.add<double>({n}, data);
}

void bind_conductor(py::module_& m) {
  m.def("conductor_check", &conductor_check, py::arg("texts"), py::arg("pool"), py::arg("ctx_index"),
        py::arg("ctx_turn"), py::arg("ctx_off"), py::arg("ctx_id"), py::arg("ctx_role"), py::arg("ctx_node_turn"),
        py::arg("lenient"), py::arg("strict_tester"), py::arg("concise"), py::arg("max_bytes"), py::arg("max_depth"),
        py::arg("max_agents"), py::arg("max_refs"),
        "conductor_check(texts, pool, ctx_index, ctx_turn, ctx_off, ctx_id, ctx_role, ctx_node_turn, lenient, "
        "strict_tester, concise, max_bytes, max_depth, max_agents, max_refs) -> dict of AgentConductor plans "
        "checked and decoded in CSR arrays (error 255: deferred to the reference).");
  m.def("conductor_density", &conductor_density, py::arg("nodes"), py::arg("edges"), py::arg("steps"),
        py::arg("n_max"),
        "conductor_density(nodes, edges, steps, n_max) -> (s_node, s_edge, s_depth, s_complex, reward).");
}

}  // namespace toporoute::bindings
