// mean_pool and route_indexed (with its pool= form) on the GPU: the numpy (host memory) and DLPack (device memory)
// entry points of kernels/pool.cu, and the decoding of their error words into the reference's exceptions.
// Without TOPOROUTE_WITH_CUDA every entry point raises BackendUnavailableError (same module surface).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "cuda_bindings.hpp"
#include "cuda_common.hpp"
#include "pool_args.hpp"

#ifdef TOPOROUTE_WITH_CUDA
#include "dlpack.hpp"
#include "launch_pool.hpp"
#endif

namespace toporoute::bindings {
namespace {

constexpr const char* kMeanPoolHostDoc =
    "mean_pool on the GPU for C-contiguous numpy inputs: hidden float32 (n,L,D), mask bool/int32/int64 (n,L),\n"
    "out float32 (M,D) written in place or None, rows int32/int64 (n,) or None. Returns out, or a new (n,D)\n"
    "array. Synchronous; errors as the reference's (nothing is written to out when a check fails).";
constexpr const char* kMeanPoolDlpackDoc =
    "mean_pool on CUDA arrays passed as DLPack capsules: hidden, mask, out (written in place) or None, rows or\n"
    "None. Returns a capsule of a new (n,D) float32 array when out is None, else None. Enqueued on `stream`;\n"
    "does not synchronise: bad input is reported by a later call on the device or by cuda_synchronize().";
constexpr const char* kRouteIndexedHostDoc =
    "route_indexed on the GPU for C-contiguous numpy inputs: table float32 (M,D), q_rows and k_rows int32/int64\n"
    "(B,N), active bool (B,N) or None; hiddens, masks, rows: lists of the pool inputs (empty: none), pooled\n"
    "into table in place first. Returns (scores, adjacency, inbox, in_degree) as numpy arrays. Synchronous.";
constexpr const char* kRouteIndexedDlpackDoc =
    "route_indexed on CUDA arrays passed as DLPack capsules (the pool inputs as lists of capsules); out as for\n"
    "route_cuda_dlpack. Enqueued on `stream`; does not synchronise (see mean_pool_cuda_dlpack).";

#ifdef TOPOROUTE_WITH_CUDA

// ---------------------------------------------------------------------------------------- error words

/// What the decoder of a call's error word needs: the pool inputs' sizes and the route's.
struct PoolErrorContext {
  const char* group = nullptr;  // "pool" when the inputs are route_indexed's pool= triples
  std::vector<std::int64_t> n, L;
  std::int64_t M = 0, B = 0, N = 0;
  cuda::PoolCodes codes;
};

PoolErrorContext error_context(const char* group, const std::vector<cuda::PoolInput>& inputs, std::int64_t M,
                               std::int64_t B, std::int64_t N) {
  PoolErrorContext c;
  c.group = group;
  for (const cuda::PoolInput& in : inputs) {
    c.n.push_back(in.n);
    c.L.push_back(in.L);
  }
  c.M = M;
  c.B = B;
  c.N = N;
  c.codes = cuda::pool_codes(B, N, inputs.data(), static_cast<std::int64_t>(inputs.size()));
  return c;
}

/// The reference's exception for a PoolCodes word (launch_pool.hpp).
DeviceError pool_error(const PoolErrorContext& c, unsigned long long code) {
  using cuda::PoolCheck;
  using cuda::PoolCodes;
  const PoolCheck check = PoolCodes::check_of(code);
  const std::string M = std::to_string(c.M);
  auto label = [&](std::size_t b, const char* name) {
    return c.group == nullptr ? std::string(name) : std::string(c.group) + "[" + std::to_string(b) + "] " + name;
  };
  auto arg = [&](const char* name) { return std::string(c.group == nullptr ? name : c.group); };
  if (check == PoolCheck::hidden_non_finite) {
    std::uint64_t key = PoolCodes::payload(code);
    std::size_t b = 0;
    while (b + 1 < c.n.size() && key >= static_cast<std::uint64_t>(c.n[b] * c.L[b])) {
      key -= static_cast<std::uint64_t>(c.n[b] * c.L[b]);
      ++b;
    }
    const auto L = static_cast<std::uint64_t>(b < c.L.size() && c.L[b] > 0 ? c.L[b] : 1);
    return {"NonFiniteError", arg("hidden"),
            label(b, "hidden") + " must be finite at counted tokens (mask != 0); got NaN or infinity at row " +
                std::to_string(key / L) + ", token " + std::to_string(key % L)};
  }
  const std::uint64_t key = c.codes.key_of(code);
  std::int64_t value = 0;
  const std::string got =
      c.codes.value_of(code, &value) ? std::to_string(value) : std::string("a value too large for the GPU's report");
  const auto N = static_cast<std::uint64_t>(c.N > 0 ? c.N : 1);
  if (check == PoolCheck::index_range) {
    const std::uint64_t BN = static_cast<std::uint64_t>(c.B) * N;
    const bool k = BN > 0 && key >= BN;
    const std::uint64_t e = k ? key - BN : key;
    const char* name = k ? "k_rows" : "q_rows";
    return {"OutOfRangeError", name,
            std::string(name) + " must be -1 (inactive) or a table row in [0, " + M + "); got " + got +
                " at episode " + std::to_string(e / N) + ", agent " + std::to_string(e % N)};
  }
  if (check == PoolCheck::table_non_finite) {
    const char* name = key / N % 2 == 1 ? "k_rows" : "q_rows";
    return {"NonFiniteError", "table",
            "table must be finite; got NaN or infinity in row " + got + ", used by " + name + " at episode " +
                std::to_string(key / (2 * N)) + ", agent " + std::to_string(key % N)};
  }
  // rows_range, rows_repeat: the key is the row's position over all inputs
  std::uint64_t i = key;
  std::size_t b = 0;
  while (b + 1 < c.n.size() && i >= static_cast<std::uint64_t>(c.n[b])) i -= static_cast<std::uint64_t>(c.n[b++]);
  if (check == PoolCheck::rows_range) {
    return {"OutOfRangeError", arg("rows"),
            label(b, "rows") + " must be in [0, " + M + "); got " + got + " at index " + std::to_string(i)};
  }
  return {"InvalidArgumentError", arg("rows"),
          label(b, "rows") + " must be distinct" + (c.group != nullptr ? " across all inputs" : "") + "; got row " +
              got + " again at index " + std::to_string(i)};
}

void raise_pool_error(const PoolErrorContext& c, unsigned long long code) {
  if (code == cuda::kNoError) return;
  const DeviceError e = pool_error(c, code);
  raise_error(e.cls, e.arg, e.message);
}

// ------------------------------------------------------------------ numpy (host memory) entry points

/// A C-contiguous numpy pool input: hidden (n, L, D) float32, mask (n, L) bool / int32 / int64, rows (n,)
/// int32 / int64 or None. `prefix` starts every message, `arg` (null: the array's name) is raised.
struct HostPoolInput {
  HostView hidden;
  IntHostView mask, rows;
  cuda::PoolInput in;
};

HostPoolInput host_pool_input(const py::handle& hidden, const py::handle& mask, const py::handle& rows,
                              const std::string& prefix, const char* arg) {
  const std::string h = prefix + "hidden", m = prefix + "mask", r = prefix + "rows";
  HostPoolInput p;
  p.hidden = host_view<float>(hidden, h.c_str(), 3, false, arg);
  require_c_contiguous(p.hidden, h.c_str());
  const std::int64_t n = p.hidden.shape[0], L = p.hidden.shape[1];
  p.mask = int_host_view(mask, m.c_str(), 2, true, arg);
  expect_shape(p.mask.host, m.c_str(), {n, L}, arg);
  require_c_contiguous(p.mask.host, m.c_str());
  if (!rows.is_none()) {
    p.rows = int_host_view(rows, r.c_str(), 1, false, arg);
    expect_shape(p.rows.host, r.c_str(), {n}, arg);
    require_c_contiguous(p.rows.host, r.c_str());
  }
  set_pool_views(p.in, p.hidden, p.mask, p.rows);
  return p;
}

py::object mean_pool_cuda_host(const py::object& hidden, const py::object& mask, const py::object& out,
                               const py::object& rows, int device) {
  const HostPoolInput p = host_pool_input(hidden, mask, rows, "", nullptr);
  const std::int64_t n = p.in.n, D = p.in.D;
  const PoolDestination dst = mean_pool_destination(out, n, D, p.rows.host.present(), "mean_pool_cuda_host");
  cuda::PoolTarget t;
  t.out = dst.data;
  t.M = dst.M;
  t.fresh = dst.fresh;
  t.D = D;
  t.sm = D;
  unsigned long long code = cuda::kNoError;
  run_core("mean_pool_cuda_host", [&] { return cuda::mean_pool_host(&p.in, 1, t, device, &code); });
  raise_pool_error(error_context(nullptr, {p.in}, t.M, 0, 0), code);
  return dst.array;
}

/// The pool= lists of route_indexed: three lists of one length (numpy arrays or capsules).
std::size_t pool_lists(const py::handle& hiddens, const py::handle& masks, const py::handle& rows) {
  for (const auto& [name, obj] : {std::make_pair("hiddens", hiddens), std::make_pair("masks", masks),
                                  std::make_pair("rows", rows)}) {
    if (!py::isinstance<py::list>(obj)) {
      raise_error("InvalidArgumentError", "pool", std::string(name) + " must be a list (one entry per pool input)");
    }
  }
  const std::size_t count = py::len(hiddens);
  if (py::len(masks) != count || py::len(rows) != count) {
    raise_error("InvalidArgumentError", "pool", "hiddens, masks and rows must have one length (pool inputs)");
  }
  return count;
}

void expect_pool_d(const std::vector<std::int64_t>& shape, std::int64_t D, const std::string& prefix) {
  if (shape[2] != D) {
    raise_error("ShapeError", "pool",
                prefix + "hidden must have D = " + std::to_string(D) + " (columns of table) in its last axis; got " +
                    shape_str(shape));
  }
}

py::tuple route_indexed_cuda_host(const py::object& table, const py::object& q_rows, const py::object& k_rows,
                                  const py::object& active, const py::object& hiddens, const py::object& masks,
                                  const py::object& rows, double tau, std::int64_t k_in, int device) {
  const std::size_t count = pool_lists(hiddens, masks, rows);
  const IndexedRouteInputs in = indexed_route_inputs(table, q_rows, k_rows, active, tau, k_in);
  require_c_contiguous(in.table, "table");
  require_c_contiguous(in.q_rows.v, "q_rows");
  require_c_contiguous(in.k_rows.v, "k_rows");
  require_c_contiguous(in.active, "active");
  const RouteArgs& a = in.args;
  const py::list hl = py::reinterpret_borrow<py::list>(hiddens), ml = py::reinterpret_borrow<py::list>(masks),
                 rl = py::reinterpret_borrow<py::list>(rows);
  std::vector<HostPoolInput> held;
  std::vector<cuda::PoolInput> pool;
  held.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::string prefix = "pool[" + std::to_string(i) + "] ";
    if (rl[i].is_none()) {
      raise_error("InvalidArgumentError", "pool", prefix + "rows must be an int32 or int64 array; got None");
    }
    held.push_back(host_pool_input(hl[i], ml[i], rl[i], prefix, "pool"));
    expect_pool_d(held.back().hidden.shape, a.D, prefix);
    pool.push_back(held.back().in);
  }
  cuda::PoolTarget t;
  if (count > 0) {
    require_writeable_c_contiguous(table, "table");
    t.out = const_cast<float*>(a.q);  // the numpy table, written in place
    t.M = a.M;
    t.D = a.D;
    t.sm = a.q_sn;
  }
  const RouteOutputs out = route_outputs("route_indexed_cuda_host", a.B, a.N, a.K);
  unsigned long long code = cuda::kNoError;
  run_core("route_indexed_cuda_host", [&] {
    return cuda::route_indexed_host(a, pool.data(), static_cast<std::int64_t>(count), t, out.view, device, &code);
  });
  raise_pool_error(error_context("pool", pool, a.M, a.B, a.N), code);
  return out.arrays;
}

// ------------------------------------------------------------------ DLPack (device memory) entry points

/// A CUDA index or mask array: int32 or int64 (or bool / uint8 when `allow_bool`), its type in *type.
DeviceArray int_device_array(const py::handle& obj, const char* name, int ndim, bool allow_bool, IntType* type) {
  DType want = DType::i64;
  *type = IntType::i64;
  if (PyCapsule_CheckExact(obj.ptr())) {
    auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(obj.ptr(), dlpack::kCapsuleName));
    if (m == nullptr) {
      PyErr_Clear();  // device_array below raises with the full message
    } else {
      const dlpack::DLDataType& dt = m->dl_tensor.dtype;
      if (dt.code == dlpack::kDLInt && dt.bits == 32) {
        want = DType::i32;
        *type = IntType::i32;
      } else if (allow_bool && (dt.code == dlpack::kDLBool || dt.code == dlpack::kDLUInt) && dt.bits == 8) {
        want = DType::mask;
        *type = IntType::u8;
      }
    }
  }
  return device_array(obj, name, ndim, want);
}

