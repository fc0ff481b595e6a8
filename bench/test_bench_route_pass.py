"""The Gram part of ``route`` for large teams against this CPU's float32 FMA peak (issue 38).

bench/route_pass.cpp, compiled here with the C++ compiler the package is built with (``$CXX``, else ``c++``)
from the core's own sources (with the package build's -O3), times on one thread the float32 pass of teams of 16
agents and more (cpp/src/simd/cosine_kernels.inl: every pair's dot product in 16 float32 lanes) and the float64
gram it replaces on the same rows, least CPU time per call, and the peak: 12 independent FMA chains on full
registers of the widest level the CPU runs. It prints each one's GFLOP/s (2 N^2 D flops a call), the pass's share of the peak and
its speed-up over the gram. Asserted: the pass's scores lie within its error bound of the gram's cosines.

Run: ``python -m pytest bench/test_bench_route_pass.py -s`` (full: N = 64, 128, 256 at D = 384, about 10 s);
at smoke size (CI) N = 64, a few calls.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from ._compare import machine
from ._scale import pick

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "cpp" / "src"
D = 384
SIZES = pick((64, 128, 256), (64,))
CALLS = pick(200, 3)
_UNITS = {  # the route kernels' units and the flags CMakeLists.txt compiles each with, then the benchmark
    SRC / "simd" / "gram_generic.cpp": [],
    SRC / "simd" / "gram_avx2.cpp": ["-mavx2", "-mfma"],
    SRC / "simd" / "gram_avx512.cpp": ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx2", "-mfma"],
    Path(__file__).with_name("route_pass.cpp"): [],
}


def _x86() -> bool:
    import platform

    return platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.skipif(
    not _x86(), reason="the float32 pass and this benchmark's peak loop are x86 (AVX2/AVX-512)"
)
def test_route_pass_against_the_fma_peak(tmp_path: Path) -> None:
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    common = [
        "-std=c++17",
        "-O3",
        "-DNDEBUG",
        f"-I{ROOT / 'cpp' / 'include'}",
        f"-I{SRC}",
        "-DTOPOROUTE_HAVE_X86_SIMD=1",
    ]
    objects = []
    for unit, flags in _UNITS.items():
        obj = tmp_path / (unit.stem + ".o")
        build = subprocess.run(
            [*cxx, *common, *flags, "-c", str(unit), "-o", str(obj)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert build.returncode == 0, f"{unit.name} does not compile:\n{build.stderr[-3000:]}"
        objects.append(str(obj))
    exe = tmp_path / "route_pass"
    link = subprocess.run(
        [*cxx, *objects, "-o", str(exe)], capture_output=True, text=True, timeout=300, check=False
    )
    assert link.returncode == 0, link.stderr[-3000:]
    run = subprocess.run(
        [str(exe), str(D), str(CALLS), *map(str, SIZES)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if run.returncode == 3:
        pytest.skip(run.stdout.strip())
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line.split() for line in run.stdout.splitlines()]
    peak = next(float(w[1]) for w in lines if w[0] == "peak")
    lanes = next(int(w[2]) for w in lines if w[0] == "peak")
    print(f"\n{machine(flags=True)}; one thread; float32 FMA peak {peak:.1f} GFLOP/s ({lanes} lanes)")
    bound = 1.07 * (D / 16 + 4) * 2.0**-24 + 1e-7  # route.cpp's cosine_error_bound, plus the float32 rounding
    for w in (w for w in lines if w[0] == "pass"):
        N, _, t_pass, t_gram, diff = int(w[1]), int(w[2]), float(w[3]), float(w[4]), float(w[5])
        flops = 2.0 * N * N * D
        print(
            f"[ratio] route's Gram part, N={N} D={D}: float32 pass {flops / t_pass / 1e9:.1f} GFLOP/s "
            f"({flops / t_pass / 1e9 / peak:.0%} of the peak), float64 gram {flops / t_gram / 1e9:.1f} GFLOP/s; "
            f"pass {t_gram / t_pass:.2f}x the gram's speed (target: >= 50% of the peak for N >= 64)"
        )
        assert diff <= bound, (
            f"N={N}: the pass's scores are {diff:.3g} from the gram's cosines (bound {bound:.3g})"
        )
