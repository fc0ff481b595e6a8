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
    assert set(stub) == module
    for name, args in stub.items():
        doc_signature = inspect.getdoc(getattr(core, name)).splitlines()[0]
        for arg in args:
            assert f"{arg}:" in doc_signature, (name, arg, doc_signature)


def test_stub_lists_every_class_with_its_constructor_arguments() -> None:
    stub = _stub_classes()
    module = {name for name, obj in vars(core).items() if isinstance(obj, type) and not name.startswith("_")}
    assert set(stub) == module
    for name, args in stub.items():
        doc_signature = inspect.getdoc(getattr(core, name).__init__).splitlines()[0]
        for arg in args:
            assert f"{arg}:" in doc_signature, (name, arg, doc_signature)
