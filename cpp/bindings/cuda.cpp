// CUDA part of toporoute._core: the numpy (host memory) and DLPack (device memory) entry points of the CUDA
// kernels, and cuda_info(). Built in every configuration; without TOPOROUTE_WITH_CUDA every entry point
// raises BackendUnavailableError, so the module's surface does not depend on how it was built.
#include "cuda_bindings.hpp"

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "cuda_common.hpp"
#include "qmix_common.hpp"

#ifdef TOPOROUTE_WITH_CUDA
#include <algorithm>
#include <initializer_list>
#include <iterator>

#include "launch.hpp"
#endif

namespace toporoute::bindings {
namespace {

constexpr const char* kRouteHostDoc =
    "route on the GPU for C-contiguous numpy inputs: q, k float32 (B, N, D), active bool (B, N) or None.\n"
    "Returns (scores f32 (B,N,N), adjacency bool (B,N,N), inbox i32 (B,N,K), in_degree i32 (B,N)) as numpy\n"
    "arrays, K = k_in if k_in > 0 else max(N - 1, 0). Synchronous; releases the GIL.";
constexpr const char* kToposortHostDoc =
    "toposort on the GPU for C-contiguous numpy inputs: adj bool (B,N,N), weights float32 (B,N,N) or None,\n"
    "active bool (B,N) or None. Returns (order i32 (B,N), level i32 (B,N), removed bool (B,N,N),\n"
    "is_dag bool (B,)). Synchronous; releases the GIL.";
constexpr const char* kRouteDlpackDoc =
    "route on CUDA arrays passed as DLPack capsules (q, k; active or None). out: None to allocate the outputs\n"
    "on the device (returned as DLPack capsules), or a tuple of caller-allocated C-contiguous capsules: scores\n"
    "f32 (B,N,N), adjacency bool (B,N,N), inbox i32 (B,N,K), in_degree i32 (B,N). Enqueued on `stream` (a\n"
    "cudaStream_t as int, 0 = legacy default); does not synchronise: a non-finite row is reported by a later call\n"
    "on the device or by cuda_synchronize().";
constexpr const char* kToposortDlpackDoc =
    "toposort on CUDA arrays passed as DLPack capsules (adj; weights and active or None); out as for route:\n"
    "order i32 (B,N), level i32 (B,N), removed bool (B,N,N), is_dag bool (B,). Bad weights (non-finite,\n"
    "negative) are reported like route's non-finite rows. Enqueued on `stream`; does not synchronise.";

constexpr const char* kQMixWeightsDoc =
    "QMixWeightsCuda(config, agent, mixer=None, device=0): Agent Q-Mix weights copied to a GPU (the float32 C\n"
    "arrays of qmix_params.agent_keys / mixer_keys order; mixer None: no mixer).";
constexpr const char* kQMixForwardHostDoc =
    "qmix_forward on the GPU for C-contiguous numpy inputs: obs float32 (B,N,obs_dim), adj bool (B,N,N), hidden\n"
    "float32 (B,N,H) or None, active bool (B,N) or None. Returns (q f32 (B,N,A), hidden f32 (B,N,H)) as numpy\n"
    "arrays. Synchronous; releases the GIL.";
constexpr const char* kQMixMixHostDoc =
    "qmix_mix on the GPU for C-contiguous numpy inputs q_taken float32 (B,n_agents) and state float32 (B,S);\n"
    "returns q_tot f32 (B,). Synchronous; releases the GIL.";
constexpr const char* kQMixForwardDlpackDoc =
    "qmix_forward on CUDA arrays passed as DLPack capsules (on the weights' device); out as for route: q f32\n"
    "(B,N,A), hidden_out f32 (B,N,H). Enqueued on `stream`; non-finite rows are reported later (see route).";
constexpr const char* kQMixMixDlpackDoc =
    "qmix_mix on CUDA arrays passed as DLPack capsules; out as for route: q_tot f32 (B,). Enqueued on `stream`.";

/// Python handle of Agent Q-Mix weights on a GPU (empty in a build without CUDA).
struct QMixCudaHandle {
#ifdef TOPOROUTE_WITH_CUDA
  std::shared_ptr<const cuda::QMixDeviceWeights> weights;
#endif
};

#ifdef TOPOROUTE_WITH_CUDA

// ------------------------------------------------------------------ numpy (host memory) entry points

py::tuple route_cuda_host(const py::object& q_obj, const py::object& k_obj, const py::object& active_obj,
                          double tau, std::int64_t k_in, int device) {
  const RouteInputs in = route_inputs(q_obj, k_obj, active_obj, tau, k_in);
  require_c_contiguous(in.q, "q");
  require_c_contiguous(in.k, "k");
  require_c_contiguous(in.active, "active");
  const RouteOutputs out = route_outputs("route_cuda_host", in.args.B, in.args.N, in.args.K);
  run_core("route_cuda_host", [&] { return cuda::route_host(in.args, out.view, device); });
  return out.arrays;
}

py::tuple toposort_cuda_host(const py::object& adj_obj, const py::object& weights_obj, const py::object& active_obj,
                             int device) {
  const ToposortInputs in = toposort_inputs(adj_obj, weights_obj, active_obj);
  require_c_contiguous(in.adj, "adj");
  require_c_contiguous(in.weights, "weights");
  require_c_contiguous(in.active, "active");
  const ToposortOutputs out = toposort_outputs("toposort_cuda_host", in.args.B, in.args.N);
  run_core("toposort_cuda_host", [&] { return cuda::toposort_host(in.args, out.view, device); });
  return out.arrays;
}

// ------------------------------------------------------------------ DLPack (device memory) entry points

/// The reference's message for route's code (b * 2 + which) * N + n (which 0 = q, 1 = k).
DeviceError route_error(unsigned long long code, std::int64_t N) {
  const auto n = static_cast<unsigned long long>(N);
  const unsigned long long b = code / (2 * n), which = code / n % 2, agent = code % n;
  const char* name = which == 1 ? "k" : "q";
  return {"NonFiniteError", name,
          std::string(name) + " must be finite; got NaN or infinity at episode " + std::to_string(b) + ", agent " +
              std::to_string(agent)};
}

py::object route_cuda_dlpack(const py::object& q_obj, const py::object& k_obj, const py::object& active_obj,
                             const py::object& out_obj, double tau, std::int64_t k_in, std::uintptr_t stream) {
  RouteArgs args;
  Dims dims;
  const DeviceArray q = device_array(q_obj, "q", 3, DType::f32);
  dims.fill(q, "q", "BND", args.q, args.q_sb, args.q_sn);
  const DeviceArray k = device_array(k_obj, "k", 3, DType::f32);
  dims.fill(k, "k", "BND", args.k, args.k_sb, args.k_sn);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  dims.fill(active, "active", "BN", args.active, args.a_sb, args.a_sn);
  set_route_sizes(args, dims, tau, k_in);
  require_unit_last_stride(q, "q");
  require_unit_last_stride(k, "k");
  expect_same_device({{&q, "q"}, {&k, "k"}, {&active, "active"}});
  const int device = q.device;
  DeviceOutputs out("route", device, stream, out_obj);
  add_route_outputs(out, args);
  AsyncCall call(device, "route");
  out.allocate();
  const RouteOut o = route_outputs(out);
  raise_status(cuda::launch_route_on(device, args, o, call.sink(), stream_handle(stream)));
  call.commit([N = args.N](unsigned long long code) { return route_error(code, N); });
  return out.result();
}

/// The reference's message for toposort's weight code ((which * B + b) * N + src) * N + dst.
DeviceError toposort_error(unsigned long long code, std::int64_t B, std::int64_t N) {
  const auto nn = static_cast<unsigned long long>(N) * static_cast<unsigned long long>(N);
  const auto cells = static_cast<unsigned long long>(B) * nn;
  const bool negative = code >= cells;
  const unsigned long long cell = negative ? code - cells : code;
  const auto n = static_cast<unsigned long long>(N);
  const std::string at = "[" + std::to_string(cell / nn) + ", " + std::to_string(cell / n % n) + ", " +
                         std::to_string(cell % n) + "]";
  if (negative) return {"OutOfRangeError", "weights", "weights must be >= 0; got a negative weight at " + at};
  return {"NonFiniteError", "weights", "weights must be finite; got NaN or infinity at " + at};
}

py::object toposort_cuda_dlpack(const py::object& adj_obj, const py::object& weights_obj,
                                const py::object& active_obj, const py::object& out_obj, std::uintptr_t stream) {
  ToposortArgs args;
  Dims dims;
  const DeviceArray adj = device_array(adj_obj, "adj", 3, DType::mask);
  dims.fill(adj, "adj", "BNN", args.adj, args.adj_sb, args.adj_sr, args.adj_sc);
  const DeviceArray weights = optional_device_array(weights_obj, "weights", 3, DType::f32);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  dims.fill(weights, "weights", "BNN", args.weights, args.w_sb, args.w_sr, args.w_sc);
  dims.fill(active, "active", "BN", args.active, args.a_sb, args.a_sn);
  args.B = dims['B'];
  args.N = dims['N'];
  expect_same_device({{&adj, "adj"}, {&weights, "weights"}, {&active, "active"}});
  const int device = adj.device;
  DeviceOutputs out("toposort", device, stream, out_obj);
  out.add("order", DType::i32, {args.B, args.N});
  out.add("level", DType::i32, {args.B, args.N});
  out.add("removed", DType::mask, {args.B, args.N, args.N});
  out.add("is_dag", DType::mask, {args.B});
  AsyncCall call(device, "toposort");
  out.allocate();
  const ToposortOut o{out.data<std::int32_t>(0), out.data<std::int32_t>(1), out.data<std::uint8_t>(2),
                      out.data<std::uint8_t>(3)};
  raise_status(cuda::launch_toposort_on(device, args, o, call.sink(), stream_handle(stream)));
  call.commit([B = args.B, N = args.N](unsigned long long code) { return toposort_error(code, B, N); });
  return out.result();
}

// ------------------------------------------------------------------------------------------------ Q-Mix

QMixCudaHandle make_qmix_cuda(const py::handle& config, const py::handle& agent, const py::handle& mixer,
                              int device) {
  const QMixConfig c = qmix_config(config);
  const QMixTensors t = qmix_tensors(c, agent, mixer);
  QMixCudaHandle h;
  run_core("QMixWeightsCuda", [&] { return cuda::QMixDeviceWeights::create(c, t.agent, t.mixer, device, &h.weights); });
  return h;
}

py::tuple qmix_forward_cuda_host(const QMixCudaHandle& h, const py::object& obs, const py::object& adj,
                                 const py::object& hidden, const py::object& active) {
  const cuda::QMixDeviceWeights& w = *h.weights;
  const HostView o = host_view<float>(obs, "obs", 3), a = host_view<std::uint8_t>(adj, "adj", 3, true);
  const HostView hid = optional_host_view<float>(hidden, "hidden", 3);
  const HostView act = optional_host_view<std::uint8_t>(active, "active", 2, true);
  const QMixForwardArgs args = qmix_forward_args(w.config(), o, a, hid, act);
  for (const auto& [view, name] : {std::pair{&o, "obs"}, {&a, "adj"}, {&hid, "hidden"}, {&act, "active"}}) {
    require_c_contiguous(*view, name);
  }
  NewOutputs out("qmix_forward_cuda_host");
  out.add<float>({args.B, args.N, w.config().n_actions});
  out.add<float>({args.B, args.N, w.config().hidden});
  py::tuple arrays = out.allocate();
  const QMixForwardOut dst{out.data<float>(0), out.data<float>(1)};
  run_core("qmix_forward_cuda_host", [&] { return cuda::qmix_forward_host(w, args, dst); });
  return arrays;
}

py::object qmix_mix_cuda_host(const QMixCudaHandle& h, const py::object& q_taken, const py::object& state) {
  const cuda::QMixDeviceWeights& w = *h.weights;
  if (!w.has_mixer()) raise_no_mixer();
  const HostView q = host_view<float>(q_taken, "q_taken", 2), st = host_view<float>(state, "state", 2);
  const QMixMixArgs args = qmix_mix_args(w.config(), q, st);
  require_c_contiguous(q, "q_taken");
  require_c_contiguous(st, "state");
  NewOutputs out("qmix_mix_cuda_host");
  out.add<float>({args.B});
  py::object q_tot = out.allocate()[0];
  float* dst = out.data<float>(0);
  run_core("qmix_mix_cuda_host", [&] { return cuda::qmix_mix_host(w, args, dst); });
  return q_tot;
}

/// The weights' device, which device arrays must live on.
void expect_weights_device(const cuda::QMixDeviceWeights& w, const DeviceArray& a, const char* name) {
  if (a.device != w.device()) {
    raise_error("InvalidArgumentError", name,
                std::string(name) + " must be on the device of the weights (cuda:" + std::to_string(w.device()) +
                    "); got cuda:" + std::to_string(a.device));
  }
}

py::object qmix_forward_cuda_dlpack(const QMixCudaHandle& h, const py::object& obs_obj, const py::object& adj_obj,
                                    const py::object& hidden_obj, const py::object& active_obj,
                                    const py::object& out_obj, std::uintptr_t stream) {
  const cuda::QMixDeviceWeights& w = *h.weights;
  const QMixConfig& c = w.config();
  const DeviceArray obs = device_array(obs_obj, "obs", 3, DType::f32);
  const DeviceArray adj = device_array(adj_obj, "adj", 3, DType::mask);
  const DeviceArray hidden = optional_device_array(hidden_obj, "hidden", 3, DType::f32);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  const QMixForwardArgs args = qmix_forward_args(c, obs, adj, hidden, active);
  expect_same_device({{&obs, "obs"}, {&adj, "adj"}, {&hidden, "hidden"}, {&active, "active"}});
  expect_weights_device(w, obs, "obs");
  DeviceOutputs out("qmix_forward", w.device(), stream, out_obj);
  out.add("q", DType::f32, {args.B, args.N, c.n_actions});
  out.add("hidden_out", DType::f32, {args.B, args.N, c.hidden});
  AsyncCall call(w.device(), "qmix_forward");
  out.allocate();
  const QMixForwardOut o{out.data<float>(0), out.data<float>(1)};
  raise_status(cuda::launch_qmix_forward_on(w, args, o, call.sink(), stream_handle(stream)));
  call.commit([B = args.B, N = args.N](unsigned long long code) {
    const auto bn = static_cast<unsigned long long>(B * N), n = static_cast<unsigned long long>(N);
    const char* name = code / bn == 1 ? "hidden" : "obs";
    return DeviceError{"NonFiniteError", name,
                       std::string(name) + " must be finite; got NaN or infinity at episode " +
                           std::to_string(code % bn / n) + ", agent " + std::to_string(code % n)};
  });
  return out.result();
}

py::object qmix_mix_cuda_dlpack(const QMixCudaHandle& h, const py::object& q_taken_obj, const py::object& state_obj,
                                const py::object& out_obj, std::uintptr_t stream) {
  const cuda::QMixDeviceWeights& w = *h.weights;
  if (!w.has_mixer()) raise_no_mixer();
  const DeviceArray q_taken = device_array(q_taken_obj, "q_taken", 2, DType::f32);
  const DeviceArray state = device_array(state_obj, "state", 2, DType::f32);
  const QMixMixArgs args = qmix_mix_args(w.config(), q_taken, state);
  expect_same_device({{&q_taken, "q_taken"}, {&state, "state"}});
  expect_weights_device(w, q_taken, "q_taken");
  DeviceOutputs out("qmix_mix", w.device(), stream, out_obj);
  out.add("q_tot", DType::f32, {args.B});
  AsyncCall call(w.device(), "qmix_mix");
  out.allocate();
  raise_status(cuda::launch_qmix_mix_on(w, args, out.data<float>(0), call.sink(), stream_handle(stream)));
  call.commit([B = args.B](unsigned long long code) {
    const auto b = static_cast<unsigned long long>(B);
    const char* name = code / b == 1 ? "state" : "q_taken";
    return DeviceError{"NonFiniteError", name,
                       std::string(name) + " must be finite; got NaN or infinity at episode " +
                           std::to_string(code % b)};
  });
  return out.result();
}

#else  // built without CUDA

py::tuple route_cuda_host(const py::object&, const py::object&, const py::object&, double, std::int64_t, int) {
  cuda_unavailable();
}

py::tuple toposort_cuda_host(const py::object&, const py::object&, const py::object&, int) { cuda_unavailable(); }

py::object route_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&, double,
                             std::int64_t, std::uintptr_t) {
  cuda_unavailable();
}

py::object toposort_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&,
                                std::uintptr_t) {
  cuda_unavailable();
}