void expect_device(const DeviceArray& a, const std::string& name, int device) {
  if (a.present() && a.device != device) {
    raise_error("InvalidArgumentError", name,
                name + " must be on the same CUDA device as the other arrays (cuda:" + std::to_string(device) +
                    "); got cuda:" + std::to_string(a.device));
  }
}

/// A device pool input: hidden (n, L, D) float32 with unit last stride, mask (n, L), rows (n,) or absent.
cuda::PoolInput device_pool_input(const py::handle& hidden, const py::handle& mask, const py::handle& rows,
                                  const std::string& prefix, int* device, std::vector<std::int64_t>* shape) {
  const std::string h = prefix + "hidden", m = prefix + "mask", r = prefix + "rows";
  const DeviceArray hd = device_array(hidden, h.c_str(), 3, DType::f32);
  require_unit_last_stride(hd, h.c_str());
  const std::int64_t n = hd.shape[0], L = hd.shape[1];
  IntType mt = IntType::u8, rt = IntType::i64;
  const DeviceArray md = int_device_array(mask, m.c_str(), 2, true, &mt);
  expect_device_shape(md, m.c_str(), {n, L});
  DeviceArray rd;
  if (!rows.is_none()) {
    rd = int_device_array(rows, r.c_str(), 1, false, &rt);
    expect_device_shape(rd, r.c_str(), {n});
  }
  if (*device < 0) *device = hd.device;
  expect_device(hd, h, *device);
  expect_device(md, m, *device);
  expect_device(rd, r, *device);
  cuda::PoolInput in;
  in.hidden = static_cast<const float*>(hd.data);
  in.n = n;
  in.L = L;
  in.D = hd.shape[2];
  in.h_sn = hd.strides[0];
  in.h_sl = hd.strides[1];
  in.mask = int_view(md, mt);
  in.rows = int_view(rd, rt);
  *shape = hd.shape;
  return in;
}

