"""The Agent Q-Mix networks in the compiled core (backend ``cpu``) against the same networks in PyTorch
(DESIGN.md's table: ``qmix_forward`` at B = 1..64 targets >= 5x), N = 3 agents, the default config, fixed random
weights. PyTorch runs ``QMixNets(cfg).agent`` / ``.mixer`` in ``eval()`` under ``torch.inference_mode()`` with
its default thread count, on the same weights and inputs (tensors prepared beforehand); the forward passes the
GRU memory (a round after the first). Networks and inputs are ``toporoute bench``'s cases
(``toporoute.benchmark.cases``), so both time the same thing.

- ``test_*_vs_torch``: same-run medians (bench/_compare.py) and the ratio torch / core per B, printed (not
  asserted: machines are noisy); the core's results are asserted against PyTorch within 1e-5. A second line
  gives each side's rate in multiply-adds of the Linear and GRU layers per second: both sides do this work in
  float32, so a ratio is capped by the machine's FMA peak over PyTorch's rate (on a 2-core Sapphire Rapids
  about 2 x 120 GMAC/s of AVX-512 FMA with the operands in registers, about 2 x 94 with a broadcast load each;
  on a 2-core AMD EPYC, Zen 5, 2 x 131 to 2 x 143 by clock, and the core's GEMM loops reach it).
  A third line times ``torch.mm`` alone on the same products (inputs and outputs allocated beforehand): the
  share of PyTorch's time that is matrix products, and the core's whole call against PyTorch's products only.
- ``test_qmix_forward`` / ``test_qmix_mix``: pytest-benchmark suites per side and B, when the plugin is installed.

Smoke sizes (bench/_scale.py): B = 1 and 8, one short timed round.

Run: ``python -m pytest bench/test_bench_qmix.py -s``.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from toporoute import backends
from toporoute.benchmark.cases import OPS, Context

from ._compare import report, seconds
from ._scale import pick

torch = pytest.importorskip("torch", reason="PyTorch is the comparison baseline")
pytestmark = pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")

BATCHES = pick((1, 8, 64, 1024), (1, 8))
N = 3
ATOL = 1e-5
_PLUGIN = importlib.util.find_spec("pytest_benchmark") is not None


@functools.cache
def _ctx() -> Context:
    """The run's shared Q-Mix networks (``toporoute bench``'s: default config, torch seed 0)."""
    return Context()


@functools.cache
def _case(op: str, B: int) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(core call, torch call) of one op at batch B, inputs built once: ``toporoute bench``'s case."""
    case = OPS[f"qmix_{op}"].prepare(B, _ctx())
    assert case.alternative is not None, case.alternative_note
    return case.call("cpu"), case.alternative


def _check(op: str, B: int) -> None:
    core, baseline = _case(op, B)
    got = core()
    with torch.inference_mode():
        want = baseline()
    pairs = zip(got, want) if op == "forward" else [(got, want)]
    for g, w in pairs:
        err = float(np.abs(g - w.numpy()).max())
        assert err <= ATOL, f"qmix_{op} B={B}: cpu differs from torch by {err:.3g}"


def _products(op: str, B: int) -> list[tuple[int, int, int]]:
    """The dense products (rows, K, outputs) of one call, in network order: the Linear layers, and each GRUCell's
    input and hidden sides with their three gates side by side (biases, activations and the neighbour mean are
    not products)."""
    c = _ctx().qmix()[1].config
    H, S, Hh, M = c.hidden, c.state_dim, c.hyper_hidden, c.mix_hidden
    if op == "forward":
        R = B * N
        gru = [(R, H, 3 * H), (R, H, 3 * H)]
        return [
            (R, c.obs_dim, H),
            *[p for _ in range(c.gnn_layers) for p in [(R, H, H), *gru]],
            *gru,
            (R, H, c.head_hidden),
            (R, c.head_hidden, c.n_actions),
        ]
    first = [(B, S, Hh)] * 3 + [(B, S, Hh if c.b1_hidden else M)]
    second = [(B, Hh, c.n_agents * M), (B, Hh, M), (B, Hh, 1)] + ([(B, Hh, M)] if c.b1_hidden else [])
    return first + second


def _macs(op: str, B: int) -> int:
    """Multiply-adds of the dense products in one call."""
    return sum(m * k * n for m, k, n in _products(op, B))


@functools.cache
def _torch_products(op: str, B: int) -> Callable[[], Any]:
    """torch.mm over the call's products one after the other, inputs and outputs allocated beforehand: what
    PyTorch's network would cost if it were nothing but its matrix products."""
    gen = torch.Generator().manual_seed(B)
    mats = [
        (torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen), torch.empty(m, n))
        for m, k, n in _products(op, B)
    ]

    def run() -> None:
        with torch.inference_mode():
            for a, b, out in mats:
                torch.mm(a, b, out=out)

    return run


