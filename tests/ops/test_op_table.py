"""The op table against what implements it: every public op, every backend's registered kernel and the compiled
module agree with the one declaration of each op in :data:`toporoute.types.op_table.OPS`."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import numpy as np
import pytest

from toporoute import backends, errors, ops
from toporoute.types import results
from toporoute.types.op_table import OPS

BACKENDS = ("reference", "cpu", "cuda")


def _kernels(name: str) -> dict[str, object]:
    kernels: dict[str, object] = importlib.import_module(f"toporoute.backends.{name}").KERNELS
    return kernels


def test_every_op_of_the_table_is_a_public_op_and_nothing_else_is() -> None:
    public = {n for n in ops.__all__ if callable(getattr(ops, n)) and n.islower()}
    assert public == set(OPS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_kernel_takes_the_table_arguments_in_order(backend: str) -> None:
    """The dispatch passes the table's arguments positionally: a kernel that names or orders them otherwise
    would get them mixed up, so each kernel's leading parameters are the table's, none keyword-only."""
    kernels = _kernels(backend)
    assert set(kernels) <= set(OPS), f"{backend} registers ops the table does not declare"
    for name, fn in kernels.items():
        want = [a.name for a in OPS[name].args]
        params = list(inspect.signature(fn).parameters.values())  # type: ignore[arg-type]
        assert [p.name for p in params[: len(want)]] == want, f"{backend}.{name}"
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[: len(want)]), f"{backend}.{name}"
        assert all(p.default is not p.empty for p in params[len(want) :]), f"{backend}.{name}: extra required"


def test_the_reference_registers_every_op() -> None:
    assert set(_kernels("reference")) == set(OPS)
    assert backends.kernels("reference") == frozenset(OPS)


def test_public_ops_take_the_table_arguments() -> None:
    """Each public op takes every argument of its declaration by the same keyword, plus ``backend`` (the
    facade may name a few differently where the public API predates the table: listed here)."""
    renamed = {("conductor_check", "contexts"): "context"}
    for name, spec in OPS.items():
        params = inspect.signature(getattr(ops, name)).parameters
        assert "backend" in params, name
        for arg in spec.args:
            public = renamed.get((name, arg.name), arg.name)
            if name == "route_indexed" and arg.name == "active":  # -1 rows mark inactive agents there
                continue
            assert public in params, f"ops.{name} lacks {public}"


def test_the_table_names_result_types_that_exist_and_valid_leads() -> None:
    for spec in OPS.values():
        assert spec.returns in {"ndarray", "TopologyBatch"} or hasattr(results, spec.returns), spec.name
        names = [a.name for a in spec.args]
        assert len(set(names)) == len(names), spec.name
        for field in (spec.lead, spec.device):
            assert field == "" or field in names, (spec.name, field)
        assert (spec.lead == "") == (spec.rank == 0), spec.name
        if spec.lead:
            assert spec.args[spec.index(spec.lead)].batch, f"{spec.name}: lead must carry the batch axis"


def test_toporoute_bench_times_every_op_of_the_table_in_its_order() -> None:
    from toporoute.benchmark.cases import OPS as CASES

    assert [n for n in CASES if n in OPS] == list(OPS)
    assert [n for n in CASES if n not in OPS] == ["encoder", "router"]


def test_every_sample_belongs_to_an_op_and_is_its_bench_case() -> None:
    from toporoute.backends import reference
    from toporoute.benchmark.cases import OPS as CASES

    assert set(reference.SAMPLES) <= set(OPS)
    for name, sample in reference.SAMPLES.items():  # not shadowed by a case written out in benchmark.cases
        assert CASES[name].meaning == sample.meaning, name
        args, kwargs = sample.make(2)
        assert len(args) + len(kwargs) <= len(OPS[name].args), name


def _bad_inputs() -> list[tuple[str, Callable[[str | None], object]]]:
    """(op, call) pairs: a call of the op on bad input, for each op whose CPU kernel checks its own inputs; the
    op name ends in ``!`` where only the kernels find it (a value: the backends word those alike but for the
    number's format)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 8), dtype=np.float32)
    nan = q.copy()
    nan[1, 2, 3] = np.nan
    adj = rng.random((2, 5, 5)) < 0.4
    w = rng.random((2, 5, 5), dtype=np.float32)
    bad_w = w.copy()
    bad_w[0, 1, 2] = -1.0
    return [
        ("route", lambda b: ops.route(q.astype(np.float64), q, backend=b)),
        ("route", lambda b: ops.route(q, q[:, :3], backend=b)),
        ("route", lambda b: ops.route(q, q, active=np.ones((2, 3), bool), backend=b)),
        ("route", lambda b: ops.route(q, q, active=np.ones((2, 4), np.int8), backend=b)),
        ("route", lambda b: ops.route(q, q, tau=1.5, backend=b)),
        ("route", lambda b: ops.route(q, q, tau=float("nan"), backend=b)),
        ("route", lambda b: ops.route(q, q, k_in=-1, backend=b)),
        ("route!", lambda b: ops.route(q, nan, backend=b)),
        ("toposort", lambda b: ops.toposort(adj.astype(np.int8), backend=b)),
        ("toposort", lambda b: ops.toposort(adj[:, :4], backend=b)),
        ("toposort", lambda b: ops.toposort(adj, weights=w[:, :4], backend=b)),
        ("toposort", lambda b: ops.toposort(adj, weights=w.astype(np.float64), backend=b)),
        ("toposort!", lambda b: ops.toposort(adj, weights=bad_w, backend=b)),
        ("toposort", lambda b: ops.toposort(adj, active=np.ones((2, 4), bool), backend=b)),
        ("graph_stats", lambda b: ops.graph_stats(adj.astype(np.float32), backend=b)),
        ("graph_stats", lambda b: ops.graph_stats(adj, prev=adj[:1], backend=b)),
        ("graph_stats", lambda b: ops.graph_stats(adj, active=np.ones((2, 5), np.float32), backend=b)),
    ]


@pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")
@pytest.mark.parametrize("backend", [None, "cpu"])
def test_kernels_that_check_their_inputs_raise_the_validators_errors(backend: str | None) -> None:
    """The ops whose CPU kernel checks its own inputs (``cpu.CHECKS_INPUTS``) skip the validator once a call has
    resolved that kernel; bad input must still raise what the validator raises (the reference's error: class,
    argument, message), and nothing the validator refuses may pass."""
    from toporoute.backends import cpu

    cases = _bad_inputs()
    assert {op.rstrip("!") for op, _ in cases} == set(cpu.CHECKS_INPUTS)
    good = np.zeros((1, 3, 3), bool)
    ops.toposort(good, backend=backend), ops.graph_stats(good, backend=backend)  # the kernels are resolved
    ops.route(np.ones((1, 2, 4), np.float32), np.ones((1, 2, 4), np.float32), backend=backend)
    for op, call in cases:
        with pytest.raises(errors.InvalidArgumentError) as want:
            call("reference")
        with pytest.raises(errors.InvalidArgumentError) as got:
            call(backend)
        assert (type(got.value), got.value.arg) == (type(want.value), want.value.arg), op
        if not op.endswith("!"):
            assert str(got.value) == str(want.value)
        assert got.value.__context__ is None, op  # the kernel's refusal does not show as a second traceback


def test_core_result_builds_the_dataclass_and_refuses_a_wrong_count() -> None:
    core = pytest.importorskip("toporoute._core", reason="the compiled core is not built")
    a, b = np.zeros(2), np.ones(3)
    got = core.result(results.DagEdits, (a, b, a, b, a))
    assert type(got) is results.DagEdits
    assert all(f is x for f, x in zip(vars(got).values(), (a, b, a, b, a), strict=True))
    with pytest.raises(TypeError, match="has 5 fields, the core returned 2 values"):
        core.result(results.DagEdits, (a, b))
    with pytest.raises(TypeError, match="takes a dataclass and a tuple"):
        core.result(results.DagEdits, [a, b])
