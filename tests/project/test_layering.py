"""Layering rules (DESIGN.md): the core ops never pull in LLM / HTTP / ML-framework packages nor the upper
layers of toporoute, and backend / SIMD selection through the environment behaves as documented. Everything
that depends on import state or on the environment runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import _procs
import pytest
from _paths import ROOT

import toporoute

FORBIDDEN = [
    "vllm",
    "torch",
    "transformers",
    "onnxruntime",
    "httpx",
    "aiohttp",
    "requests",
    "openai",
    "fastapi",
    "tokenizers",
    "sentence_transformers",
    "opentelemetry",
]

PKG_SRC = ROOT / "python" / "toporoute"
INSTALLED = Path(toporoute.__file__).resolve().parent
# the core layer: every module of these packages (by glob, so a new module is covered) and these files
CORE_PACKAGES = ("ops", "backends", "types")
CORE_FILES = ["errors.py", "_atomic.py"]
UPPER_LAYERS = (
    "embed",
    "llm",
    "methods",
    "runtime",
    "tasks",
    "trace",
    "cli",
    "serve",
    "benchmark",
    "_installation",
    "integrations",
)


def run_python(code: str, tmp_path: Path, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter (cwd: an empty directory) with the toporoute environment variables
    removed, then set from ``env`` (None leaves one unset)."""
    e = {k: v for k, v in os.environ.items() if k not in ("TOPOROUTE_BACKEND", "TOPOROUTE_SIMD")}
    e.update({k: v for k, v in env.items() if v is not None})
    return _procs.run_python(code, tmp_path, env=e)


def run_json(code: str, tmp_path: Path, **env: str | None):
    p = run_python(code, tmp_path, **env)
    assert p.returncode == 0, f"subprocess failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


_LOADED = """
import json, sys
{body}
forbidden = {forbidden!r}
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in forbidden)))
"""


def loaded_modules(body: str, forbidden: list[str], tmp_path: Path, **env: str | None) -> list[str]:
    """The modules of the ``forbidden`` packages that a fresh interpreter has imported after running ``body``."""
    return run_json(_LOADED.format(body=body, forbidden=forbidden), tmp_path, **env)


def assert_loads_none(body: str, forbidden: list[str], tmp_path: Path, **env: str | None) -> None:
    loaded = loaded_modules(body, forbidden, tmp_path, **env)
    assert loaded == [], f"{body!r} imported {loaded}"


@pytest.mark.parametrize(
    "body",
    [
        "import toporoute.ops",
        "import toporoute",
        "import toporoute.backends.reference, toporoute.backends.cpu, toporoute.errors, toporoute.types.results",
        "import toporoute.types.conductor_topology, toporoute.types.qmix_params",
        # and after running every op on the default host backend (lazy imports inside calls count too)
        (
            "import numpy as np\n"
            "from toporoute import ops\n"
            "q = np.ones((2, 3, 4), np.float32)\n"
            "r = ops.route(q, q)\n"
            "ops.toposort(r.adjacency); ops.graph_stats(r.adjacency, prev=r.adjacency)\n"
            "ops.conductor_density(3, 2, 2, 4)\n"
            "p = ops.QMixParams.random(); ops.qmix_forward(p, np.zeros((2, 3, 51), np.float32), r.adjacency)\n"
            "ops.qmix_mix(p, np.zeros((2, 3), np.float32), np.zeros((2, 156), np.float32))\n"
            "ops.route(q, q, backend='reference'); ops.toposort(r.adjacency, backend='reference')"
        ),
    ],
    ids=["ops", "toporoute", "backends", "ops-modules", "ops-calls"],
)
def test_core_imports_no_llm_or_http_packages(body: str, tmp_path: Path) -> None:
    assert_loads_none(body, FORBIDDEN, tmp_path)


