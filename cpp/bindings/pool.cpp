// mean_pool and pool_route: pooling of token states into embedding rows, alone or fused with an indexed route
// (one call, the GIL released once).
#include <string>
#include <vector>

#include "common.hpp"
#include "pool_args.hpp"
#include "toporoute/pool.hpp"
#include "toporoute/route.hpp"

namespace toporoute::bindings {

PoolDestination mean_pool_destination(const py::handle& out, std::int64_t n, std::int64_t D, bool has_rows,
                                      const char* op) {
  PoolDestination dst;
  if (out.is_none()) {
    if (has_rows) {
      raise_error("InvalidArgumentError", "rows", "rows needs out (the array whose rows it names); got out=None");
    }
    NewOutputs fresh(op);
    fresh.add<float>({n, D}, &dst.data);
    dst.array = fresh.allocate()[0];
    dst.M = n;
    dst.fresh = true;
    return dst;
  }
  const HostView ov = host_view<float>(out, "out", 2);
  if (ov.shape[1] != D) {
    raise_error("ShapeError", "out",
                "out must have shape (M, " + std::to_string(D) + ") (D of hidden); got " + shape_str(ov.shape));
  }
  if (!has_rows && ov.shape[0] < n) {
    raise_error("ShapeError", "out",
                "out must have at least " + std::to_string(n) + " rows (rows=None writes row i to out[i]); got " +
                    shape_str(ov.shape));
  }
  require_writeable_c_contiguous(ov.array, "out");
  dst.array = ov.array;
  dst.data = static_cast<float*>(ov.data);
  dst.M = ov.shape[0];
  return dst;
}

namespace {

/// Checked numpy inputs of one pooling input and the core's view of them.
struct PoolInput {
  HostView hidden;
  IntHostView mask, rows;
  PoolArgs args;
};

/// hidden (n, L, D) float32 with unit last stride, mask (n, L) bool / int32 / int64, optional rows (n,) int32 /
/// int64. `prefix` ("" or e.g. "pool[1] ") starts every message; `arg` (null: the array's own name) is raised.
PoolInput pool_input(const py::handle& hidden, const py::handle& mask, const py::handle& rows,
                     const std::string& prefix, const char* arg) {
  const std::string h = prefix + "hidden", m = prefix + "mask", r = prefix + "rows";
  PoolInput in;
  in.hidden = host_view<float>(hidden, h.c_str(), 3, false, arg);
  require_unit_last_stride(in.hidden, h.c_str(), arg);
  const std::int64_t n = in.hidden.shape[0], L = in.hidden.shape[1];
  in.mask = int_host_view(mask, m.c_str(), 2, true, arg);
  expect_shape(in.mask.host, m.c_str(), {n, L}, arg);
  if (!rows.is_none()) {
    in.rows = int_host_view(rows, r.c_str(), 1, false, arg);
    expect_shape(in.rows.host, r.c_str(), {n}, arg);
  }
  set_pool_views(in.args, in.hidden, in.mask, in.rows);
  return in;
}

py::array mean_pool(const py::handle& hidden, const py::handle& mask, const py::handle& out, const py::handle& rows) {
  const PoolInput in = pool_input(hidden, mask, rows, "", nullptr);
  const std::int64_t n = in.args.n, D = in.args.D;
  const PoolDestination dst = mean_pool_destination(out, n, D, in.rows.host.present(), "mean_pool");
  PoolOut o;
  o.out = dst.data;
  o.M = dst.M;
  o.fresh = dst.fresh;
  o.D = D;
  run_core("mean_pool", [&] { return toporoute::mean_pool(&in.args, 1, o); });
  return py::reinterpret_borrow<py::array>(dst.array);
}

py::tuple pool_route(const py::handle& hiddens, const py::handle& masks, const py::handle& rows,
                     const py::handle& table, const py::handle& q_rows, const py::handle& k_rows,
                     const py::handle& active, double tau, std::int64_t k_in, const std::string& isa) {
  for (const auto& [name, obj] : {std::make_pair("hiddens", hiddens), std::make_pair("masks", masks),
                                  std::make_pair("rows", rows)}) {
    if (!py::isinstance<py::list>(obj)) {
      raise_error("InvalidArgumentError", "pool", std::string(name) + " must be a list (one entry per pool input)");
    }
  }
  const py::list hl = py::reinterpret_borrow<py::list>(hiddens), ml = py::reinterpret_borrow<py::list>(masks),
                 rl = py::reinterpret_borrow<py::list>(rows);
  if (ml.size() != hl.size() || rl.size() != hl.size()) {
    raise_error("InvalidArgumentError", "pool", "hiddens, masks and rows must have one length (pool inputs)");
  }
  const IndexedRouteInputs route_in = indexed_route_inputs(table, q_rows, k_rows, active, tau, k_in);
  require_writeable_c_contiguous(table, "table");
  const RouteArgs& a = route_in.args;
  const std::int64_t D = a.D;
  std::vector<PoolInput> inputs;
  std::vector<PoolArgs> args;
  for (std::size_t i = 0; i < hl.size(); ++i) {
    const std::string prefix = "pool[" + std::to_string(i) + "] ";
    inputs.push_back(pool_input(hl[i], ml[i], rl[i], prefix, "pool"));
    if (inputs.back().args.D != D) {
      raise_error("ShapeError", "pool",
                  prefix + "hidden must have D = " + std::to_string(D) + " (columns of table) in its last axis; got " +
                      shape_str(inputs.back().hidden.shape));
    }
    if (!inputs.back().rows.host.present()) {
      raise_error("InvalidArgumentError", "pool", prefix + "rows must be an int32 or int64 array; got None");
    }
    args.push_back(inputs.back().args);
  }
  Isa resolved;
  raise_status(resolve_isa(isa, &resolved));
  PoolOut o;
  o.out = static_cast<float*>(route_in.table.data);
  o.M = a.M;
  o.D = D;
  o.group = "pool";
  const RouteOutputs out = route_outputs("pool_route", a.B, a.N, a.K);
  run_core("pool_route", [&] {
    // Everything that can be checked before the table is written is checked first.
    TOPOROUTE_RETURN_IF_ERROR(check_route(a));
    TOPOROUTE_RETURN_IF_ERROR(toporoute::mean_pool(args.data(), static_cast<std::int64_t>(args.size()), o));
    return toporoute::route(a, out.view, resolved);
  });
  return out.arrays;
}

}  // namespace

void bind_pool(py::module_& m) {
  m.def("mean_pool", &mean_pool, py::arg("hidden"), py::arg("mask"), py::arg("out"), py::arg("rows"),
        "mean_pool(hidden, mask, out, rows) -> out or a new (n, D) float32 array; masked mean + L2 norm of "
        "(n, L, D) float32 token states, written to out[rows[i]] when out is given.");
  m.def("pool_route", &pool_route, py::arg("hiddens"), py::arg("masks"), py::arg("rows"), py::arg("table"),
        py::arg("q_rows"), py::arg("k_rows"), py::arg("active"), py::arg("tau"), py::arg("k_in"),
        py::arg("isa") = "",
        "pool_route(hiddens, masks, rows, table, q_rows, k_rows, active, tau, k_in, isa='') -> (scores, adjacency, "
        "inbox, in_degree); mean-pools each (hidden, mask) into table[rows] in place, then route_indexed.");
}

}  // namespace toporoute::bindings
