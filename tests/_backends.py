"""The backends that the parity, golden and property tests run on, the one tolerance table, and the one
comparison of results.

A :class:`Backend` is one way to run the ops, named by its pytest id:

- ``reference``: numpy, the oracle;
- ``cpu-<isa>``: the compiled core at one SIMD level (``generic``, ``avx2``, ``avx512``, ``amx``), for the ops whose CPU
  kernels take a level per call (:data:`SIMD_OPS`); the process's own level runs through :mod:`toporoute.ops`,
  the others call :mod:`toporoute.backends.cpu` with ``isa=``;
- ``cpu``: the compiled core for the other ops (one dispatch per process);
- ``cuda``: numpy inputs, copied to the GPU by the backend;
- ``cuda-cupy`` and ``cuda-torch``: CuPy arrays or PyTorch CUDA tensors, handed over through DLPack; every result
  must come back on the device (checked when it is fetched).

The grid reads the package: the ops are the op table's (:mod:`toporoute.types.op_table`, by name) and an op runs
on the backends that register a kernel for it (:func:`toporoute.backends.kernels`). :class:`Backend` runs every op
of the table: ``backend.<op>(...)`` calls ``toporoute.ops.<op>(..., backend=...)`` with the inputs put on the
backend and the results fetched (its ``__getattr__``), so a new op needs no line here; only an op that needs more
(another SIMD level called directly, an output written in place, a device-only input form) has a method of its
own. tests/ops/test_parity.py fails naming an op the grid cannot run. Its op methods take what :mod:`toporoute.ops`
takes (a single graph without the batch axis too) and return numpy results.
:func:`on_backends` parametrises a test over the backends of one op, :func:`on_backend_names` over the names of
the host backends (for tests that call :mod:`toporoute.ops` themselves); a backend that cannot run here carries
a skip mark that says why (CUDA ones carry the ``cuda`` marker, which tests/conftest.py turns into a skip, or into
a failure under ``--require-cuda``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from toporoute import ops
from toporoute.backends import NAMES, cpu, kernels, reference
from toporoute.backends import _cuda_pool as cuda_kernels
from toporoute.backends import cuda as cuda_backend
from toporoute.types.conductor_topology import TopologyBatch
from toporoute.types.op_table import OPS as OP_TABLE
from toporoute.types.results import QMixStep

CORE_BUILT, CORE_MISSING = cpu.available()
core = importlib.import_module("toporoute._core") if CORE_BUILT else None
needs_core = pytest.mark.skipif(not CORE_BUILT, reason=CORE_MISSING or "the compiled core is built")
_SIMD = core.build_info()["simd"] if core is not None else {"compiled": [], "supported": [], "active": ""}
ISAS: tuple[str, ...] = tuple(_SIMD["supported"])  # SIMD levels this machine runs
ACTIVE_ISA: str = _SIMD["active"]  # the level toporoute.ops uses in this process

# Every op of the op table, by name (the OpSpec fields are not read here), and the ops each backend registers a
# kernel for: the grid runs an op on the backends that register it.
OPS: tuple[str, ...] = tuple(OP_TABLE)
REGISTERED: dict[str, frozenset[str]] = {name: kernels(name) for name in NAMES}
CUDA_OPS = REGISTERED["cuda"]
# Ops whose CPU functions take ``isa=`` (nothing in the package lists them but their signatures): declared here so
# that a kernel losing its ``isa=`` fails tests/ops/test_parity.py instead of quietly dropping its SIMD
# levels.
SIMD_OPS = frozenset({"route", "route_indexed", "qmix_forward", "qmix_mix"})
HOST = ("reference", "cpu")  # the backends that take and return numpy arrays


# ------------------------------------------------------------------------------------------------ tolerances


@dataclasses.dataclass(frozen=True)
class Tol:
    """``|got - want| <= atol + rtol * |want|`` elementwise, and why the backends may differ that much."""

    atol: float
    rtol: float
    why: str


_SCORES = Tol(
    1e-6,
    0.0,
    "cosines in [-1, 1] are computed in float64 and rounded to float32 once; backends differ only in the "
    "float64 summation order (SIMD lanes, FMA on the GPU), which can move a score across a rounding boundary: "
    "an ulp (<= 1.2e-7). The CPU's float32 pass for teams of 16 and more leaves the scores it does not "
    "recompute in float64 within its bound (measured <= 2e-7 here; every decision is the float64 path's)",
)
_QMIX = Tol(
    1e-5,
    0.0,
    "the reference runs the networks in float64, the kernels in float32 with their own summation order "
    "(SIMD panels, FMA) through the input layer, up to 3 GNN layers, two GRU cells and the head; q and hidden "
    "are of order 1 (LayerNorm, tanh): measured up to 1e-6 on the CPU levels",
)
_QMIX_MIX = Tol(
    1e-5,
    1e-6,
    "as for the agent network, and q_tot reaches about 20, where a float32 ulp is 2e-6: measured up to 7e-6 "
    "on the CPU levels, hence the relative term",
)
_BITWISE = Tol(
    0.0,
    0.0,
    "the HiVA bandit kernels follow the reference's float64 steps in the same order with the C library's "
    "log/cos/exp/pow and no FMA contraction: equal bit for bit (a different theta would change the selection)",
)
_EXACT = Tol(0.0, 0.0, "no entry in TOLERANCES: the backends are to agree bit for bit")
_RATIO = Tol(0.0, 1e-12, "ratios of integer counts in float64; only the division may round differently")
_LIBM = Tol(1e-15, 1e-12, "exp and tanh in float64 from the C++ library and from numpy: a few ulps apart")

# The float outputs that may differ between backends, with how much and why; every other output (a float output
# without an entry, integers, booleans) must equal the reference bit for bit (_EXACT).
TOLERANCES: dict[str, Tol] = {
    "route.scores": _SCORES,
    "route_indexed.scores": _SCORES,
    "mean_pool": Tol(
        1e-6,
        0.0,
        "float64 masked mean and L2 norm rounded to float32 once: components of a unit vector, summation "
        "order only",
    ),
    "graph_stats.density": _RATIO,
    "graph_stats.reciprocity": _RATIO,
    "graph_stats.jaccard": _RATIO,
    "conductor_density.s_node": _LIBM,
    "conductor_density.s_edge": _LIBM,
    "conductor_density.s_depth": _LIBM,
    "conductor_density.s_complex": _LIBM,
    "conductor_density.reward": _LIBM,
    "qmix_forward.q": _QMIX,
    "qmix_forward.hidden": _QMIX,
    "qmix_mix": _QMIX_MIX,
    "bandit_select.theta": _BITWISE,
    "bandit_update.alpha": _BITWISE,
    "bandit_update.beta": _BITWISE,
    "synergy_update.c_syn": _BITWISE,
    "synergy_update.edge_alpha": _BITWISE,
    "synergy_update.edge_beta": _BITWISE,
}


def _fields(result: Any) -> list[tuple[str, Any]]:
    if isinstance(result, QMixStep):
        return list(result._asdict().items())
    if dataclasses.is_dataclass(result):
        return list(vars(result).items())
    return [("", result)]


def assert_matches(op: str, got: Any, want: Any, ctx: str = "", *, exact: bool = False) -> None:
    """``got`` (a backend's result of ``op``) matches ``want``: numpy arrays of the same dtypes and shapes, integer
    and boolean fields exactly equal, float fields within :data:`TOLERANCES` (bit for bit without an entry there,
    or with ``exact``: the same backend on the same numbers). A :class:`TopologyBatch` must match in every
    field."""
    if isinstance(want, TopologyBatch):
        _assert_batches(got, want, ctx)
        return
    assert type(got) is type(want), (
        f"{ctx}: {op} returned {type(got).__name__}, expected {type(want).__name__}"
    )
    for (name, g), (_, w) in zip(_fields(got), _fields(want)):
        key = f"{op}.{name}" if name else op
        if w is None or g is None:
            assert g is None and w is None, f"{ctx}: {key} is {g!r}, expected {w!r}"
            continue
        # a single graph's per-graph fields are numpy scalars (0-d arrays from device backends)
        assert isinstance(g, (np.ndarray, np.generic)), (
            f"{ctx}: {key} is a {type(g).__module__}.{type(g).__name__}"
        )
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"{ctx}: {key} dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{ctx}: {key} shape {g.shape}, expected {w.shape}"
        if exact or not np.issubdtype(w.dtype, np.floating):
            if not np.array_equal(g, w):
                at = tuple(int(i) for i in np.argwhere(g != w)[0])
                raise AssertionError(f"{ctx}: {key} differs at {at}: got {g[at]}, expected {w[at]}")
            continue
        tol = TOLERANCES.get(key, _EXACT)
        err = np.abs(g.astype(np.float64) - w.astype(np.float64))
        # a NaN counts as bad, unless the reference has one there too (team_scores: no score in the window)
        bad = ~(err <= tol.atol + tol.rtol * np.abs(w.astype(np.float64))) & ~(np.isnan(g) & np.isnan(w))
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            raise AssertionError(
                f"{ctx}: {key} differs at {at}: got {g[at]!r}, expected {w[at]!r} "
                f"(atol {tol.atol}, rtol {tol.rtol}; {int(bad.sum())} of {bad.size} elements)"
            )


def _assert_batches(got: TopologyBatch, want: TopologyBatch, ctx: str) -> None:
    for name in TopologyBatch.ARRAYS:
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype, f"{ctx}: {name} dtype {g.dtype}, expected {w.dtype}"
        np.testing.assert_array_equal(g, w, err_msg=f"{ctx}: {name} differs")
    for name in ("node_id", "message", "yaml", "warnings"):
        assert getattr(got, name) == getattr(want, name), f"{ctx}: {name} differs"
    assert got.checks() == want.checks(), ctx


def mean_pool_f64(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The definition of mean_pool written out row by row in float64 (a second oracle for it)."""
    n, _, D = hidden.shape
    out = np.zeros((n, D))
    for i in range(n):
        counted = np.asarray(mask[i]) != 0
        v = hidden[i][counted].astype(np.float64).sum(axis=0) / max(int(counted.sum()), 1e-9)
        out[i] = v / max(float(np.sqrt((v * v).sum())), 1e-12)
    return out


# --------------------------------------------------------------------------------------------- device arrays


@functools.cache
def _framework_module(arrays: str) -> Any:
    return importlib.import_module(arrays)


def _framework(arrays: str) -> Any:
    """CuPy or PyTorch, or a skip saying why it cannot hold CUDA arrays here."""
    name = {"cupy": "CuPy", "torch": "PyTorch"}[arrays]
    try:
        mod = _framework_module(arrays)
    except ImportError as exc:
        pytest.skip(f"{name} is not installed ({exc}): its DLPack inputs cannot be tested")
    if arrays == "torch" and not mod.cuda.is_available():
        pytest.skip("PyTorch is installed without a usable CUDA device")
    if arrays == "cupy":
        try:
            mod.cuda.runtime.getDeviceCount()
        except Exception as exc:  # noqa: BLE001 - any CuPy or driver failure means CuPy cannot be tested
            pytest.skip(f"CuPy cannot use a CUDA device: {exc}")
    return mod


@dataclasses.dataclass(frozen=True)
class View:
    """A strided view of a base array (index, then axis permutation, then broadcast), replayable on CuPy
    arrays and PyTorch tensors so that device inputs are strided on the device."""

    index: tuple = ()
    perm: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None

    @property
    def negative(self) -> bool:
        return any(isinstance(i, slice) and (i.step or 1) < 0 for i in self.index)

    def of(self, x: Any) -> Any:
        torch = type(x).__module__.startswith("torch")
        if self.index:
            x = x[self.index]
        if self.perm is not None:
            x = x.permute(*self.perm) if torch else x.transpose(self.perm)
        if self.shape is not None:
            x = x.expand(*self.shape) if torch else _namespace(x).broadcast_to(x, self.shape)
        return x


def _namespace(x: Any) -> Any:
    return np if isinstance(x, np.ndarray) else _framework_module(type(x).__module__.partition(".")[0])


# ---------------------------------------------------------------------------------------------------- backends


@dataclasses.dataclass(frozen=True)
class Backend:
    """One way to run the ops (see the module docstring). ``name`` is the ``backend=`` of :mod:`toporoute.ops`,
    ``isa`` the CPU SIMD level ("" for ops without one), ``arrays`` what the CUDA backend is fed."""

    id: str
    name: str
    isa: str = ""
    arrays: str = "numpy"

    def __str__(self) -> str:
        return self.id

    @property
    def host(self) -> bool:
        """Inputs and results are numpy arrays (everything but CuPy and PyTorch inputs)."""
        return self.arrays == "numpy"

    @property
    def in_place(self) -> bool:
        """Strided inputs give bit for bit the contiguous result: the compiled CPU kernels read them in place
        in the same order (numpy's BLAS and reductions, and the CUDA kernels' vector or scalar loads, may sum
        other layouts in another order)."""
        return self.name == "cpu"

    @property
    def _direct(self) -> bool:
        """A CPU level other than the process's own: called through toporoute.backends.cpu with ``isa=``."""
        return self.name == "cpu" and self.isa not in ("", ACTIVE_ISA)

    # ---- arrays

    def put(self, x: Any) -> Any:
        """A numpy array as this backend's input (CuPy or PyTorch inputs: a copy on the device); anything
        else unchanged."""
        if self.host or not isinstance(x, np.ndarray):
            return x
        mod = _framework(self.arrays)
        if self.arrays == "torch":
            # ascontiguousarray would make a 0-d array 1-d
            return mod.from_numpy(x if x.flags.c_contiguous else np.ascontiguousarray(x)).cuda()
        return mod.asarray(x)

    def view(self, base: np.ndarray, view: View) -> Any:
        """``view`` of ``base`` as this backend's input: for device arrays, of a device copy of ``base``."""
        if not self.host and view.negative:
            pytest.skip(
                "device views with negative strides are not tested: PyTorch cannot make them, and CuPy's DLPack "
                "export reported wrong strides for them (cupy/cupy#10172, fixed by cupy/cupy#10228)"
            )
        return view.of(self.put(base))

    def _get(self, x: Any) -> Any:
        if x is None:
            return None
        if self.host:
            assert isinstance(x, (np.ndarray, np.generic)), f"{self.id} returned a {type(x).__name__}"
            return x
        mod = _framework(self.arrays)
        if self.arrays == "torch":
            assert isinstance(x, mod.Tensor) and x.is_cuda, f"{self.id}: a result left the device: {type(x)}"
            return x.cpu().numpy()
        assert isinstance(x, mod.ndarray), f"{self.id}: a result left the device: {type(x)}"
        return mod.asnumpy(x)

    def fetch(self, result: Any) -> Any:
        """``result`` with numpy arrays (device results checked to be on the device first). For device arrays
        the CUDA backend's reports of bad input are waited for first (cuda.synchronize): the tests expect them
        at the call, as the numpy path gives them."""
        if not self.host:
            cuda_backend.synchronize()
        if isinstance(result, QMixStep):
            return QMixStep(*(self._get(v) for v in result))
        if dataclasses.is_dataclass(result):
            return type(result)(*(self._get(v) for v in vars(result).values()))
        return self._get(result)

    def _ops(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        args = tuple(self.put(a) for a in args)
        kwargs = {k: self.put(v) for k, v in kwargs.items()}
        return self.fetch(fn(*args, **kwargs, backend=self.name))

    def _cpu(self, fn: Callable[..., Any], single: bool, batched: dict[str, Any], **kwargs: Any) -> Any:
        """``fn`` of toporoute.backends.cpu at ``self.isa``, adding and dropping the batch axis of one graph."""
        if single:
            batched = {k: None if v is None else v[None] for k, v in batched.items()}
        out = fn(**batched, **kwargs, isa=self.isa)
        if isinstance(out, tuple):
            out = QMixStep(*out)
        if not single:
            return out
        if isinstance(out, QMixStep):
            return QMixStep(*(v[0] for v in out))
        if dataclasses.is_dataclass(out):
            return type(out)(*(v[0] for v in vars(out).values()))
        return out[0]

    # ---- ops, with the signatures of toporoute.ops

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """``backend.<op>`` for an op of the table without a method below: ``toporoute.ops.<op>`` on this backend,
        inputs put and results fetched (most ops need nothing more). An op whose public function is missing has
        no such method (tests/ops/test_parity.py names it)."""
        if name not in OP_TABLE or not callable(getattr(ops, name, None)):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return functools.partial(self._ops, getattr(ops, name))

    # the ops that need more than that: SIMD levels called directly, outputs written in place, device-only forms

    def route(self, q: Any, k: Any, *, tau: float = 0.3, k_in: int = 3, active: Any = None) -> Any:
        if self._direct:
            return self._cpu(
                cpu.route, np.ndim(q) == 2, {"q": q, "k": k, "active": active}, tau=tau, k_in=k_in
            )
        return self._ops(ops.route, q, k, tau=tau, k_in=k_in, active=active)

    def route_indexed(
        self,
        table: Any,
        q_rows: Any,
        k_rows: Any,
        *,
        tau: float = 0.3,
        k_in: int = 3,
        active: Any = None,
        pool: Sequence[tuple[Any, Any, Any]] | None = None,
    ) -> Any:
        """As ops.route_indexed, plus the backends' own ``active`` mask (ANDed with the -1 padding), which
        toporoute.ops does not take: given one, the backend module is called directly."""
        dev_table = self.put(table)
        dev_pool = pool
        if isinstance(pool, list) and all(isinstance(t, tuple) for t in pool):  # else: the op's own error
            dev_pool = [tuple(self.put(x) for x in triple) for triple in pool]

        def written(result: Any) -> Any:
            # pool= writes the table in place: a device table's rows come back into the caller's numpy table
            if pool and dev_table is not table:
                table[...] = self._get(dev_table)
            return result

        if active is None and not self._direct:
            got = ops.route_indexed(
                dev_table,
                self.put(q_rows),
                self.put(k_rows),
                tau=tau,
                k_in=k_in,
                pool=dev_pool,
                backend=self.name,
            )
            return written(self.fetch(got))
        if self.name == "reference":
            return reference.route_indexed(
                table, q_rows, k_rows, tau=tau, k_in=k_in, active=active, pool=pool
            )
        if self.name == "cuda":
            single = np.ndim(q_rows) == 1
            q, k, a = (
                None if x is None else self.put(x[None] if single else x) for x in (q_rows, k_rows, active)
            )
            got = self.fetch(cuda_kernels.route_indexed(dev_table, q, k, tau, k_in, active=a, pool=dev_pool))
            return written(type(got)(*(v[0] for v in vars(got).values())) if single else got)
        assert self.name == "cpu", f"{self.id} has no route_indexed"
        batched = {"q_rows": q_rows, "k_rows": k_rows, "active": active}
        fn = functools.partial(cpu.route_indexed, table)
        return self._cpu(fn, np.ndim(q_rows) == 1, batched, tau=tau, k_in=k_in, pool=pool)

    def mean_pool(self, hidden: Any, mask: Any, *, out: Any = None, rows: Any = None) -> Any:
        got = self._ops(ops.mean_pool, hidden, mask, out=out, rows=rows)
        if out is not None and got is not out:
            out[...] = got  # out is written in place: a device out's rows come back into the caller's array
            return out
        return got

    def conductor_density(self, nodes: Any, edges: Any, steps: Any, n_max: Any) -> Any:
        if not self.host:  # on the device the op takes four int64 arrays of one shape (no broadcasting there)
            arrays = np.broadcast_arrays(*(np.asarray(x) for x in (nodes, edges, steps, n_max)))
            nodes, edges, steps, n_max = (np.array(x, dtype=np.int64) for x in arrays)  # keeps 0-d arrays 0-d
        return self._ops(ops.conductor_density, nodes, edges, steps, n_max)

    def qmix_forward(self, params: Any, obs: Any, adj: Any, hidden: Any = None, *, active: Any = None) -> Any:
        if self._direct:
            batched = {"obs": obs, "adj": adj, "hidden": hidden, "active": active}
            return self._cpu(functools.partial(cpu.qmix_forward, params), np.ndim(obs) == 2, batched)
        return self._ops(ops.qmix_forward, params, obs, adj, hidden, active=active)

    def qmix_mix(self, params: Any, q_taken: Any, state: Any) -> Any:
        if self._direct:
            batched = {"q_taken": q_taken, "state": state}
            return self._cpu(functools.partial(cpu.qmix_mix, params), np.ndim(q_taken) == 1, batched)
        return self._ops(ops.qmix_mix, params, q_taken, state)

    def conductor_check(self, texts: Any, context: Any = None, options: Any = None) -> TopologyBatch:
        return ops.conductor_check(texts, context=context, options=options, backend=self.name)


REFERENCE = Backend("reference", "reference")


def _cpu_params(op: str, simd_levels: bool) -> list[Any]:
    if not CORE_BUILT:
        return [pytest.param(Backend("cpu", "cpu"), id="cpu", marks=needs_core)]
    if op not in SIMD_OPS:
        return [pytest.param(Backend("cpu", "cpu"), id="cpu")]
    params = []
    for isa in _SIMD["compiled"] if simd_levels else [ACTIVE_ISA]:
        marks = []
        if isa not in ISAS:
            reason = f"this CPU cannot run the {isa} kernels (compiled, not supported)"
            marks.append(pytest.mark.skip(reason=reason))
        params.append(pytest.param(Backend(f"cpu-{isa}", "cpu", isa), id=f"cpu-{isa}", marks=marks))
    return params


def _cuda_params() -> list[Any]:
    params = [pytest.param(Backend("cuda", "cuda"), id="cuda", marks=pytest.mark.cuda)]
    for arrays, name in (("cupy", "CuPy"), ("torch", "PyTorch")):
        marks = [pytest.mark.cuda]
        if importlib.util.find_spec(arrays) is None:
            marks.append(
                pytest.mark.skip(reason=f"{name} is not installed: its DLPack inputs cannot be tested")
            )
        params.append(
            pytest.param(Backend(f"cuda-{arrays}", "cuda", arrays=arrays), id=f"cuda-{arrays}", marks=marks)
        )
    return params


def backend_params(
    op: str, *, reference: bool = True, simd_levels: bool = True, cuda: bool = True
) -> list[Any]:
    """pytest parameters: every backend that registers ``op``; without the reference with ``reference=False``,
    the compiled core at this process's SIMD level only with ``simd_levels=False``, host backends only with
    ``cuda=False``."""
    assert op in OPS, f"{op!r} is not an op of toporoute.types.op_table"
    params = [pytest.param(REFERENCE, id="reference")] if reference and op in REGISTERED["reference"] else []
    if op in REGISTERED["cpu"]:
        params += _cpu_params(op, simd_levels)
    if cuda and op in CUDA_OPS:
        params += _cuda_params()
    return params


def on_backends(
    op: str, *, reference: bool = True, simd_levels: bool = True, cuda: bool = True
) -> pytest.MarkDecorator:
    """Parametrises a test's ``backend`` argument over :func:`backend_params`."""
    params = backend_params(op, reference=reference, simd_levels=simd_levels, cuda=cuda)
    return pytest.mark.parametrize("backend", params)


def backend_names(*op_names: str, reference: bool = True) -> list[Any]:
    """pytest parameters: the name (``backend=`` of :mod:`toporoute.ops`) of every host backend that registers
    all of ``op_names``, for tests that call toporoute.ops themselves with numpy inputs; ids and skip marks as in
    :func:`backend_params` (``cpu`` runs at this process's SIMD level). CUDA is not among them: its kernels run
    under :func:`on_backends`."""
    params = []
    for name in _host_names(op_names, reference):
        marks = [needs_core] if name == "cpu" and not CORE_BUILT else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def runnable_names(*op_names: str, reference: bool = True) -> list[str]:
    """The names of :func:`backend_names` that run here, for a test that loops over them itself."""
    return [name for name in _host_names(op_names, reference) if name != "cpu" or CORE_BUILT]


def _host_names(op_names: tuple[str, ...], reference: bool) -> list[str]:
    assert op_names and set(op_names) <= set(OPS), f"not ops of toporoute.types.op_table: {op_names}"
    names = [name for name in HOST if set(op_names) <= REGISTERED[name]]
    return names if reference else [name for name in names if name != "reference"]


def on_backend_names(*op_names: str, reference: bool = True) -> pytest.MarkDecorator:
    """Parametrises a test's ``backend`` argument over :func:`backend_names`."""
    return pytest.mark.parametrize("backend", backend_names(*op_names, reference=reference))