def test_embedding_layer_needs_no_torch_or_llm_packages(tmp_path: Path) -> None:
    # Text -> graph runs on ONNX Runtime + tokenizers alone: no torch, transformers or sentence-transformers
    # (the reference it is tested against), and nothing of the LLM layers.
    body = (
        "from toporoute import Router\n"
        "r = Router(tau=0.1).route_texts(['I need a plan', 'I need code'], ['I provide code', 'I provide a plan'])\n"
        "assert r.adjacency.any()"
    )
    forbidden = [m for m in FORBIDDEN if m not in ("onnxruntime", "tokenizers")]
    assert_loads_none(body, forbidden, tmp_path, TOPOROUTE_CACHE=str(tmp_path))


def test_qmix_policy_acts_without_torch(tmp_path: Path) -> None:
    # a trained checkpoint drives the method loop through the compiled forward: torch is for training only
    body = (
        "import numpy as np\n"
        "from toporoute.types.qmix_params import QMixParams\n"
        "from toporoute.methods.qmix import QMixPolicy, actions_to_graph, schedule\n"
        f"QMixParams.random().save({str(tmp_path / 'p.safetensors')!r})\n"
        f"policy = QMixPolicy.load({str(tmp_path / 'p.safetensors')!r})\n"
        "a, q, h, _ = policy.act(np.zeros((3, 51), np.float32), np.eye(3, dtype=bool), np.zeros((3, 128), "
        "np.float32), epsilon=0.0, rng=np.random.default_rng(0))\n"
        "schedule(*actions_to_graph(a))"
    )
    assert_loads_none(body, ["torch", "vllm", "transformers"], tmp_path)


def test_forbidden_module_check_has_teeth(tmp_path: Path) -> None:
    # the same probe reports a forbidden package once it is imported (json stands in for one, always present)
    loaded = loaded_modules("import json.decoder", ["json"], tmp_path)
    assert "json.decoder" in loaded


def _import_pattern(layers: tuple[str, ...]) -> re.Pattern[str]:
    """Any import of one of ``layers`` of toporoute: absolute, relative, ``from .. import x`` or importlib."""
    alt = "|".join(layers)
    return re.compile(
        r"^\s*(?:from\s+(?:toporoute|\.+)\s*\.?\s*(?:" + alt + r")\b"  # from toporoute.llm / from ..llm
        r"|from\s+(?:toporoute|\.+)\s+import\s+[^#\n]*\b(?:" + alt + r")\b"  # from .. import llm
        r"|import\s+toporoute\.(?:" + alt + r")\b"  # import toporoute.llm
        r"|.*import_module\(\s*['\"](?:toporoute)?\.*(?:" + alt + r")\b)",  # importlib
        re.MULTILINE,
    )


_UPPER_IMPORT = _import_pattern(UPPER_LAYERS)
# imports point down inside the core (DESIGN.md): ops -> backends -> types / _core
_DOWN_ONLY = {"backends": ("ops",), "types": ("ops", "backends")}


def _core_sources(root: Path) -> list[Path]:
    files = [root / f for f in CORE_FILES]
    for package in CORE_PACKAGES:
        files += sorted((root / package).rglob("*.py"))
    return [f for f in files if f.exists()]


@pytest.mark.parametrize("root", [PKG_SRC, INSTALLED], ids=["checkout", "installed"])
def test_core_sources_do_not_import_upper_layers(root: Path) -> None:
    files = _core_sources(root)
    names = {f.relative_to(root).as_posix() for f in files}
    expected = {
        "ops/__init__.py",
        "ops/_facade.py",
        "ops/_validate.py",
        "types/results.py",
        "types/qmix_params.py",
    }
    expected |= {
        "types/_safetensors.py",
        "types/conductor_topology.py",
        "backends/__init__.py",
        "backends/cpu.py",
    }
    assert expected <= names, names
    offenders = []
    for f in files:
        for m in _UPPER_IMPORT.finditer(f.read_text()):
            offenders.append(f"{f.relative_to(root)}: {m.group(0).strip()}")
    assert offenders == []