py::object mean_pool_cuda_dlpack(const py::object& hidden, const py::object& mask, const py::object& out_obj,
                                 const py::object& rows, std::uintptr_t stream) {
  int device = -1;
  std::vector<std::int64_t> shape;
  const cuda::PoolInput in = device_pool_input(hidden, mask, rows, "", &device, &shape);
  const std::int64_t n = in.n, D = in.D;
  if (out_obj.is_none()) {
    if (in.rows.data != nullptr) {
      raise_error("InvalidArgumentError", "rows", "rows needs out (the array whose rows it names); got out=None");
    }
    DeviceOutputs out("mean_pool", device, stream, py::none());
    out.add("out", DType::f32, {n, D});
    AsyncCall call(device, "mean_pool");
    out.allocate();
    cuda::PoolTarget t;
    t.out = out.data<float>(0);
    t.M = n;
    t.D = D;
    t.sm = D;
    t.fresh = true;
    raise_status(cuda::launch_mean_pool_on(device, &in, 1, t, call.sink(), stream_handle(stream)));
    call.commit([c = error_context(nullptr, {in}, n, 0, 0)](unsigned long long code) { return pool_error(c, code); });
    const py::tuple made = out.result();
    return made[0];
  }
  const DeviceArray od = device_array(out_obj, "out", 2, DType::f32);
  if (od.shape[1] != D) {
    raise_error("ShapeError", "out",
                "out must have shape (M, " + std::to_string(D) + ") (D of hidden); got " + shape_str(od.shape));
  }
  if (in.rows.data == nullptr && od.shape[0] < n) {
    raise_error("ShapeError", "out",
                "out must have at least " + std::to_string(n) + " rows (rows=None writes row i to out[i]); got " +
                    shape_str(od.shape));
  }
  require_c_contiguous(od, "out");
  expect_device(od, "out", device);
  cuda::PoolTarget t;
  t.out = static_cast<float*>(od.data);
  t.M = od.shape[0];
  t.D = D;
  t.sm = D;
  AsyncCall call(device, "mean_pool");
  raise_status(cuda::launch_mean_pool_on(device, &in, 1, t, call.sink(), stream_handle(stream)));
  call.commit([c = error_context(nullptr, {in}, t.M, 0, 0)](unsigned long long code) { return pool_error(c, code); });
  return py::none();
}