def _compare(op: str, B: int) -> None:
    _check(op, B)
    core, baseline = _case(op, B)

    def torch_call() -> Any:
        with torch.inference_mode():
            return baseline()

    slow = seconds(torch_call)
    fast = seconds(core)
    # DESIGN.md's target for the forward at B <= 64; issue 23's for both networks at B = 1024
    target = 5.0 if op == "forward" and B <= 64 else 2.0 if B >= 1024 else 1.0
    report(
        f"qmix_{op} B={B} N={N} (torch threads {torch.get_num_threads()})", "torch", slow, "cpu", fast, target
    )
    macs = _macs(op, B)
    print(f"[rate] qmix_{op} B={B}: torch {macs / slow / 1e9:.1f} GMAC/s, cpu {macs / fast / 1e9:.1f} GMAC/s")
    gemm = seconds(_torch_products(op, B))
    print(
        f"[gemm] qmix_{op} B={B}: torch.mm alone on the same {len(_products(op, B))} products {gemm * 1e6:.1f} us "
        f"({macs / gemm / 1e9:.1f} GMAC/s), {gemm / slow:.0%} of torch's network; the cpu call (the whole "
        f"network) takes {fast / gemm:.2f}x their time"
    )


@pytest.mark.parametrize("B", BATCHES)
def test_qmix_forward_vs_torch(B: int) -> None:
    _compare("forward", B)


@pytest.mark.parametrize("B", BATCHES)
def test_qmix_mix_vs_torch(B: int) -> None:
    _compare("mix", B)


def _bench(benchmark: Any, op: str, side: str, B: int) -> None:
    _check(op, B)
    core, baseline = _case(op, B)
    benchmark.group = f"qmix_{op} N={N} B={B}"
    if side == "cpu":
        benchmark(core)
    else:
        with torch.inference_mode():
            benchmark(baseline)


@pytest.mark.skipif(not _PLUGIN, reason="pytest-benchmark is not installed")
@pytest.mark.parametrize("side", ["cpu", "torch"])
@pytest.mark.parametrize("B", BATCHES)
def test_qmix_forward(benchmark: Any, side: str, B: int) -> None:
    _bench(benchmark, "forward", side, B)


@pytest.mark.skipif(not _PLUGIN, reason="pytest-benchmark is not installed")
@pytest.mark.parametrize("side", ["cpu", "torch"])
@pytest.mark.parametrize("B", BATCHES)
def test_qmix_mix(benchmark: Any, side: str, B: int) -> None:
    _bench(benchmark, "mix", side, B)


LEVEL_BATCHES = pick((1, 2, 4, 8, 16, 32, 64, 256, 1024), (1, 64))


def _amx_here() -> str | None:
    """None when this CPU and build run the AMX level, else why not."""
    from toporoute import _core

    info = _core.build_info().get("simd", {})
    return (
        None
        if "amx" in info.get("supported", [])
        else f"no AMX level here (supported: {info.get('supported')})"
    )


def _interleaved(calls: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Each call's best mean time over rounds that take the sides in turn (a side's round: at least 20 ms of
    back-to-back calls), after warm-up calls: on a shared VM the levels' times drift by tens of percent between
    runs, and side by side in one round they drift together. At smoke size: one short round."""
    rounds, span = pick((15, 0.02), (1, 0.0))
    for call in calls.values():
        for _ in range(20):
            call()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for side, call in calls.items():
            n, t0 = 0, time.perf_counter()
            while True:
                call()
                n += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= span:
                    break
            best[side] = min(best[side], elapsed / n)
    return best


@pytest.mark.parametrize("op", ["forward", "mix"])
def test_qmix_level_by_size(op: str) -> None:
    """The level a call runs at when none is named (``_core.qmix_level``: AMX only from enough rows) against
    each level named: at every B the default should be as fast as the faster of avx512 and amx. Printed, not
    asserted; the results of the three agree within 1e-5 (asserted)."""
    from toporoute import _core
    from toporoute.backends import cpu

    why = _amx_here()
    if why is not None:
        pytest.skip(why)
    for B in LEVEL_BATCHES:
        case = OPS[f"qmix_{op}"].prepare(B, _ctx())
        args = case.args
        rows = B * N if op == "forward" else B
        kernel = getattr(cpu, f"qmix_{op}")
        calls = {isa: functools.partial(kernel, *args, isa=isa) for isa in ("", "avx512", "amx")}
        outs = {isa: call() for isa, call in calls.items()}
        for isa in ("avx512", "amx"):
            pairs = zip(outs[isa], outs[""]) if op == "forward" else [(outs[isa], outs[""])]
            for got, want in pairs:
                assert float(np.abs(got - want).max()) <= ATOL, f"qmix_{op} B={B}: {isa} differs"
        t = _interleaved(calls)
        best = min(t["avx512"], t["amx"])
        print(
            f"\n[level] qmix_{op} B={B} N={N}: default runs {_core.qmix_level(f'qmix_{op}', rows)} "
            f"{t[''] * 1e6:.1f} us; avx512 {t['avx512'] * 1e6:.1f} us, amx {t['amx'] * 1e6:.1f} us; "
            f"default / faster level = {t[''] / best:.2f}x"
        )