@pytest.mark.parametrize("root", [PKG_SRC, INSTALLED], ids=["checkout", "installed"])
def test_core_imports_point_down(root: Path) -> None:
    # backends never import ops, types import neither: the import graph is ops -> backends -> types
    offenders = []
    for package, above in _DOWN_ONLY.items():
        pattern = _import_pattern(above)
        files = sorted((root / package).rglob("*.py"))
        assert files, root / package
        for f in files:
            offenders += [
                f"{f.relative_to(root)}: {m.group(0).strip()}" for m in pattern.finditer(f.read_text())
            ]
    assert offenders == []


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("from ..ops.results import Routes", True),
        ("from ..ops import _validate", True),
        ("    from toporoute.ops import route", True),
        ("from .. import ops", True),
        ("from ..types.results import Routes", False),
        ("from .._core import route", False),
    ],
)
def test_down_only_pattern(line: str, bad: bool) -> None:
    assert bool(_import_pattern(_DOWN_ONLY["backends"]).search(line)) is bad


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("from toporoute.llm import engine", True),
        ("from ..methods import dytopo", True),
        ("from .runtime.batch import x", True),
        ("from .. import llm", True),
        ("from toporoute import ops, methods", True),
        ("import toporoute.runtime", True),
        ("    mod = importlib.import_module('toporoute.llm.vllm')", True),
        ("from .. import errors", False),
        ("from .results import Routes", False),
        ("from . import _validate as _v", False),
        ("import numpy as np", False),
        ("# the runtime layer calls route()", False),
    ],
)
def test_upper_layer_pattern(line: str, bad: bool) -> None:
    assert bool(_UPPER_IMPORT.search(line)) is bad


# ---------------------------------------------------------------------------------------------------- environment

_SELECT = """
import json
import numpy as np
from toporoute import backends
print(json.dumps(backends.select(None, np.zeros(1)).__name__))
"""

# a strided last axis: the reference accepts it, the compiled core refuses it (DTypeError); which one ran is visible
_WHICH_RAN = """
import json
import numpy as np
from toporoute import ops, errors
q = np.ones((2, 3, 8), np.float32)[..., ::2]
try:
    r = ops.route(q, q, tau=0.0, k_in=0)
    print(json.dumps(["ok", r.in_degree.tolist()]))
except errors.DTypeError as exc:
    print(json.dumps(["DTypeError", exc.arg]))
"""


def test_default_backend_is_cpu_when_built(tmp_path: Path) -> None:
    assert run_json(_SELECT, tmp_path) == "toporoute.backends.cpu"
    assert run_json(_WHICH_RAN, tmp_path) == ["DTypeError", "q"]


def test_env_backend_reference(tmp_path: Path) -> None:
    assert run_json(_SELECT, tmp_path, TOPOROUTE_BACKEND="reference") == "toporoute.backends.reference"
    assert run_json(_WHICH_RAN, tmp_path, TOPOROUTE_BACKEND="reference") == ["ok", [[2, 2, 2], [2, 2, 2]]]


def test_env_backend_cpu(tmp_path: Path) -> None:
    assert run_json(_SELECT, tmp_path, TOPOROUTE_BACKEND="cpu") == "toporoute.backends.cpu"


def test_explicit_backend_overrides_env(tmp_path: Path) -> None:
    code = """
import json
import numpy as np
from toporoute import backends
print(json.dumps(backends.select("cpu", np.zeros(1)).__name__))
"""
    assert run_json(code, tmp_path, TOPOROUTE_BACKEND="reference") == "toporoute.backends.cpu"


def test_env_backend_invalid(tmp_path: Path) -> None:
    code = """
import json
import numpy as np
from toporoute import ops, errors
q = np.ones((1, 2, 3), np.float32)
out = []
try:
    ops.route(q, q)
except errors.InvalidArgumentError as exc:
    out.append([type(exc).__name__, exc.arg, str(exc)])
# an explicit backend= does not read the environment
out.append(ops.route(q, q, tau=0.0, backend="reference").in_degree.tolist())
print(json.dumps(out))
"""
    (name, arg, msg), degrees = run_json(code, tmp_path, TOPOROUTE_BACKEND="bogus")
    assert name == "InvalidArgumentError"
    assert arg == "TOPOROUTE_BACKEND"
    assert "TOPOROUTE_BACKEND" in msg and "'bogus'" in msg
    assert degrees == [[1, 1]]


