// mean_pool and route_indexed: pooling of token states into embedding rows, and the indexed route with its
// optional pooling first (one call, the GIL released once).
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

// route_indexed in the op table's argument order; with `pool` (a sequence of (hidden, mask, rows) triples), the
// pooling into table[rows] runs first, in place, in the same call (the GIL released once).
py::tuple route_indexed(const py::handle& table, const py::handle& q_rows, const py::handle& k_rows, double tau,
                        std::int64_t k_in, const py::handle& active, const py::handle& pool, const std::string& isa) {
  const IndexedRouteInputs route_in = indexed_route_inputs(table, q_rows, k_rows, active, tau, k_in);
  Isa resolved;
  raise_status(resolve_isa(isa, &resolved));
  const RouteArgs& a = route_in.args;
  const RouteOutputs out = route_outputs("route_indexed", a.B, a.N, a.K);
  if (!pool.is_none() && (!py::isinstance<py::sequence>(pool) || py::isinstance<py::str>(pool))) {
    raise_error("InvalidArgumentError", "pool", "pool must be a sequence of (hidden, mask, rows) triples or None");
  }
  if (pool.is_none() || py::len(pool) == 0) {
    run_core("route_indexed", [&] { return toporoute::route(a, out.view, resolved); });
    return out.arrays;
  }
  require_writeable_c_contiguous(table, "table");
  const std::int64_t D = a.D;
  std::vector<PoolInput> inputs;
  std::vector<PoolArgs> args;
  const auto triples = py::reinterpret_borrow<py::sequence>(pool);
  for (std::size_t i = 0; i < triples.size(); ++i) {
    const std::string prefix = "pool[" + std::to_string(i) + "] ";
    const py::object item = triples[i];
    if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) || py::len(item) != 3) {
      raise_error("InvalidArgumentError", "pool", prefix + "must be a (hidden, mask, rows) triple");
    }
    const auto t = py::reinterpret_borrow<py::sequence>(item);
    inputs.push_back(pool_input(t[0], t[1], t[2], prefix, "pool"));
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
  PoolOut o;
  o.out = static_cast<float*>(route_in.table.data);
  o.M = a.M;
  o.D = D;
  o.group = "pool";
  run_core("route_indexed", [&] {
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
  m.def("route_indexed", &route_indexed, py::arg("table"), py::arg("q_rows"), py::arg("k_rows"), py::arg("tau"),
        py::arg("k_in"), py::arg("active"), py::arg("pool"), py::arg("isa") = "",
        "route_indexed(table: f32 (M,D), q_rows: int (B,N), k_rows: int (B,N), tau: float, k_in: int, active: bool "
        "(B,N) | None, pool: (hidden, mask, rows) triples | None, isa: str = '') -> (scores, adjacency, inbox, "
        "in_degree); route over rows of the table named by the indices (-1: inactive agent), each pool triple "
        "mean-pooled into table[rows] first, in place.");
}

}  // namespace toporoute::bindings