py::object route_indexed_cuda_dlpack(const py::object& table_obj, const py::object& q_rows_obj,
                                     const py::object& k_rows_obj, const py::object& active_obj,
                                     const py::object& hiddens, const py::object& masks, const py::object& rows,
                                     const py::object& out_obj, double tau, std::int64_t k_in, std::uintptr_t stream) {
  const std::size_t count = pool_lists(hiddens, masks, rows);
  RouteArgs args;
  Dims dims;
  const DeviceArray table = device_array(table_obj, "table", 2, DType::f32);
  dims.fill(table, "table", "MD", args.q, args.q_sn);
  require_unit_last_stride(table, "table");
  args.k = args.q;
  args.k_sn = args.q_sn;
  IntType qt = IntType::i64, kt = IntType::i64;
  const DeviceArray qr = int_device_array(q_rows_obj, "q_rows", 2, false, &qt);
  dims.check(qr.shape.data(), "BN", "q_rows");
  const DeviceArray kr = int_device_array(k_rows_obj, "k_rows", 2, false, &kt);
  dims.check(kr.shape.data(), "BN", "k_rows");
  args.q_rows = int_view(qr, qt);
  args.k_rows = int_view(kr, kt);
  const DeviceArray active = optional_device_array(active_obj, "active", 2, DType::mask);
  dims.fill(active, "active", "BN", args.active, args.a_sb, args.a_sn);
  set_route_sizes(args, dims, tau, k_in);
  const int device = table.device;
  expect_device(qr, "q_rows", device);
  expect_device(kr, "k_rows", device);
  expect_device(active, "active", device);
  const py::list hl = py::reinterpret_borrow<py::list>(hiddens), ml = py::reinterpret_borrow<py::list>(masks),
                 rl = py::reinterpret_borrow<py::list>(rows);
  std::vector<cuda::PoolInput> pool;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string prefix = "pool[" + std::to_string(i) + "] ";
    if (rl[i].is_none()) {
      raise_error("InvalidArgumentError", "pool", prefix + "rows must be an int32 or int64 array; got None");
    }
    int dev = device;
    std::vector<std::int64_t> shape;
    pool.push_back(device_pool_input(hl[i], ml[i], rl[i], prefix, &dev, &shape));
    expect_pool_d(shape, args.D, prefix);
  }
  cuda::PoolTarget t;
  if (count > 0) {
    require_c_contiguous(table, "table");
    t.out = static_cast<float*>(table.data);
    t.M = args.M;
    t.D = args.D;
    t.sm = args.q_sn;
  }
  DeviceOutputs out("route_indexed", device, stream, out_obj);
  add_route_outputs(out, args);
  AsyncCall call(device, "route_indexed");
  out.allocate();
  const RouteOut o = route_outputs(out);
  raise_status(cuda::launch_route_indexed_on(device, args, pool.data(), static_cast<std::int64_t>(count), t, o,
                                             call.sink(), stream_handle(stream)));
  call.commit([c = error_context("pool", pool, args.M, args.B, args.N)](unsigned long long code) {
    return pool_error(c, code);
  });
  return out.result();
}

