"""No module of the package imports another module's private names: what is shared has a public home.

Two rules, checked on the source (AST) of every module of ``toporoute``:

- a name that starts with ``_`` is never imported from another module (``from .dytopo import _clip``);
- a private module (``_name.py`` or a ``_name`` package) is imported only from inside the package that holds it
  (``methods/qmix/_graph.py`` from ``methods.qmix``, not from ``methods.conductor``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _paths import ROOT

PKG = ROOT / "python" / "toporoute"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    path = PKG.parent.joinpath(*dotted.split("."))
    return (
        path.with_suffix(".py").is_file()
        or (path / "__init__.py").is_file()
        or path.with_suffix(".pyi").is_file()
    )


def _private_owner(dotted: str) -> str | None:
    """The package that may import ``dotted`` when it is (or lies inside) a private module, else None."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _imports(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` for every import in the file; ``name`` is None for ``import module``."""
    this = _module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "toporoute"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "toporoute":
                module = node.module
            else:
                continue
            out += [(node.lineno, module, a.name) for a in node.names]
    return out


def violations(path: Path) -> list[str]:
    this = _module_name(path)
    found = []
    for line, module, name in _imports(path):
        target = module if name is None else f"{module}.{name}"
        if name is not None and not _is_module(target):
            if name.startswith("_") and not name.startswith("__"):
                found.append(f"{this}:{line} imports the private name {name} of {module}")
            target = module
        owner = _private_owner(target)
        if owner is not None and not (this == owner or this.startswith(owner + ".")):
            found.append(f"{this}:{line} imports the private module {target} from outside {owner}")
    return found


MODULES = sorted(PKG.rglob("*.py"))


def test_the_package_has_modules() -> None:
    names = {_module_name(p) for p in MODULES}
    assert {"toporoute.ops", "toporoute.methods.episode", "toporoute.trace.schema"} <= names


def test_no_module_imports_private_names_of_another() -> None:
    found = [v for path in MODULES for v in violations(path)]
    assert found == []


@pytest.mark.parametrize(
    ("rel", "source", "expected"),
    [
        ("methods/qmix/method.py", "from ..dytopo.loop import _clip\n", "private name _clip"),
        (
            "methods/conductor/method.py",
            "from ..qmix import _graph\n",
            "private module toporoute.methods.qmix._graph",
        ),
        ("llm/models.py", "from ..embed._model_files import cache_root\n", "private module"),
        ("methods/qmix/method.py", "from ._graph import ACTIONS\n", None),  # inside its own package
        ("backends/cpu.py", "from .. import _core\n", None),  # the compiled module, private to toporoute
        ("methods/qmix/method.py", "import toporoute.methods.qmix._graph\n", None),
        ("trace/report.py", "import toporoute.methods.qmix._graph\n", "private module"),
    ],
)
def test_the_check_has_teeth(
    tmp_path: Path, rel: str, source: str, expected: str | None, monkeypatch
) -> None:
    # the checker sees a file at the package path `rel` holding `source`
    fake = PKG / rel
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source if self == fake else "")
    found = violations(fake)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found