_SIMD = """
import json
import numpy as np
import toporoute._core as core
from toporoute import ops, errors
info = core.build_info()["simd"]
q = np.ones((1, 3, 4), np.float32)
try:
    r = ops.route(q, q, tau=0.0, backend="cpu")
    res = ["ok", r.in_degree.tolist()]
except errors.ToporouteError as exc:
    res = [type(exc).__name__, exc.arg, str(exc)]
print(json.dumps([info, res]))
"""


def test_env_simd_generic(tmp_path: Path) -> None:
    info, res = run_json(_SIMD, tmp_path, TOPOROUTE_SIMD="generic")
    assert info["active"] == "generic"
    assert res == ["ok", [[2, 2, 2]]]


def test_env_simd_default_is_best_supported(tmp_path: Path) -> None:
    info, res = run_json(_SIMD, tmp_path)
    best = next(isa for isa in ("amx", "avx512", "avx2", "generic") if isa in info["supported"])
    assert info["active"] == best
    assert res == ["ok", [[2, 2, 2]]]


@pytest.mark.parametrize("isa", ["avx2", "avx512", "amx"])
def test_env_simd_each_supported_level(isa: str, tmp_path: Path) -> None:
    import toporoute._core as core

    supported = core.build_info()["simd"]["supported"]
    info, res = run_json(_SIMD, tmp_path, TOPOROUTE_SIMD=isa)
    if isa in supported:
        assert info["active"] == isa
        assert res == ["ok", [[2, 2, 2]]]
    else:  # compiled but not supported by this CPU, or not compiled: a clear error, never a crash
        assert info["active"] is None
        assert res[0] == "BackendUnavailableError" and res[1] == "TOPOROUTE_SIMD"


def test_env_simd_bogus(tmp_path: Path) -> None:
    info, res = run_json(_SIMD, tmp_path, TOPOROUTE_SIMD="bogus")
    assert info["active"] is None
    name, arg, msg = res
    assert name == "InvalidArgumentError"
    assert arg == "TOPOROUTE_SIMD"
    assert "TOPOROUTE_SIMD" in msg and "bogus" in msg


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        # tasks and traces sit beside the LLM layer: scoring and reporting need no engine, model or torch
        ("toporoute.tasks", ["vllm", "torch", "httpx", "onnxruntime", "toporoute.llm", "toporoute.methods"]),
        (
            "toporoute.trace.report",
            ["vllm", "torch", "httpx", "onnxruntime", "toporoute.llm", "toporoute.methods"],
        ),
    ],
)
def test_tasks_and_report_do_not_load_llm_layers(package: str, forbidden: list[str], tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        f"import {package}\n"
        f"bad = {forbidden!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if any(m == b or m.startswith(b + '.') for b in bad))))"
    )
    assert run_json(code, tmp_path) == []


# ------------------------------------------------------------------------------------------ framework adapters

# the agent frameworks of the optional adapters (extras langgraph and autogen), by top-level module
FRAMEWORKS = [
    "langgraph",
    "langchain",
    "langchain_core",
    "langsmith",
    "autogen_agentchat",
    "autogen_core",
    "autogen_ext",
]
ADAPTERS = ("integrations/langgraph.py", "integrations/autogen.py")


def test_core_install_never_imports_agent_frameworks(tmp_path: Path) -> None:
    # every layer, the command line, the service and the adapters' shared module load without LangGraph or AutoGen
    body = (
        "import toporoute, toporoute.ops, toporoute.embed, toporoute.llm, toporoute.methods, toporoute.runtime\n"
        "import toporoute.tasks, toporoute.trace.report, toporoute.cli, toporoute.serve, toporoute.client\n"
        "import toporoute.integrations, toporoute.integrations.rounds\n"
        "from toporoute.methods import registry\n"
        "registry.report_sections()"
    )
    assert_loads_none(body, FRAMEWORKS, tmp_path, TOPOROUTE_CACHE=str(tmp_path))