#else  // built without CUDA

py::object mean_pool_cuda_host(const py::object&, const py::object&, const py::object&, const py::object&, int) {
  cuda_unavailable();
}

py::tuple route_indexed_cuda_host(const py::object&, const py::object&, const py::object&, const py::object&,
                                  const py::object&, const py::object&, const py::object&, double, std::int64_t,
                                  int) {
  cuda_unavailable();
}

py::object mean_pool_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&,
                                 std::uintptr_t) {
  cuda_unavailable();
}

py::object route_indexed_cuda_dlpack(const py::object&, const py::object&, const py::object&, const py::object&,
                                     const py::object&, const py::object&, const py::object&, const py::object&,
                                     double, std::int64_t, std::uintptr_t) {
  cuda_unavailable();
}

#endif  // TOPOROUTE_WITH_CUDA

}  // namespace

void bind_cuda_pool(py::module_& m) {
  using py::arg;
  m.def("mean_pool_cuda_host", &mean_pool_cuda_host, kMeanPoolHostDoc, arg("hidden"), arg("mask"), arg("out"),
        arg("rows"), arg("device") = 0);
  m.def("mean_pool_cuda_dlpack", &mean_pool_cuda_dlpack, kMeanPoolDlpackDoc, arg("hidden"), arg("mask"), arg("out"),
        arg("rows"), arg("stream"));
  m.def("route_indexed_cuda_host", &route_indexed_cuda_host, kRouteIndexedHostDoc, arg("table"), arg("q_rows"),
        arg("k_rows"), arg("active"), arg("hiddens"), arg("masks"), arg("rows"), arg("tau"), arg("k_in"),
        arg("device") = 0);
  m.def("route_indexed_cuda_dlpack", &route_indexed_cuda_dlpack, kRouteIndexedDlpackDoc, arg("table"), arg("q_rows"),
        arg("k_rows"), arg("active"), arg("hiddens"), arg("masks"), arg("rows"), arg("out"), arg("tau"), arg("k_in"),
        arg("stream"));
}

}  // namespace toporoute::bindings
