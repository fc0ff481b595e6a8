"""toporoute.build_info(): how the installation was built and which backends can run here, with the compiled
core and with it missing."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

import toporoute
from toporoute import backends

ISAS = ("generic", "avx2", "avx512", "amx")
# amx is compiled only where the compiler knows the AMX intrinsics (CMake checks -mamx-tile -mamx-bf16)
X86_ALWAYS = ("generic", "avx2", "avx512")


# build_info() in a fresh interpreter where importing toporoute._core fails (a None entry in sys.modules makes
# the import raise ImportError), as in an install built without a C++ compiler.
_NO_CORE = """
import json, sys
sys.modules["toporoute._core"] = None
import toporoute
print(json.dumps(toporoute.build_info()))
"""


def test_build_info_without_the_core() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _NO_CORE], check=False, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["core"] is False
    assert "toporoute._core" in info["core_error"], info["core_error"]
    assert "simd" not in info and "openmp" not in info  # nothing is claimed of a core that is not there
    assert info["backends"]["reference"] == {"available": True, "reason": ""}
    for name in ("cpu", "cuda"):
        entry = info["backends"][name]
        assert entry["available"] is False and "toporoute._core is not built" in entry["reason"], entry


def test_build_info() -> None:
    _core = pytest.importorskip(
        "toporoute._core", reason="the compiled core is not built (reference-only install)"
    )
    info = toporoute.build_info()

    assert isinstance(info["version"], str) and info["version"]
    assert info["version"] in (toporoute.__version__, "unknown")
    # the no-core test above shows the flag falls to False with the error when the import fails
    assert info["core"] is True and "core_error" not in info, info.get("core_error")

    simd = info["simd"]
    assert set(simd["compiled"]) <= set(ISAS) and "generic" in simd["compiled"]
    assert set(simd["supported"]) <= set(simd["compiled"]) and "generic" in simd["supported"]
    assert simd["active"] in simd["supported"]
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert set(X86_ALWAYS) <= set(simd["compiled"]), "an x86-64 build compiles every SIMD level"
    if "amx" in simd["supported"]:  # the tiles need AVX-512 (the rest of the kernels at that level)
        assert "avx512" in simd["supported"]

    assert isinstance(info["openmp"]["enabled"], bool)
    assert isinstance(info["cuda"], dict) and isinstance(info["cuda"]["compiled"], bool)

    avail = info["backends"]
    assert set(avail) == set(backends.NAMES)
    for name, entry in avail.items():
        assert isinstance(entry["available"], bool), name
        assert isinstance(entry["reason"], str), name
        if not entry["available"]:
            assert entry["reason"], f"backend {name} unavailable without a reason"
    assert avail["reference"] == {"available": True, "reason": ""}
    assert avail["cpu"]["available"] is True, avail["cpu"]["reason"]

    # the compiled core's own report agrees
    core = _core.build_info()
    assert core["simd"] == simd
    assert core["openmp"] == info["openmp"]
    assert core["cuda"]["compiled"] == info["cuda"]["compiled"]
