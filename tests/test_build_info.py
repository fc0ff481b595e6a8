"""toporoute.build_info(): how the installation was built and which backends can run here."""

from __future__ import annotations

import platform

import pytest

import toporoute
from toporoute import backends

_core = pytest.importorskip(
    "toporoute._core", reason="the compiled core is not built (reference-only install)"
)

ISAS = ("generic", "avx2", "avx512", "amx")
# amx is compiled only where the compiler knows the AMX intrinsics (CMake checks -mamx-tile -mamx-bf16)
X86_ALWAYS = ("generic", "avx2", "avx512")


def test_build_info() -> None:
    info = toporoute.build_info()

    assert isinstance(info["version"], str) and info["version"]
    assert info["version"] in (toporoute.__version__, "unknown")
    assert info["core"] is True, info.get("core_error")

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
