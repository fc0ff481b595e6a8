"""The committed stub python/toporoute/_core.pyi matches the compiled module's functions."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

core = pytest.importorskip(
    "toporoute._core", reason="the compiled core is not built (reference-only install)"
)

STUB = Path(__file__).resolve().parents[1] / "python" / "toporoute" / "_core.pyi"


def _stub_functions() -> dict[str, list[str]]:
    tree = ast.parse(STUB.read_text())
    return {n.name: [a.arg for a in n.args.args] for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_stub_lists_every_function_with_its_arguments() -> None:
    stub = _stub_functions()
    module = {name for name, obj in vars(core).items() if callable(obj) and not name.startswith("_")}
    assert set(stub) == module
    for name, args in stub.items():
        doc_signature = inspect.getdoc(getattr(core, name)).splitlines()[0]
        for arg in args:
            assert f"{arg}:" in doc_signature, (name, arg, doc_signature)
