"""Benchmark setup. numpy's OpenBLAS threads spin after each call and steal one of this machine's two cores
from whatever runs next, so BLAS runs single-threaded here (the reference's matmuls are tiny per episode and do
not gain from threads)."""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_PROC_BIND", "false")