QMixCudaHandle make_qmix_cuda(const py::handle&, const py::handle&, const py::handle&, int) { cuda_unavailable(); }

py::tuple qmix_forward_cuda_host(const QMixCudaHandle&, const py::object&, const py::object&, const py::object&,
                                 const py::object&) {
  cuda_unavailable();
}

py::object qmix_mix_cuda_host(const QMixCudaHandle&, const py::object&, const py::object&) { cuda_unavailable(); }

py::object qmix_forward_cuda_dlpack(const QMixCudaHandle&, const py::object&, const py::object&, const py::object&,
                                    const py::object&, const py::object&, std::uintptr_t) {
  cuda_unavailable();
}

py::object qmix_mix_cuda_dlpack(const QMixCudaHandle&, const py::object&, const py::object&, const py::object&,
                                std::uintptr_t) {
  cuda_unavailable();
}

#endif  // TOPOROUTE_WITH_CUDA

}  // namespace

py::dict cuda_info() {
  py::dict info;
#ifdef TOPOROUTE_WITH_CUDA
  info["compiled"] = true;
  info["runtime_version"] = cuda::runtime_version();
  py::list archs, devices;
  for (const int a : cuda::compiled_architectures()) archs.append(a);
  for (const auto& name : cuda::device_names()) devices.append(name);
  info["architectures"] = archs;
  info["device_count"] = cuda::device_count();
  info["devices"] = devices;
#else
  info["compiled"] = false;
  info["runtime_version"] = py::none();
  info["architectures"] = py::list();
  info["device_count"] = 0;
  info["devices"] = py::list();
#endif
  return info;
}

