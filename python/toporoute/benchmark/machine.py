"""The machine a benchmark ran on (recorded with every result file, compared by ``--compare``) and the thread
count of the compiled core's OpenMP runtime (``--threads``)."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._info import package_version
from ..errors import BackendUnavailableError, OutOfRangeError

__all__ = [
    "CPU_FLAGS",
    "VERSIONED",
    "core_threads",
    "git_sha",
    "machine_record",
    "threads",
]

CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
"""The ``/proc/cpuinfo`` flags that decide the kernels' and the alternatives' speed."""
VERSIONED = ("numpy", "torch", "onnxruntime", "networkx", "sentence-transformers", "pyyaml")
"""Distributions whose versions are recorded (read from their metadata, not imported)."""


def git_sha() -> str | None:
    """The commit of the source checkout toporoute was imported from (an editable or in-tree run), else None."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    if out.returncode != 0 or len(sha) != 40:
        return None
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=5,
        check=False,
    )
    return sha + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def core_threads() -> int | None:
    """The compiled core's OpenMP thread count (``omp_get_max_threads``), None without the core."""
    try:
        from .. import _core
    except ImportError:
        return None
    return int(_core.build_info()["openmp"]["max_threads"])


def _openmp_library() -> ctypes.CDLL | None:
    """The OpenMP runtime loaded into this process by the core (libgomp, libomp or libiomp), or None."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        name = os.path.basename(path)
        if name.startswith(("libgomp", "libomp", "libiomp")) and ".so" in name:
            return ctypes.CDLL(path)
    return None


def _import_torch() -> Any:
    import importlib
    import importlib.util

    return importlib.import_module("torch") if importlib.util.find_spec("torch") is not None else None


@contextmanager
def threads(n: int | None) -> Iterator[None]:
    """Runs the block with ``n`` OpenMP threads in the compiled core (and ``n`` PyTorch threads when torch is
    installed, which imports it), restoring both afterwards; None changes nothing.

    ``OMP_NUM_THREADS`` is read once, when the OpenMP runtime loads with the core, so the count is set through
    the runtime's ``omp_set_num_threads`` (for the calling thread, which runs the benchmarks) and checked through
    the core's own report."""
    if n is None:
        yield
        return
    if n < 1:
        raise OutOfRangeError(f"threads must be >= 1; got {n}", "threads")
    # PyTorch (an alternative's engine) may share the core's OpenMP runtime: both counts are read before
    # either is set, and restored in the opposite order
    torch = _import_torch()
    torch_before = torch.get_num_threads() if torch is not None else None
    before = core_threads()
    lib = _openmp_library() if before is not None else None
    if torch is not None:
        torch.set_num_threads(n)
    if before is not None and lib is not None:
        lib.omp_set_num_threads(ctypes.c_int(n))
    try:
        if before is not None and lib is not None and core_threads() != n:
            raise BackendUnavailableError(
                f"threads: the core's OpenMP runtime kept {core_threads()} threads after asking for {n}",
                "threads",
            )
        yield
    finally:
        if torch is not None and torch_before is not None:
            torch.set_num_threads(torch_before)
        if before is not None and lib is not None:
            lib.omp_set_num_threads(ctypes.c_int(before))


class CpuUsage:
    """How much of the machine other processes used between :meth:`start` and :meth:`share`: the busy time of all
    CPUs (``/proc/stat``) less this process's own CPU time, over the wall time and the usable CPUs. A shared
    machine's other jobs slow down whatever waits on all its threads (OpenMP's parallel regions first)."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self._busy0 = self._busy()
        self._self0 = self._own()

    @staticmethod
    def _busy() -> float | None:
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()
        except (OSError, IndexError):
            return None
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system

    def share(self) -> float | None:
        """Other processes' share of the machine's CPUs since the start, in [0, 1]; None without /proc/stat."""
        busy = self._busy()
        if busy is None or self._busy0 is None:
            return None
        wall = time.perf_counter() - self._t0
        cpus = os.cpu_count() or 1
        other = (busy - self._busy0) - (self._own() - self._self0)
        return min(1.0, max(0.0, other / (wall * cpus))) if wall > 0 else None


def _source_version() -> str:
    from .. import __version__

    return __version__


def _cpu() -> dict[str, Any]:
    from ..llm.cpu import cpu_info

    cpu = cpu_info()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "model": cpu.model,
        "flags": {f: f in cpu.flags for f in CPU_FLAGS},
        "hypervisor": "hypervisor" in cpu.flags,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def machine_record(requested_threads: int | None = None) -> dict[str, Any]:
    """What a result file records of the machine: ``build_info()``, the CPU (model, flags, counts, load), the
    threads (the core's OpenMP count, ``$OMP_NUM_THREADS``, PyTorch's when imported) and the versions."""
    from .._info import build_info

    torch = sys.modules.get("torch")
    return {
        "build_info": build_info(),
        "cpu": _cpu(),
        "platform": platform.platform(),
        "threads": {
            "requested": requested_threads,
            "core_openmp": core_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "torch": torch.get_num_threads() if torch is not None else None,
        },
        "versions": {
            "python": platform.python_version(),
            "toporoute": package_version("toporoute") or _source_version(),
            **{dist: package_version(dist) for dist in VERSIONED},
        },
        "git_sha": git_sha(),
    }
