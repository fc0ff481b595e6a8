"""The committed stub python/toporoute/_core.pyi and the op table together match the compiled module's functions."""

from __future__ import annotations

import ast
import inspect
import re

import pytest
from _paths import ROOT

from toporoute.types.op_table import OPS

core = pytest.importorskip(
    "toporoute._core", reason="the compiled core is not built (reference-only install)"
)

STUB = ROOT / "python" / "toporoute" / "_core.pyi"


def _stub_functions() -> dict[str, list[str]]:
    tree = ast.parse(STUB.read_text())
    return {n.name: [a.arg for a in n.args.args] for n in tree.body if isinstance(n, ast.FunctionDef)}


def _stub_classes() -> dict[str, list[str]]:
    """Each stub class with its ``__init__`` arguments (after self)."""
    tree = ast.parse(STUB.read_text())
    out = {}
    for n in tree.body:
        if isinstance(n, ast.ClassDef):
            init = next(f for f in n.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
            out[n.name] = [a.arg for a in init.args.args[1:]]
    return out


def test_stub_lists_every_function_with_its_arguments() -> None:
    stub = _stub_functions()
    module = {
        name
        for name, obj in vars(core).items()
        if callable(obj) and not isinstance(obj, type) and not name.startswith("_")
    }
    assert set(stub) <= module, "the stub declares functions the module lacks"
    for name, args in stub.items():
        doc_signature = inspect.getdoc(getattr(core, name)).splitlines()[0]
        for arg in args:
            assert f"{arg}:" in doc_signature, (name, arg, doc_signature)
    # every other function is an op of the table, declared there: its binding takes the table's arguments in
    # order (then isa, for a kernel per SIMD level), as backends/cpu.py's generated kernels pass them
    for name in sorted(module - set(stub)):
        assert name in OPS, f"_core.{name} is neither in the stub nor an op of the table"
        want = [a.name for a in OPS[name].args]
        got = _doc_args(getattr(core, name))
        assert got in (want, [*want, "isa"]), (name, got, want)


def _doc_args(fn: object) -> list[str]:
    """The argument names of a pybind11 function's signature line ``name(a: T, b: U = ...) -> R``."""
    line = (inspect.getdoc(fn) or "").splitlines()[0]
    return re.findall(r"(?:\(|, )(\w+): ", line[: line.rindex(") ->") + 1])


def test_the_table_ops_left_out_of_the_stub_are_caught_when_their_binding_differs() -> None:
    """The table check above can fail: a signature line with an argument out of the table's order is caught."""
    assert _doc_args(core.toposort) == ["adj", "weights", "active"]

    def swapped() -> None:
        pass

    swapped.__doc__ = (  # bandit_select's line with k and weights swapped
        "bandit_select(adj: bool (B,N,N), alpha: f32 (B,N), beta: f32 (B,N), weights: f32 | None, k: int, "
        "seed: int, step: int, mode: str, active: bool | None, graph_offset: int) -> (chosen, choices, theta)"
    )
    assert _doc_args(swapped)[3:5] == ["weights", "k"]
    assert _doc_args(swapped) != [a.name for a in OPS["bandit_select"].args]


def test_stub_lists_every_class_with_its_constructor_arguments() -> None:
    stub = _stub_classes()
    module = {name for name, obj in vars(core).items() if isinstance(obj, type) and not name.startswith("_")}
    assert set(stub) == module
    for name, args in stub.items():
        doc_signature = inspect.getdoc(getattr(core, name).__init__).splitlines()[0]
        for arg in args:
            assert f"{arg}:" in doc_signature, (name, arg, doc_signature)
