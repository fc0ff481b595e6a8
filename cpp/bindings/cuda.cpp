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
#include "qmix_common.hpp"

#ifdef TOPOROUTE_WITH_CUDA
#include <algorithm>
#include <initializer_list>
#include <iterator>

#include "launch.hpp"
#include "dlpack.hpp"
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
    "route on CUDA arrays passed as DLPack capsules (x.__dlpack__(stream=...)); outputs are caller-allocated\n"
    "C-contiguous arrays: scores f32 (B,N,N), adjacency bool (B,N,N), inbox i32 (B,N,K), in_degree i32 (B,N),\n"
    "err uint64 (1,) filled with 2**64-1 (lowered to (b*2 + which)*N + n for the first non-finite row,\n"
    "which 0 = q, 1 = k). Enqueued on `stream` (a cudaStream_t as int, 0 = default); does not synchronise.";
constexpr const char* kToposortDlpackDoc =
    "toposort on CUDA arrays passed as DLPack capsules; outputs caller-allocated and C-contiguous: order i32\n"
    "(B,N), level i32 (B,N), removed bool (B,N,N), is_dag bool (B,). weights must already be validated\n"
    "(finite, >= 0). Enqueued on `stream`; does not synchronise.";

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
    "qmix_forward on CUDA arrays passed as DLPack capsules (on the weights' device); outputs caller-allocated and\n"
    "C-contiguous: q f32 (B,N,A), hidden_out f32 (B,N,H), err uint64 (1,) filled with 2**64-1 (lowered to\n"
    "(which * B + b) * N + n for the first non-finite row, which 0 = obs, 1 = hidden). Enqueued on `stream`.";
constexpr const char* kQMixMixDlpackDoc =
    "qmix_mix on CUDA arrays passed as DLPack capsules; q_tot f32 (B,) and err uint64 (1,) caller-allocated\n"
    "(err lowered to which * B + b, which 0 = q_taken, 1 = state). Enqueued on `stream`.";

/// Python handle of Agent Q-Mix weights on a GPU (empty in a build without CUDA).
struct QMixCudaHandle {
#ifdef TOPOROUTE_WITH_CUDA
  std::shared_ptr<const cuda::QMixDeviceWeights> weights;
#endif
};

#ifdef TOPOROUTE_WITH_CUDA

