"""The Python facade's share of a one-episode ``route`` call on the CPU backend, for two installs of toporoute in
the same run: ``ops.route(q, k, backend="cpu")`` against the same call straight into ``toporoute._core``, B = 1,
N = 8, D = 384, one core thread.

Each install runs in its own processes, alternating (``--rounds`` processes each, 7 timings of 20,000 calls per
process); the facade is the minimum ``ops`` time less the minimum ``_core`` time over all of them (these machines
are noisy, and a process can land on a slow core for its whole life), and the median of the per-timing
differences is printed beside it. The ratio is the second install's facade over the first's.

Run: ``python bench/facade_before_after.py OLD_PYTHONPATH NEW_PYTHONPATH`` (each a folder holding a
``toporoute`` package with its built ``_core``; e.g. ``git archive`` of an older commit's ``python/`` with the
core copied in, and ``python`` here).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys

CHILD = r"""
import json, timeit
import numpy as np
from toporoute import _core, ops
rng = np.random.default_rng(0)
q = rng.standard_normal((1, 8, 384), dtype=np.float32)
k = rng.standard_normal((1, 8, 384), dtype=np.float32)
ops.route(q, k, backend="cpu")
n, out = 20000, []
for _ in range(7):
    a = timeit.timeit(lambda: ops.route(q, k, backend="cpu"), number=n) / n
    c = timeit.timeit(lambda: _core.route(q, k, None, 0.3, 3, ""), number=n) / n
    out.append((a, c))
print(json.dumps(out))
"""


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        model = platform.processor() or "?"
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", help="PYTHONPATH of the first install")
    parser.add_argument("new", help="PYTHONPATH of the second install")
    parser.add_argument("--rounds", type=int, default=8, help="processes per install (default 8)")
    args = parser.parse_args()
    env = {"TOPOROUTE_THREADS": "1", "OMP_NUM_THREADS": "1"}
    timings: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for tag in ("old", "new"):
            run = subprocess.run(
                [sys.executable, "-c", CHILD],
                env={**env, "PYTHONPATH": getattr(args, tag)},
                capture_output=True,
                text=True,
                check=True,
            )
            timings[tag].extend(tuple(t) for t in json.loads(run.stdout))
    facade = {}
    for tag, rows in timings.items():
        ops_min, core_min = min(r[0] for r in rows), min(r[1] for r in rows)
        facade[tag] = ops_min - core_min
        median = statistics.median(r[0] - r[1] for r in rows)
        print(
            f"{tag}: ops.route {ops_min * 1e6:.2f} us = _core {core_min * 1e6:.2f} us + facade "
            f"{facade[tag] * 1e6:.2f} us (median of paired differences {median * 1e6:.2f} us)"
        )
    print(f"[ratio] facade new / old: {facade['new'] / facade['old']:.2f}x (CPU: {_cpu()})")


if __name__ == "__main__":
    main()
