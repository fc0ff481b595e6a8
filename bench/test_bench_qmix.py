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
  about 2 x 120 GMAC/s of AVX-512 FMA with the operands in registers, about 2 x 94 with a broadcast load each).
- ``test_qmix_forward`` / ``test_qmix_mix``: pytest-benchmark suites per side and B, when the plugin is installed.

Smoke sizes (bench/_scale.py): B = 1 and 8, one short timed round.

Run: ``python -m pytest bench/test_bench_qmix.py -s``.
"""

from __future__ import annotations

import functools
import importlib.util
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


def _macs(op: str, B: int) -> int:
    """Multiply-adds of the dense products in one call (biases, activations and the neighbour mean left out)."""
    c = _ctx().qmix()[1].config
    H, S, Hh, M = c.hidden, c.state_dim, c.hyper_hidden, c.mix_hidden
    if op == "forward":
        gru = 6 * H * H  # input and hidden side, three gates each
        row = c.obs_dim * H + c.gnn_layers * (H * H + gru) + gru + c.head_hidden * (H + c.n_actions)
        return B * N * row
    first = S * (3 * Hh + (Hh if c.b1_hidden else M))
    second = Hh * (c.n_agents * M + M + 1 + (M if c.b1_hidden else 0))
    return B * (first + second)


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