// Axes of extent 1 and empty arrays impose no stride.
bool is_c_contiguous(const std::int64_t* shape, const std::int64_t* strides, std::size_t ndim) {
  for (std::size_t d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return true;
  }
  std::int64_t expected = 1;
  for (std::size_t d = ndim; d-- > 0;) {
    if (shape[d] > 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

/// Raises DTypeError unless a given view (HostView, FastView or DeviceArray) is C-contiguous.
template <class View>
void require_c_contiguous(const View& v, const char* name) {
  if (!v.present()) return;
  const std::size_t ndim = std::size(v.shape);
  if (!is_c_contiguous(std::data(v.shape), std::data(v.strides), ndim)) {
    const std::vector<std::int64_t> strides(std::data(v.strides), std::data(v.strides) + ndim);
    raise_error("DTypeError", name, std::string(name) + " must be C-contiguous; got strides " + shape_str(strides));
  }
}

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

enum class DType { f32, mask, i32, u64 };

const char* dtype_name(DType t) {
  static constexpr const char* kNames[] = {"float32", "bool (or uint8)", "int32", "uint64"};  // DType order
  return kNames[static_cast<int>(t)];
}

bool dtype_matches(const dlpack::DLDataType& dt, DType want) {
  if (dt.lanes != 1) return false;
  switch (want) {
    case DType::f32:
      return dt.code == dlpack::kDLFloat && dt.bits == 32;
    case DType::mask:
      return (dt.code == dlpack::kDLBool || dt.code == dlpack::kDLUInt) && dt.bits == 8;
    case DType::i32:
      return dt.code == dlpack::kDLInt && dt.bits == 32;
    case DType::u64:
      // int64 holding -1 has the same bits; frameworks without uint64 kernels hand over int64
      return (dt.code == dlpack::kDLUInt || dt.code == dlpack::kDLInt) && dt.bits == 64;
  }
  return false;
}

/// A CUDA array borrowed from a DLPack capsule (the capsule stays unconsumed; its producer owns the memory).
struct DeviceArray {
  void* data = nullptr;
  int device = -1;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  bool present() const { return device >= 0; }
};

DeviceArray device_array(const py::handle& obj, const char* name, int ndim, DType want) {
  PyObject* cap = obj.ptr();
  if (!PyCapsule_CheckExact(cap)) {
    raise_error("DTypeError", name,
                std::string(name) + " must be a DLPack capsule from x.__dlpack__(stream=...); got " +
                    std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  if (!PyCapsule_IsValid(cap, dlpack::kCapsuleName)) {
    const char* got = PyCapsule_GetName(cap);
    PyErr_Clear();
    raise_error("InvalidArgumentError", name,
                std::string(name) + " must be an unconsumed DLPack capsule named 'dltensor'; got one named '" +
                    (got != nullptr ? got : "") + "'");
  }
  auto* managed = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap, dlpack::kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  const dlpack::DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != dlpack::kDLCUDA && t.device.device_type != dlpack::kDLCUDAManaged) {
    raise_error("InvalidArgumentError", name,
                std::string(name) + " must be a CUDA device array; got DLPack device type " +
                    std::to_string(t.device.device_type));
  }
  if (!dtype_matches(t.dtype, want)) {
    raise_error("DTypeError", name,
                std::string(name) + " must have dtype " + dtype_name(want) + "; got DLPack dtype (code " +
                    std::to_string(t.dtype.code) + ", bits " + std::to_string(t.dtype.bits) + ", lanes " +
                    std::to_string(t.dtype.lanes) + ")");
  }
  if (t.ndim != ndim) {
    raise_error("ShapeError", name,
                std::string(name) + " must have " + std::to_string(ndim) + " dimensions; got " + std::to_string(t.ndim));
  }
  DeviceArray a;
  a.device = t.device.device_id;
  a.data = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  a.shape.assign(t.shape, t.shape + ndim);
  if (t.strides != nullptr) {
    a.strides.assign(t.strides, t.strides + ndim);
  } else {
    a.strides.assign(ndim, 1);
    for (int d = ndim - 1; d > 0; --d) a.strides[d - 1] = a.strides[d] * a.shape[d];
  }
  return a;
}

DeviceArray optional_device_array(const py::handle& obj, const char* name, int ndim, DType want) {
  if (obj.is_none()) return {};
  return device_array(obj, name, ndim, want);
}

void expect_device_shape(const DeviceArray& a, const char* name, const std::vector<std::int64_t>& expected) {
  if (a.shape != expected) {
    raise_error("ShapeError", name,
                std::string(name) + " must have shape " + shape_str(expected) + "; got " + shape_str(a.shape));
  }
}

void expect_same_device(std::initializer_list<std::pair<const DeviceArray*, const char*>> arrays) {
  const auto& first = *arrays.begin();
  for (const auto& [array, name] : arrays) {
    if (array->present() && array->device != first.first->device) {
      raise_error("InvalidArgumentError", name,
                  std::string(name) + " must be on the same CUDA device as " + first.second + " (cuda:" +
                      std::to_string(first.first->device) + "); got cuda:" + std::to_string(array->device));
    }
  }
}

void* stream_handle(std::uintptr_t stream) { return reinterpret_cast<void*>(stream); }

void route_cuda_dlpack(const py::object& q_obj, const py::object& k_obj, const py::object& active_obj,
                       const py::object& scores_obj, const py::object& adjacency_obj, const py::object& inbox_obj,
                       const py::object& in_degree_obj, const py::object& err_obj, double tau, std::int64_t k_in,
                       std::uintptr_t stream) {
  RouteArgs args;
  RouteOut out;
  Dims dims;
  const DeviceArray q = device_array(q_obj, "q", 3, DType::f32);
  dims.fill(q, "q", "BND", args.q, args.q_sb, args.q_sn);
  const DeviceArray k = device_array(k_obj, "k", 3, DType::f32);
  dims.fill(k, "k", "BND", args.k, args.k_sb, args.k_sn);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  dims.fill(active, "active", "BN", args.active, args.a_sb, args.a_sn);
  set_route_sizes(args, dims, tau, k_in);
  dims.set('K', args.K);
  const DeviceArray scores = device_array(scores_obj, "scores", 3, DType::f32);
  const DeviceArray adjacency = device_array(adjacency_obj, "adjacency", 3, DType::mask);
  const DeviceArray inbox = device_array(inbox_obj, "inbox", 3, DType::i32);
  const DeviceArray in_degree = device_array(in_degree_obj, "in_degree", 2, DType::i32);
  const DeviceArray err = device_array(err_obj, "err", 1, DType::u64);
  dims.fill(scores, "scores", "BNN", out.scores);
  dims.fill(adjacency, "adjacency", "BNN", out.adjacency);
  dims.fill(inbox, "inbox", "BNK", out.inbox);
  dims.fill(in_degree, "in_degree", "BN", out.in_degree);
  dims.check(err.shape.data(), "1", "err");
  for (const auto& [array, name] : {std::pair{&scores, "scores"}, {&adjacency, "adjacency"}, {&inbox, "inbox"},
                                    {&in_degree, "in_degree"}}) {
    require_c_contiguous(*array, name);
  }
  if (args.D > 1 && q.strides[2] != 1) raise_error("DTypeError", "q", "q must have unit stride along D");
  if (args.D > 1 && k.strides[2] != 1) raise_error("DTypeError", "k", "k must have unit stride along D");
  expect_same_device({{&q, "q"}, {&k, "k"}, {&active, "active"}, {&scores, "scores"}, {&adjacency, "adjacency"},
                      {&inbox, "inbox"}, {&in_degree, "in_degree"}, {&err, "err"}});
  run_core("route_cuda_dlpack", [&] {
    return cuda::launch_route_on(q.device, args, out, static_cast<unsigned long long*>(err.data),
                                 stream_handle(stream));
  });
}

void toposort_cuda_dlpack(const py::object& adj_obj, const py::object& weights_obj, const py::object& active_obj,
                          const py::object& order_obj, const py::object& level_obj, const py::object& removed_obj,
                          const py::object& is_dag_obj, std::uintptr_t stream) {
  ToposortArgs args;
  ToposortOut out;
  Dims dims;
  const DeviceArray adj = device_array(adj_obj, "adj", 3, DType::mask);
  dims.fill(adj, "adj", "BNN", args.adj, args.adj_sb, args.adj_sr, args.adj_sc);
  const DeviceArray weights = optional_device_array(weights_obj, "weights", 3, DType::f32);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  dims.fill(weights, "weights", "BNN", args.weights, args.w_sb, args.w_sr, args.w_sc);
  dims.fill(active, "active", "BN", args.active, args.a_sb, args.a_sn);
  args.B = dims['B'];
  args.N = dims['N'];
  const DeviceArray order = device_array(order_obj, "order", 2, DType::i32);
  const DeviceArray level = device_array(level_obj, "level", 2, DType::i32);
  const DeviceArray removed = device_array(removed_obj, "removed", 3, DType::mask);
  const DeviceArray is_dag = device_array(is_dag_obj, "is_dag", 1, DType::mask);
  dims.fill(order, "order", "BN", out.order);
  dims.fill(level, "level", "BN", out.level);
  dims.fill(removed, "removed", "BNN", out.removed);
  dims.fill(is_dag, "is_dag", "B", out.is_dag);
  for (const auto& [array, name] :
       {std::pair{&order, "order"}, {&level, "level"}, {&removed, "removed"}, {&is_dag, "is_dag"}}) {
    require_c_contiguous(*array, name);
  }
  expect_same_device({{&adj, "adj"}, {&weights, "weights"}, {&active, "active"}, {&order, "order"},
                      {&level, "level"}, {&removed, "removed"}, {&is_dag, "is_dag"}});
  run_core("toposort_cuda_dlpack", [&] { return cuda::launch_toposort_on(adj.device, args, out, stream_handle(stream)); });
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

void qmix_forward_cuda_dlpack(const QMixCudaHandle& h, const py::object& obs_obj, const py::object& adj_obj,
                              const py::object& hidden_obj, const py::object& active_obj, const py::object& q_obj,
                              const py::object& hidden_out_obj, const py::object& err_obj, std::uintptr_t stream) {
  const cuda::QMixDeviceWeights& w = *h.weights;
  const QMixConfig& c = w.config();
  const DeviceArray obs = device_array(obs_obj, "obs", 3, DType::f32);
  const DeviceArray adj = device_array(adj_obj, "adj", 3, DType::mask);
  const DeviceArray hidden = optional_device_array(hidden_obj, "hidden", 3, DType::f32);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  const QMixForwardArgs args = qmix_forward_args(c, obs, adj, hidden, active);
  const DeviceArray q = device_array(q_obj, "q", 3, DType::f32);
  const DeviceArray hidden_out = device_array(hidden_out_obj, "hidden_out", 3, DType::f32);
  const DeviceArray err = device_array(err_obj, "err", 1, DType::u64);
  expect_device_shape(q, "q", {args.B, args.N, c.n_actions});
  expect_device_shape(hidden_out, "hidden_out", {args.B, args.N, c.hidden});
  expect_device_shape(err, "err", {1});
  require_c_contiguous(q, "q");
  require_c_contiguous(hidden_out, "hidden_out");
  expect_same_device({{&obs, "obs"}, {&adj, "adj"}, {&hidden, "hidden"}, {&active, "active"}, {&q, "q"},
                      {&hidden_out, "hidden_out"}, {&err, "err"}});
  if (obs.device != w.device()) {
    raise_error("InvalidArgumentError", "obs",
                "obs must be on the device of the weights (cuda:" + std::to_string(w.device()) + "); got cuda:" +
                    std::to_string(obs.device));
  }
  const QMixForwardOut out{static_cast<float*>(q.data), static_cast<float*>(hidden_out.data)};
  run_core("qmix_forward_cuda_dlpack", [&] {
    return cuda::launch_qmix_forward_on(w, args, out, static_cast<unsigned long long*>(err.data),
                                        stream_handle(stream));
  });
}

void qmix_mix_cuda_dlpack(const QMixCudaHandle& h, const py::object& q_taken_obj, const py::object& state_obj,
                          const py::object& q_tot_obj, const py::object& err_obj, std::uintptr_t stream) {
  const cuda::QMixDeviceWeights& w = *h.weights;
  if (!w.has_mixer()) raise_no_mixer();
  const DeviceArray q_taken = device_array(q_taken_obj, "q_taken", 2, DType::f32);
  const DeviceArray state = device_array(state_obj, "state", 2, DType::f32);
  const QMixMixArgs args = qmix_mix_args(w.config(), q_taken, state);
  const DeviceArray q_tot = device_array(q_tot_obj, "q_tot", 1, DType::f32);
  const DeviceArray err = device_array(err_obj, "err", 1, DType::u64);
  expect_device_shape(q_tot, "q_tot", {args.B});
  expect_device_shape(err, "err", {1});
  require_c_contiguous(q_tot, "q_tot");
  expect_same_device({{&q_taken, "q_taken"}, {&state, "state"}, {&q_tot, "q_tot"}, {&err, "err"}});
  if (q_taken.device != w.device()) {
    raise_error("InvalidArgumentError", "q_taken",
                "q_taken must be on the device of the weights (cuda:" + std::to_string(w.device()) + "); got cuda:" +
                    std::to_string(q_taken.device));
  }
  run_core("qmix_mix_cuda_dlpack", [&] {
    return cuda::launch_qmix_mix_on(w, args, static_cast<float*>(q_tot.data),
                                    static_cast<unsigned long long*>(err.data), stream_handle(stream));
  });
}

#else  // built without CUDA

[[noreturn]] void unavailable() {
  raise_error("BackendUnavailableError", "",
              "toporoute was built without CUDA (no CUDA compiler was found when the package was built); "
              "reinstall with nvcc available (TOPOROUTE_CUDA=ON), or use backend='cpu'");
}

py::tuple route_cuda_host(const py::object&, const py::object&, const py::object&, double, std::int64_t, int) {
  unavailable();
}

py::tuple toposort_cuda_host(const py::object&, const py::object&, const py::object&, int) { unavailable(); }

void route_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                       const py::object&, const py::object&, const py::object&, double, std::int64_t,
                       std::uintptr_t) {
  unavailable();
}

void toposort_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&,
                          const py::object&, const py::object&, const py::object&, std::uintptr_t) {
  unavailable();
}

QMixCudaHandle make_qmix_cuda(const py::handle&, const py::handle&, const py::handle&, int) { unavailable(); }

py::tuple qmix_forward_cuda_host(const QMixCudaHandle&, const py::object&, const py::object&, const py::object&,
                                 const py::object&) {
  unavailable();
}

py::object qmix_mix_cuda_host(const QMixCudaHandle&, const py::object&, const py::object&) { unavailable(); }

void qmix_forward_cuda_dlpack(const QMixCudaHandle&, const py::object&, const py::object&, const py::object&,
                              const py::object&, const py::object&, const py::object&, const py::object&,
                              std::uintptr_t) {
  unavailable();
}

void qmix_mix_cuda_dlpack(const QMixCudaHandle&, const py::object&, const py::object&, const py::object&,
                          const py::object&, std::uintptr_t) {
  unavailable();
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
  m.def("route_cuda_dlpack", &route_cuda_dlpack, kRouteDlpackDoc, arg("q"), arg("k"), arg("active"), arg("scores"),
        arg("adjacency"), arg("inbox"), arg("in_degree"), arg("err"), arg("tau"), arg("k_in"), arg("stream"));
  m.def("toposort_cuda_dlpack", &toposort_cuda_dlpack, kToposortDlpackDoc, arg("adj"), arg("weights"),
        arg("active"), arg("order"), arg("level"), arg("removed"), arg("is_dag"), arg("stream"));
  py::class_<QMixCudaHandle>(m, "QMixWeightsCuda", kQMixWeightsDoc)
      .def(py::init(&make_qmix_cuda), arg("config"), arg("agent"), arg("mixer") = py::none(), arg("device") = 0);
  m.def("qmix_forward_cuda_host", &qmix_forward_cuda_host, kQMixForwardHostDoc, arg("weights"), arg("obs"), arg("adj"),
        arg("hidden"), arg("active"));
  m.def("qmix_mix_cuda_host", &qmix_mix_cuda_host, kQMixMixHostDoc, arg("weights"), arg("q_taken"), arg("state"));
  m.def("qmix_forward_cuda_dlpack", &qmix_forward_cuda_dlpack, kQMixForwardDlpackDoc, arg("weights"), arg("obs"),
        arg("adj"), arg("hidden"), arg("active"), arg("q"), arg("hidden_out"), arg("err"), arg("stream"));
  m.def("qmix_mix_cuda_dlpack", &qmix_mix_cuda_dlpack, kQMixMixDlpackDoc, arg("weights"), arg("q_taken"),
        arg("state"), arg("q_tot"), arg("err"), arg("stream"));
  m.def("cuda_info", &cuda_info,
        "How the CUDA backend was built and what it sees: {'compiled', 'runtime_version', 'architectures', "
        "'device_count', 'devices'}.");
}

}  // namespace toporoute::bindings
