"""Per-call wall time of the CUDA backend on PyTorch CUDA tensors, back-to-back calls, for the toporoute found on
``sys.path`` (so two installs can be compared: run it once with each on ``PYTHONPATH``).

For each op and batch size: ``CALLS`` calls in a loop, one ``torch.cuda.synchronize()`` after the loop, the wall
time divided by the calls; the minimum over ``ROUNDS`` rounds (these machines are noisy). At B = 1 this is the
host overhead of a call (the kernels take a few microseconds). The same routing written in PyTorch is timed the
same way, in the same process, for the ratio.

Run: ``python bench/gpu_call_overhead.py [--json PATH]`` on a machine with a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

CALLS = 2000
ROUNDS = 5


def per_call(fn: Callable[[], object], sync: Callable[[], None], calls: int = CALLS) -> float:
    """Seconds per call: min over rounds of (calls back to back + one synchronisation) / calls."""
    for _ in range(20):
        fn()
    sync()
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def torch_route(torch: Any, q: Any, k: Any, tau: float, k_in: int) -> tuple[Any, ...]:
    """The routing of toporoute.ops.route in PyTorch (what research code writes): cosine scores, threshold,
    top-k_in per recipient."""
    qn = torch.nn.functional.normalize(q, dim=-1)
    kn = torch.nn.functional.normalize(k, dim=-1)
    scores = kn @ qn.transpose(1, 2)  # scores[b, j, i] = cos(k_j, q_i)
    n = q.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=q.device)
    cand = (scores > tau) & ~eye
    masked = scores.masked_fill(~cand, float("-inf"))
    top = masked.topk(min(k_in, n), dim=1)
    keep = torch.zeros_like(cand).scatter_(1, top.indices, True) & cand
    return scores, keep, top.indices, keep.sum(1)


def _breakdown(torch: Any, dev: Any, sync: Callable[[], None]) -> None:
    """Where a B = 1 route call spends its time (the layers from ops.route down to the core call), for an
    install with backends/_cuda_base.py (the call path without host synchronisation)."""
    try:
        from toporoute.backends import _cuda_base as base
        from toporoute.backends import cuda
    except ImportError:
        return
    core = base.require_core()
    q = torch.randn((1, 8, 384), device=dev)
    k = torch.randn((1, 8, 384), device=dev)
    fw = base.framework_of(("torch", 0))
    stream = fw.stream()
    caps = lambda: (fw.export(q, stream), fw.export(k, stream))
    out = core.route_cuda_dlpack(*caps(), None, None, 0.3, 3, stream)
    parts = {
        "cuda.route (no ops-layer checks)": lambda: cuda.route(q, k, None, 0.3, 3),
        "core.route_cuda_dlpack (2 exports incl.)": lambda: core.route_cuda_dlpack(
            *caps(), None, None, 0.3, 3, stream
        ),
        "framework stream": fw.stream,
        "one export": lambda: fw.export(q, stream),
        "wrap 4 outputs": lambda: [
            fw.wrap(c) for c in core.route_cuda_dlpack(*caps(), None, None, 0.3, 3, stream)
        ],
    }
    del out
    for label, fn in parts.items():
        print(f"[overhead] breakdown B=1: {label}: {per_call(fn, sync) * 1e6:.2f} us/call")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--label", default="", help="a name for this install in the output")
    opts = ap.parse_args()
    import torch

    import toporoute
    from toporoute import ops

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    sync = torch.cuda.synchronize
    name = torch.cuda.get_device_name(0)
    rows: list[dict[str, Any]] = []
    label = opts.label or toporoute.__file__
    print(f"[overhead] {label} on {name}")
    for B in (1, 64, 4096):
        gen = torch.Generator(device=dev).manual_seed(B)
        q = torch.randn((B, 8, 384), generator=gen, device=dev)
        k = torch.randn((B, 8, 384), generator=gen, device=dev)
        ours = per_call(lambda q=q, k=k: ops.route(q, k, tau=0.3, k_in=3), sync)
        with torch.inference_mode():
            theirs = per_call(lambda q=q, k=k: torch_route(torch, q, k, 0.3, 3), sync, calls=CALLS // 4)
        rows.append({"op": "route", "B": B, "ours_us": ours * 1e6, "torch_us": theirs * 1e6})
        print(
            f"[overhead] route B={B} N=8 D=384: {ours * 1e6:.1f} us/call, PyTorch {theirs * 1e6:.1f} us/call, "
            f"ratio {theirs / ours:.1f}x"
        )
    _breakdown(torch, dev, sync)
    adj = torch.rand((1, 16, 16), device=dev) < 0.2
    t = per_call(lambda: ops.toposort(adj), sync)
    rows.append({"op": "toposort", "B": 1, "ours_us": t * 1e6})
    print(f"[overhead] toposort B=1 N=16: {t * 1e6:.1f} us/call")
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as fh:
            json.dump({"label": label, "device": name, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
