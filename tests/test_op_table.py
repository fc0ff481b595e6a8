"""The op table against what implements it: every public op, every backend's registered kernel and the compiled
module agree with the one declaration of each op in :data:`toporoute.types.op_table.OPS`."""

from __future__ import annotations

import importlib
import inspect

import pytest

from toporoute import backends, ops
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
