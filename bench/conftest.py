"""Benchmark setup.

numpy's OpenBLAS threads spin after each call and steal one of this machine's two cores from whatever runs next,
so BLAS runs single-threaded here (the reference's matmuls are tiny per episode and do not gain from threads).

Sizes (bench/_scale.py): ``$TOPOROUTE_BENCH=full|smoke``; unset, ``--benchmark-disable`` (CI) means smoke.
"""

from __future__ import annotations

import os

import pytest

from ._scale import ENV, mode

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_PROC_BIND", "false")


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(ENV):
        os.environ[ENV] = "smoke" if config.getoption("benchmark_disable", default=False) else "full"
    try:
        mode()  # a bad value stops the run here, once, instead of failing every module
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str:
    return f"bench sizes: {mode()} ({ENV}=full|smoke; unset: smoke under --benchmark-disable)"
