// CUDA entry points of graph_stats, conductor_density and bandit_select: numpy (host memory, synchronous) and
// DLPack (device memory, asynchronous; see cuda_common.hpp). Without TOPOROUTE_WITH_CUDA each raises
// BackendUnavailableError, so the module's surface does not depend on the build.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bandit_args.hpp"
#include "common.hpp"
#include "cuda_bindings.hpp"
#include "cuda_common.hpp"
#include "density_args.hpp"
#include "graph_stats_args.hpp"

#ifdef TOPOROUTE_WITH_CUDA
#include "launch_stats.hpp"
#endif

namespace toporoute::bindings {
namespace {

constexpr const char* kGraphStatsHostDoc =
    "graph_stats on the GPU for C-contiguous numpy inputs: adj bool (B,N,N), active bool (B,N) or None, prev bool\n"
    "(B,N,N) or None. Returns (edges i64 (B,), density f64 (B,), in_degree i32 (B,N), out_degree i32 (B,N),\n"
    "reciprocity f64 (B,), jaccard f64 (B,) or None). Synchronous; releases the GIL.";
constexpr const char* kGraphStatsDlpackDoc =
    "graph_stats on CUDA arrays passed as DLPack capsules (adj; active and prev or None). out: None to allocate\n"
    "the outputs on the device, or a tuple of caller-allocated C-contiguous capsules in the order of the returned\n"
    "tuple: edges i64 (B,), density f64 (B,), in_degree i32 (B,N), out_degree i32 (B,N), reciprocity f64 (B,),\n"
    "and jaccard f64 (B,) only when prev is given (5 outputs without it). Enqueued on `stream`.";
constexpr const char* kDensityHostDoc =
    "conductor_density on the GPU for contiguous 1-D int64 numpy arrays of one length: returns (s_node, s_edge,\n"
    "s_depth, s_complex, reward) f64. Synchronous; bad input raises as the CPU op does.";
constexpr const char* kDensityDlpackDoc =
    "conductor_density on contiguous 1-D int64 CUDA arrays (DLPack capsules) of one length; out as for\n"
    "graph_stats: five f64 (n,). Enqueued on `stream`; bad input is reported by a later call on the device or by\n"
    "cuda_synchronize().";

constexpr const char* kBanditHostDoc =
    "bandit_select on the GPU for C-contiguous numpy inputs: adj bool (B,N,N), alpha, beta float32 (B,N), weights\n"
    "float32 (B,N,N) or None, active bool (B,N) or None, then k, seed, step, mode (0 thompson, 1 mean) and\n"
    "graph_offset as for _core.bandit_select. Returns (chosen bool (B,N,N), choices i32 (B,N,k), theta f32 (B,N)).\n"
    "Synchronous; bad input raises as the CPU op does.";
constexpr const char* kBanditDlpackDoc =
    "bandit_select on CUDA arrays passed as DLPack capsules (adj, alpha, beta; weights and active or None); out\n"
    "as for graph_stats: chosen bool (B,N,N), choices i32 (B,N,k), theta f32 (B,N); then the scalars of\n"
    "bandit_select_cuda_host and the stream. Enqueued on `stream`; bad input is reported by a later call on the\n"
    "device or by cuda_synchronize().";

#ifdef TOPOROUTE_WITH_CUDA

// --------------------------------------------------------------------------------------------- graph_stats

py::tuple graph_stats_cuda_host(const py::handle& adj, const py::handle& active, const py::handle& prev, int device) {
  GraphStatsArgs a;
  Dims dims;
  const auto adj_v = dims.view(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  const auto prev_v = dims.optional_view(prev, "prev", "BNN", a.prev, a.p_sb, a.p_sr, a.p_sc);
  const auto act_v = dims.optional_view(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  require_c_contiguous(adj_v, "adj");
  require_c_contiguous(prev_v, "prev");
  require_c_contiguous(act_v, "active");
  set_graph_sizes(a, dims);
  GraphStatsOut o;
  NewOutputs out("graph_stats_cuda_host");
  add_graph_stats_outputs(out, a, a.prev != nullptr, o);
  return out.run([&] { return cuda::graph_stats_host(a, o, device); });
}

py::object graph_stats_cuda_dlpack(const py::object& adj_obj, const py::object& active_obj,
                                   const py::object& prev_obj, const py::object& out_obj, std::uintptr_t stream) {
  GraphStatsArgs a;
  Dims dims;
  const DeviceArray adj = device_array(adj_obj, "adj", 3, DType::mask);
  dims.fill(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  const DeviceArray prev = optional_device_array(prev_obj, "prev", 3, DType::mask);
  dims.fill(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  dims.fill(prev, "prev", "BNN", a.prev, a.p_sb, a.p_sr, a.p_sc);
  a.B = dims['B'];
  a.N = dims['N'];
  expect_same_device({{&adj, "adj"}, {&active, "active"}, {&prev, "prev"}});
  const int device = adj.device;
  poll_device_errors(device);  // an earlier call's bad input is raised before this call runs
  DeviceOutputs out("graph_stats", device, stream, out_obj);
  out.add("edges", DType::i64, {a.B});
  out.add("density", DType::f64, {a.B});
  out.add("in_degree", DType::i32, {a.B, a.N});
  out.add("out_degree", DType::i32, {a.B, a.N});
  out.add("reciprocity", DType::f64, {a.B});
  if (prev.present()) out.add("jaccard", DType::f64, {a.B});
  out.allocate();
  const GraphStatsOut o{out.data<std::int64_t>(0), out.data<double>(1), out.data<std::int32_t>(2),
                        out.data<std::int32_t>(3), out.data<double>(4),
                        prev.present() ? out.data<double>(5) : nullptr};
  raise_status(cuda::launch_graph_stats_on(device, a, o, stream_handle(stream)));
  return out.result();
}

// --------------------------------------------------------------------------------------- conductor_density

constexpr const char* kDensityNames[4] = {"nodes", "edges", "steps", "n_max"};

py::tuple conductor_density_cuda_host(const py::handle& nodes, const py::handle& edges, const py::handle& steps,
                                      const py::handle& n_max, int device) {
  const DensityArgs a = density_inputs(nodes, edges, steps, n_max);
  DensityOut o;
  NewOutputs out("conductor_density_cuda_host");
  add_density_outputs(out, a.n, o);
  return out.run([&] { return cuda::conductor_density_host(a, o, device); });
}

// The device report x * 4 + check, worded like the CPU's messages (the value itself is not in the report).
DeviceError density_error(unsigned long long code) {
  const std::string at = " at index " + std::to_string(code / 4);
  switch (code % 4) {
    case 0:
      return {"OutOfRangeError", "nodes", "nodes must be >= 1; got a smaller value" + at};
    case 1:
      return {"OutOfRangeError", "edges", "edges must be >= 0; got a negative value" + at};
    case 2:
      return {"OutOfRangeError", "steps", "steps must be in [1, nodes]; got a value outside" + at};
    default:
      return {"OutOfRangeError", "n_max", "n_max must be >= 1; got a smaller value" + at};
  }
}

py::object conductor_density_cuda_dlpack(const py::object& nodes_obj, const py::object& edges_obj,
                                         const py::object& steps_obj, const py::object& n_max_obj,
                                         const py::object& out_obj, std::uintptr_t stream) {
  DensityArgs a;
  const py::object* objs[4] = {&nodes_obj, &edges_obj, &steps_obj, &n_max_obj};
  const std::int64_t** data[4] = {&a.nodes, &a.edges, &a.steps, &a.n_max};
  DeviceArray arrays[4];
  for (int i = 0; i < 4; ++i) {
    arrays[i] = device_array(*objs[i], kDensityNames[i], 1, DType::i64);
    require_c_contiguous(arrays[i], kDensityNames[i]);
    if (i > 0 && arrays[i].shape[0] != arrays[0].shape[0]) {
      raise_error("ShapeError", kDensityNames[i],
                  std::string(kDensityNames[i]) + " must have the length of nodes (" +
                      std::to_string(arrays[0].shape[0]) + "); got " + std::to_string(arrays[i].shape[0]));
    }
    *data[i] = static_cast<const std::int64_t*>(arrays[i].data);
  }
  a.n = arrays[0].shape[0];
  expect_same_device({{&arrays[0], "nodes"}, {&arrays[1], "edges"}, {&arrays[2], "steps"}, {&arrays[3], "n_max"}});
  const int device = arrays[0].device;
  DeviceOutputs out("conductor_density", device, stream, out_obj);
  for (const char* name : {"s_node", "s_edge", "s_depth", "s_complex", "reward"}) out.add(name, DType::f64, {a.n});
  AsyncCall call(device, "conductor_density");
  out.allocate();
  const DensityOut o{out.data<double>(0), out.data<double>(1), out.data<double>(2), out.data<double>(3),
                     out.data<double>(4)};
  raise_status(cuda::launch_conductor_density_on(device, a, o, call.sink(), stream_handle(stream)));
  call.commit(density_error);
  return out.result();
}

// ------------------------------------------------------------------------------------------- bandit_select

py::tuple bandit_select_cuda_host(const py::handle& adj, const py::handle& alpha, const py::handle& beta,
                                  const py::handle& weights, const py::handle& active, std::int64_t k,
                                  std::uint64_t seed, std::uint64_t step, int mode, std::uint64_t graph_offset,
                                  int device) {
  BanditSelectInputs in = bandit_select_inputs(adj, alpha, beta, weights, active);
  require_c_contiguous(in.adj, "adj");
  require_c_contiguous(in.alpha, "alpha");
  require_c_contiguous(in.beta, "beta");
  require_c_contiguous(in.weights, "weights");
  require_c_contiguous(in.active, "active");
  set_bandit_scalars(in.args, k, seed, step, mode, graph_offset);
  BanditSelectOut o;
  NewOutputs out("bandit_select_cuda_host");
  add_bandit_select_outputs(out, in.args, o);
  return out.run([&] { return cuda::bandit_select_host(in.args, o, device); });
}

// The device report (fault * B + b) * P + where (launch_stats.hpp), worded like the CPU's messages (the value
// itself is not in the report).
DeviceError bandit_error(unsigned long long code, std::int64_t B, std::int64_t N) {
  const auto P = static_cast<unsigned long long>(N * N > 0 ? N * N : 1);
  const auto Bu = static_cast<unsigned long long>(B > 0 ? B : 1);
  const unsigned long long where = code % P, b = code / P % Bu, fault = code / P / Bu;
  const char* name = fault < 2 ? "alpha" : fault < 4 ? "beta" : "weights";
  std::string at = " at graph " + std::to_string(b) + ", node ";
  if (fault >= 4) {
    const auto n = static_cast<unsigned long long>(N);
    at += std::to_string(where / n) + ", successor " + std::to_string(where % n);
  } else {
    at += std::to_string(where);
  }
  if (fault % 2 == 0) return {"NonFiniteError", name, std::string(name) + " must be finite; got NaN or infinity" + at};
  const char* want = fault == 5 ? ">= 0; got a negative value" : "> 0; got a value <= 0";
  return {"OutOfRangeError", name, std::string(name) + " must be " + want + at};
}

py::object bandit_select_cuda_dlpack(const py::object& adj_obj, const py::object& alpha_obj,
                                     const py::object& beta_obj, const py::object& weights_obj,
                                     const py::object& active_obj, const py::object& out_obj, std::int64_t k,
                                     std::uint64_t seed, std::uint64_t step, int mode, std::uint64_t graph_offset,
                                     std::uintptr_t stream) {
  BanditSelectArgs a;
  Dims dims;
  const DeviceArray adj = device_array(adj_obj, "adj", 3, DType::mask);
  dims.fill(adj, "adj", "BNN", a.adj, a.adj_sb, a.adj_sr, a.adj_sc);
  const DeviceArray alpha = device_array(alpha_obj, "alpha", 2, DType::f32);
  dims.fill(alpha, "alpha", "BN", a.alpha, a.al_sb, a.al_sn);
  const DeviceArray beta = device_array(beta_obj, "beta", 2, DType::f32);
  dims.fill(beta, "beta", "BN", a.beta, a.be_sb, a.be_sn);
  const DeviceArray weights = optional_device_array(weights_obj, "weights", 3, DType::f32);
  dims.fill(weights, "weights", "BNN", a.weights, a.w_sb, a.w_sr, a.w_sc);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  dims.fill(active, "active", "BN", a.active, a.a_sb, a.a_sn);
  a.B = dims['B'];
  a.N = dims['N'];
  set_bandit_scalars(a, k, seed, step, mode, graph_offset);
  expect_same_device(
      {{&adj, "adj"}, {&alpha, "alpha"}, {&beta, "beta"}, {&weights, "weights"}, {&active, "active"}});
  const int device = adj.device;
  DeviceOutputs out("bandit_select", device, stream, out_obj);
  out.add("chosen", DType::mask, {a.B, a.N, a.N});
  out.add("choices", DType::i32, {a.B, a.N, k});
  out.add("theta", DType::f32, {a.B, a.N});
  AsyncCall call(device, "bandit_select");
  out.allocate();
  const BanditSelectOut o{out.data<std::uint8_t>(0), out.data<std::int32_t>(1), out.data<float>(2)};
  raise_status(cuda::launch_bandit_select_on(device, a, o, call.sink(), stream_handle(stream)));
  call.commit([B = a.B, N = a.N](unsigned long long code) { return bandit_error(code, B, N); });
  return out.result();
}

#else  // built without CUDA

py::tuple graph_stats_cuda_host(const py::handle&, const py::handle&, const py::handle&, int) { cuda_unavailable(); }

py::object graph_stats_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&,
                                   std::uintptr_t) {
  cuda_unavailable();
}

py::tuple conductor_density_cuda_host(const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                                      int) {
  cuda_unavailable();
}

py::object conductor_density_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&,
                                         const py::object&, std::uintptr_t) {
  cuda_unavailable();
}

py::tuple bandit_select_cuda_host(const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                                  const py::handle&, std::int64_t, std::uint64_t, std::uint64_t, int, std::uint64_t,
                                  int) {
  cuda_unavailable();
}

py::object bandit_select_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&,
                                     const py::object&, const py::object&, std::int64_t, std::uint64_t, std::uint64_t,
                                     int, std::uint64_t, std::uintptr_t) {
  cuda_unavailable();
}

#endif  // TOPOROUTE_WITH_CUDA

}  // namespace

void bind_cuda_stats(py::module_& m) {
  using py::arg;
  m.def("graph_stats_cuda_host", &graph_stats_cuda_host, kGraphStatsHostDoc, arg("adj"), arg("active"), arg("prev"),
        arg("device") = 0);
  m.def("graph_stats_cuda_dlpack", &graph_stats_cuda_dlpack, kGraphStatsDlpackDoc, arg("adj"), arg("active"),
        arg("prev"), arg("out"), arg("stream"));
  m.def("conductor_density_cuda_host", &conductor_density_cuda_host, kDensityHostDoc, arg("nodes"), arg("edges"),
        arg("steps"), arg("n_max"), arg("device") = 0);
  m.def("conductor_density_cuda_dlpack", &conductor_density_cuda_dlpack, kDensityDlpackDoc, arg("nodes"),
        arg("edges"), arg("steps"), arg("n_max"), arg("out"), arg("stream"));
  m.def("bandit_select_cuda_host", &bandit_select_cuda_host, kBanditHostDoc, arg("adj"), arg("alpha"), arg("beta"),
        arg("weights"), arg("active"), arg("k"), arg("seed"), arg("step"), arg("mode"), arg("graph_offset"),
        arg("device") = 0);
  m.def("bandit_select_cuda_dlpack", &bandit_select_cuda_dlpack, kBanditDlpackDoc, arg("adj"), arg("alpha"),
        arg("beta"), arg("weights"), arg("active"), arg("out"), arg("k"), arg("seed"), arg("step"), arg("mode"),
        arg("graph_offset"), arg("stream"));
}

}  // namespace toporoute::bindings