void bind_cuda(py::module_& m) {
  using py::arg;
  m.def("route_cuda_host", &route_cuda_host, kRouteHostDoc, arg("q"), arg("k"), arg("active"), arg("tau"),
        arg("k_in"), arg("device") = 0);
  m.def("toposort_cuda_host", &toposort_cuda_host, kToposortHostDoc, arg("adj"), arg("weights"), arg("active"),
        arg("device") = 0);
  m.def("route_cuda_dlpack", &route_cuda_dlpack, kRouteDlpackDoc, arg("q"), arg("k"), arg("active"), arg("out"),
        arg("tau"), arg("k_in"), arg("stream"));
  m.def("toposort_cuda_dlpack", &toposort_cuda_dlpack, kToposortDlpackDoc, arg("adj"), arg("weights"),
        arg("active"), arg("out"), arg("stream"));
  py::class_<QMixCudaHandle>(m, "QMixWeightsCuda", kQMixWeightsDoc)
      .def(py::init(&make_qmix_cuda), arg("config"), arg("agent"), arg("mixer") = py::none(), arg("device") = 0);
  m.def("qmix_forward_cuda_host", &qmix_forward_cuda_host, kQMixForwardHostDoc, arg("weights"), arg("obs"), arg("adj"),
        arg("hidden"), arg("active"));
  m.def("qmix_mix_cuda_host", &qmix_mix_cuda_host, kQMixMixHostDoc, arg("weights"), arg("q_taken"), arg("state"));
  m.def("qmix_forward_cuda_dlpack", &qmix_forward_cuda_dlpack, kQMixForwardDlpackDoc, arg("weights"), arg("obs"),
        arg("adj"), arg("hidden"), arg("active"), arg("out"), arg("stream"));
  m.def("qmix_mix_cuda_dlpack", &qmix_mix_cuda_dlpack, kQMixMixDlpackDoc, arg("weights"), arg("q_taken"),
        arg("state"), arg("out"), arg("stream"));
  m.def("cuda_poll_errors", &poll_device_errors, arg("device"),
        "Raises the report of the earliest finished device-array call on `device` whose kernels found bad input\n"
        "(reads host memory only; calls still running are left for later).");
  m.def("cuda_synchronize", &synchronize_devices, arg("device") = -1,
        "Waits for the work on `device` (every device used when -1), then raises the first bad-input report of\n"
        "its finished device-array calls.");
  m.def("cuda_info", &cuda_info,
        "How the CUDA backend was built and what it sees: {'compiled', 'runtime_version', 'architectures', "
        "'device_count', 'devices'}.");
}

}  // namespace toporoute::bindings