_FRAMEWORK_IMPORT = re.compile(r"^\s*(?:from|import)\s+(?:" + "|".join(FRAMEWORKS) + r")\b", re.MULTILINE)
_ADAPTER_IMPORT = _import_pattern(("integrations",))


def test_only_the_adapters_import_agent_frameworks() -> None:
    # the frameworks are imported by the two adapter modules only, and nothing outside integrations/ imports it
    files = sorted(PKG_SRC.rglob("*.py"))
    assert {f.relative_to(PKG_SRC).as_posix() for f in files} >= {*ADAPTERS, "integrations/rounds.py"}
    offenders = []
    for f in files:
        rel = f.relative_to(PKG_SRC).as_posix()
        text = f.read_text(encoding="utf-8")
        if rel not in ADAPTERS:
            offenders += [f"{rel}: {m.group(0).strip()}" for m in _FRAMEWORK_IMPORT.finditer(text)]
        if not rel.startswith("integrations/"):
            offenders += [f"{rel}: {m.group(0).strip()}" for m in _ADAPTER_IMPORT.finditer(text)]
    assert offenders == []


# The otel extra is optional (toporoute export-otel): only toporoute/trace/otel.py imports OpenTelemetry, and only
# when that command runs. vLLM may import it for its own tracing (vllm/tracing), so the probe leaves the engines out.
_NO_OTEL = (
    "import toporoute, toporoute.trace, toporoute.trace.schema, toporoute.trace.writer, toporoute.trace.reader\n"
    "import toporoute.trace.report, toporoute.runtime, toporoute.methods.registry, toporoute.cli\n"
    "toporoute.cli._parse(['export-otel', 'RUN_DIR'])\n"
    "toporoute.cli._parse(['report', 'RUN_DIR'])"
)


def _importers(package: str) -> list[str]:
    """The package's modules (paths below toporoute/) that import ``package`` at any depth of their code."""
    pattern = re.compile(rf"^\s*(?:from|import)\s+{package}\b", re.MULTILINE)
    return sorted(
        f.relative_to(PKG_SRC).as_posix()
        for f in PKG_SRC.rglob("*.py")
        if pattern.search(f.read_text(encoding="utf-8"))
    )


def test_only_the_exporter_imports_opentelemetry(tmp_path: Path) -> None:
    assert_loads_none(_NO_OTEL, ["opentelemetry"], tmp_path)
    assert _importers("opentelemetry") == ["trace/otel.py"]


# The ray extra is optional (toporoute run --ray): only toporoute/distributed/ray_run.py imports Ray, and only once a
# run on a cluster starts; a local run, the command line (--ray parsed included) and the package never do.
_NO_RAY = (
    "import toporoute, toporoute.runtime, toporoute.methods.harness, toporoute.distributed, toporoute.cli\n"
    "toporoute.cli._parse(['run', 'dytopo', '--out', 'RUN_DIR', '--ray', '--ray-actors', '2'])\n"
    "import asyncio\n"
    "from toporoute.llm import ScriptedEngine\n"
    "from toporoute.methods import make_method\n"
    "from toporoute.methods.harness import run_method\n"
    "from toporoute.tasks import load_tasks\n"
    "asyncio.run(run_method(make_method('cot'), load_tasks('math-demo', limit=1), ScriptedEngine(lambda r: "
    "'\\\\boxed{1}'), 'RUN_DIR/cot', progress=False))"
)


def test_only_the_ray_runner_imports_ray(tmp_path: Path) -> None:
    assert_loads_none(_NO_RAY, ["ray"], tmp_path)
    assert _importers("ray") == ["distributed/ray_run.py"]
