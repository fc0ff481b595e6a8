"""GPU benchmarks of the CUDA backend on device-resident arrays (PyTorch CUDA tensors, else CuPy), one device:

- ``route`` (N=8, D=384, tau 0.3, k_in 3) at B = 1 .. 1,048,576 against the same routing in PyTorch on the same
  GPU (:func:`toporoute.benchmark.device.torch_route`) and a device-to-device copy of its inputs: wall time per
  back-to-back call (B = 1: the per-call overhead, target <= 20 us), device time (CUDA events) and GB/s;
- ``qmix_forward`` / ``qmix_mix`` (default QMixConfig, N = 3) at B = 64 .. 262,144 against the same PyTorch
  networks (same weights) on the GPU (DESIGN.md: >= 3x at B <= 1024, >= 1.2x above);
- the other ops with a CUDA kernel (``mean_pool``, ``route_indexed``, ``graph_stats``, ``conductor_density``,
  ``bandit_select``) against the compiled CPU backend on host copies, on the inputs of ``toporoute bench``
  (:mod:`toporoute.benchmark.cases`); an op without a CUDA kernel in this build skips, saying so;
- ``toposort`` throughput at N=16 against the CPU backend (DESIGN.md: >= 10x at B >= 256k).

Wall time per call: ``n`` back-to-back calls timed with ``time.perf_counter`` and one synchronisation at the end
(:func:`toporoute.benchmark.measure` with ``sync=``; the CUDA backend does not synchronise), the minimum over the
rounds. Each benchmark first checks a slice of its result against the numpy reference. Numbers are printed, not
asserted (machines are noisy): one line per measurement, and a table of all of them at the end of the module
(shown with or without ``-s``); ``$TOPOROUTE_BENCH_JSON``, when set, names a JSON file that gets them too.

Run: ``python -m pytest bench/test_bench_gpu.py -s -q`` on a machine with a GPU (about 2 minutes on an H100).
Smoke sizes (bench/_scale.py) are tiny, with one short round.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends import reference
from toporoute.benchmark import measure
from toporoute.benchmark.cases import OPS, Context, DeviceCase, OpCase, Unsupported
from toporoute.benchmark.device import Device, open_device, route_bytes, torch_route
from toporoute.benchmark.runner import result_fields

from ._scale import mode, pick

_CUDA_OK, _CUDA_WHY = backends.available()["cuda"]
_CPU_OK, _CPU_WHY = backends.available()["cpu"]
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not _CUDA_OK, reason=f"CUDA unavailable: {_CUDA_WHY}")]

JSON_ENV = "TOPOROUTE_BENCH_JSON"
CHECK = 256  # episodes / graphs compared with the reference
ROUNDS = pick(5, 1)
ROUND_TIME = pick(0.03, 0.002)  # seconds per timed round at least: B = 1 gets thousands of calls a round
MAX_TIME = pick(1.0, 0.2)  # seconds of timed rounds (and of warm-up calls) per side at most
EVENT_CALLS = pick(10, 2)  # calls between the two CUDA events of a device time
OVERHEAD_TARGET = 20e-6  # DESIGN.md: any op on device tensors at B = 1, wall time per back-to-back call
TOPOSORT_TARGET_B = 262_144  # DESIGN.md: GPU toposort >= 10x the CPU backend at B >= 256k
N, D, TAU, K_IN = 8, 384, 0.3, 3

ROUTE_SIZES = pick([1, 64, 4096, 262_144, 1_048_576], [1, 64])
QMIX_SIZES = pick([64, 1024, 16_384, 262_144], [64])
OP_SIZES: dict[str, list[int]] = {
    "mean_pool": pick([1024, 16_384], [64]),
    "route_indexed": pick([1024, 16_384], [64]),
    "graph_stats": pick([4096, 262_144], [64]),
    "conductor_density": pick([4096, 1_048_576], [64]),
    "bandit_select": pick([4096, 65_536], [64]),
}


# -- the table printed at the end ------------------------------------------------------------------------------


@dataclass
class Table:
    """The module's measurements: one printed line each, and a record for the JSON file."""

    device: str
    framework: str
    lines: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, line: str, **record: Any) -> None:
        print(f"\n{line}")
        self.lines.append(line)
        self.records.append(record)

    def text(self) -> str:
        head = f"[gpu] device: {self.device} ({self.framework} arrays); sizes: {mode()}"
        return "\n".join([head, *self.lines])

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "framework": self.framework, "mode": mode(), "results": self.records}


@pytest.fixture(scope="module")
def device() -> Device:
    try:
        return open_device()
    except Unsupported as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def table(request: pytest.FixtureRequest, device: Device) -> Iterator[Table]:
    t = Table(device.name(), device.framework)
    print(f"\n[gpu] device: {t.device} ({t.framework} arrays)")
    yield t
    path = os.environ.get(JSON_ENV)
    if path:
        Path(path).write_text(json.dumps(t.to_dict(), indent=2) + "\n", encoding="utf-8")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if capture is None or reporter is None:
        print("\n" + t.text())
        return
    with capture.global_and_fixture_disabled():  # shown without -s too
        reporter.write_line("")
        for line in t.text().splitlines():
            reporter.write_line(line)
        if path:
            reporter.write_line(f"[gpu] results written to {path}")


@pytest.fixture(scope="module")
def ctx() -> Context:
    return Context()


# -- timing ----------------------------------------------------------------------------------------------------


def wall(device: Device, fn: Callable[[], object]) -> float:
    """Seconds per call of back-to-back calls, host overhead included: the fastest round of ``n`` calls
    followed by one device synchronisation (warm-up calls first)."""
    t = measure(fn, repeats=ROUNDS, round_time=ROUND_TIME, max_time=MAX_TIME, sync=device.synchronize)
    device.finish()  # errors the backend found in the calls, reported now (the calls do not wait)
    return t.min


def host_wall(fn: Callable[[], object]) -> float:
    """Seconds per call of a synchronous (host) call: the fastest round."""
    return measure(fn, repeats=ROUNDS, round_time=ROUND_TIME, max_time=MAX_TIME).min


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.2f} ms"


def ratio(slow: float, fast: float) -> str:
    r = slow / fast
    return f"{r:.2f}×" if r < 10 else f"{r:.1f}×"


# -- checks ----------------------------------------------------------------------------------------------------


def mismatch(device: Device, got: Any, want: Any, rtol: float = 1e-4) -> str:
    """'' when the first ``CHECK`` rows of each field of ``got`` (device arrays) match ``want`` (the reference
    on the inputs' first ``CHECK`` rows): integers and booleans exactly, floats within ``rtol`` and 1e-5;
    else the first field that differs and how."""
    got_fields, want_fields = result_fields(got), result_fields(want)
    if len(got_fields) != len(want_fields):
        return f"{len(got_fields)} result fields against the reference's {len(want_fields)}"
    for (name, g), (_, w) in zip(got_fields, want_fields):
        if w is None or g is None:
            if (w is None) != (g is None):
                return f"{name}: {g is None=} but the reference's {w is None=}"
            continue
        g = device.host(g[:CHECK])
        w = np.asarray(w)
        if g.shape != w.shape:
            return f"{name}: shape {g.shape} vs the reference's {w.shape}"
        try:
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-5, equal_nan=True)
            else:
                np.testing.assert_array_equal(g, w)
        except AssertionError as exc:
            detail = " ".join(ln.strip() for ln in str(exc).strip().splitlines()[:4])
            return f"{name}: {detail}"
    return ""


def assert_slice_matches(device: Device, got: Any, want: Any, what: str) -> None:
    """Fails, naming ``what`` and the field, when :func:`mismatch` finds a difference."""
    found = mismatch(device, got, want)
    assert not found, f"{what}: {found}"


def against_cpu(
    device: Device, run_cpu: Callable[[], Any], want: Any, what: str, t_cuda: float, record: dict[str, Any]
) -> str:
    """Times the CPU backend (``run_cpu`` on host inputs) once its result matches ``want`` (the reference on
    the first ``CHECK`` rows), as the CUDA side's was checked: sets ``record["cpu_s"]`` and returns the
    table line's part on it, with the ratio to the CUDA side's ``t_cuda`` seconds."""
    assert_slice_matches(device, run_cpu(), want, what)
    t_cpu = record["cpu_s"] = host_wall(run_cpu)
    return f", cpu backend on numpy {us(t_cpu)}, ratio {ratio(t_cpu, t_cuda)}"


def _head(x: Any, B: int) -> Any:
    """The first ``CHECK`` rows of an input that carries the batch axis (first axis of length ``B``)."""
    return x[:CHECK] if isinstance(x, np.ndarray) and x.ndim and x.shape[0] == B else x


def reference_of(case: OpCase, B: int) -> Any:
    """The reference's result on the first ``CHECK`` episodes / graphs of the case's host inputs."""
    assert case.op is not None, "the case records its op and inputs"
    args = [_head(a, B) for a in case.args]
    kwargs = {k: _head(v, B) for k, v in case.kwargs.items()}
    return case.op(*args, backend="reference", **kwargs)


def fits(device: Device, need: int) -> None:
    """Skips (saying so) when ``need`` bytes would not fit in 90% of the device's free memory."""
    free = device.free_bytes()
    if need > 0.9 * free:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of device memory; {free / 2**30:.1f} GiB free")


# -- route -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("B", ROUTE_SIZES)
def test_route(device: Device, table: Table, B: int) -> None:
    read, written = route_bytes(B, N, D, K_IN)
    # the inputs, the copy's destination (one of q, k at a time), and the outputs of both sides with room for
    # PyTorch's temporaries (scores, mask, top-k: a few (B, N, N) arrays)
    fits(device, read + read // 2 + 6 * written)
    q, k = device.randn((B, N, D), seed=1), device.randn((B, N, D), seed=2)
    arrays = {"q": q, "k": k, "scratch": device.empty_like(q)}

    def ours() -> Any:
        return ops.route(arrays["q"], arrays["k"], tau=TAU, k_in=K_IN, backend="cuda")

    def copy() -> None:
        device.copy(arrays["scratch"], arrays["q"])
        device.copy(arrays["scratch"], arrays["k"])

    c = min(B, CHECK)
    want = reference.route(device.host(q[:c]), device.host(k[:c]), None, TAU, K_IN)
    assert_slice_matches(device, ours(), want, f"route B={B}")
    device.finish()
    t_ours, t_copy = wall(device, ours), wall(device, copy)
    theirs: Callable[[], object] | None = None
    t_torch, torch_note = 0.0, ""
    if device.torch is not None:
        t_q, t_k = device.as_torch(q), device.as_torch(k)

        def theirs() -> Any:
            with device.torch.inference_mode():
                return torch_route(t_q, t_k, TAU, K_IN)

        torch_note = mismatch(device, theirs(), want, rtol=1e-3)  # reported, not asserted: the alternative
        t_torch = wall(device, theirs)
    line = f"[gpu] route B={B} N={N} D={D}: ours {us(t_ours)}"
    if theirs is not None:
        line += f", torch {us(t_torch)}, ratio {ratio(t_torch, t_ours)}"
    else:
        line += " (no torch: PyTorch with CUDA is not available)"
    line += " per back-to-back call"
    if B == 1:
        verdict = "meets" if t_ours <= OVERHEAD_TARGET else "ABOVE"
        line += f" (the per-call overhead: {verdict} target <= {OVERHEAD_TARGET * 1e6:.0f} µs)"
    record: dict[str, Any] = {"op": "route", "B": B, "ours_s": t_ours, "torch_s": t_torch or None}
    record["copy_s"] = t_copy
    if B >= 4096:
        e_ours = device.event_seconds(ours, EVENT_CALLS)
        e_copy = device.event_seconds(copy, EVENT_CALLS)
        bw, copy_bw = (read + written) / e_ours, 2 * read / e_copy
        line += (
            f"; device time ours {us(e_ours)}, D2D copy of the inputs {us(e_copy)}: {bw / 1e9:,.0f} GB/s "
            f"= {bw / copy_bw:.0%} of the copy's {copy_bw / 1e9:,.0f} GB/s"
        )
        record.update(ours_device_s=e_ours, copy_device_s=e_copy, ours_GBps=bw / 1e9, copy_GBps=copy_bw / 1e9)
        if theirs is not None:
            e_torch = device.event_seconds(theirs, EVENT_CALLS)
            line += f"; device time torch {us(e_torch)}"
            record["torch_device_s"] = e_torch
        peak = device.peak_bandwidth()
        if peak:
            line += f"; {bw / peak:.0%} of the {peak / 1e12:.2f} TB/s HBM peak"
    if torch_note:
        line += f" [torch's result differs: {torch_note}]"
    device.finish()
    table.add(line, **record)
    arrays.clear()
    del q, k
    device.release()


# -- Q-Mix -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("B", QMIX_SIZES)
@pytest.mark.parametrize("op", ["qmix_forward", "qmix_mix"])
def test_qmix(device: Device, table: Table, ctx: Context, op: str, B: int) -> None:
    case = OPS[op].prepare(B, ctx)  # the inputs of `toporoute bench`, random weights with seed 0
    assert case.on_device is not None
    dcase: DeviceCase = case.on_device(device)
    want = reference_of(case, B)
    assert_slice_matches(device, dcase.call(), want, f"{op} B={B}")
    device.finish()
    t_ours = wall(device, dcase.call)
    line = f"[gpu] {op} B={B} N=3: ours {us(t_ours)}"
    record: dict[str, Any] = {"op": op, "B": B, "ours_s": t_ours, "torch_s": None}
    if dcase.alternative is None:
        line += f" ({dcase.alternative_note})"
    else:
        note = mismatch(device, dcase.alternative(), want, rtol=1e-3)
        t_torch = wall(device, dcase.alternative)
        target = 3.0 if B <= 1024 else 1.2
        r = t_torch / t_ours
        line += (
            f", torch {us(t_torch)}, ratio {ratio(t_torch, t_ours)} per back-to-back call "
            f"({'meets' if r >= target else 'BELOW'} target >= {target:g}×)"
        )
        line += f" [torch's result differs: {note}]" if note else ""
        record["torch_s"] = t_torch
    table.add(line, **record)
    del dcase, case
    device.release()


# -- the other CUDA kernels against the CPU backend ------------------------------------------------------------


@pytest.mark.parametrize(("op", "B"), [(op, B) for op, sizes in OP_SIZES.items() for B in sizes])
def test_kernel_vs_cpu(device: Device, table: Table, ctx: Context, op: str, B: int) -> None:
    if op not in backends.kernels("cuda"):
        pytest.skip(f"{op} has no CUDA kernel in this build (not in toporoute.backends.kernels('cuda'))")
    case = OPS[op].prepare(B, ctx)
    assert case.on_device is not None, f"{op}'s case has no device form (its op table entry names no device)"
    dcase = case.on_device(device)
    want = reference_of(case, B)
    assert_slice_matches(device, dcase.call(), want, f"{op} B={B} cuda")
    device.finish()
    t_cuda = wall(device, dcase.call)
    record: dict[str, Any] = {"op": op, "B": B, "cuda_s": t_cuda, "cpu_s": None}
    line = f"[gpu] {op} B={B}: cuda on device arrays {us(t_cuda)} per back-to-back call"
    if _CPU_OK and op in backends.kernels("cpu"):
        line += against_cpu(device, case.call("cpu"), want, f"{op} B={B} cpu", t_cuda, record)
    else:
        line += f" (no ratio: the CPU backend is not available here or has no {op} kernel: {_CPU_WHY})"
    table.add(line, **record)
    del dcase, case
    device.release()


# -- toposort --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("B", pick([4096, 65_536, 1_048_576], [64]))
def test_toposort_throughput(device: Device, table: Table, B: int, weighted: bool) -> None:
    n = 16
    # held in a dict so that the end of the test frees them before the next size (the closures see the dict)
    graphs = {"adj": device.rand((B, n, n), seed=3) < 0.2}  # cyclic in general: exercises cycle breaking
    graphs["weights"] = device.rand((B, n, n), seed=4) if weighted else None
    adj, weights = graphs["adj"], graphs["weights"]

    def run() -> Any:
        return ops.toposort(graphs["adj"], weights=graphs["weights"], backend="cuda")

    c = min(B, CHECK)
    w_host = None if weights is None else device.host(weights[:c])
    want = reference.toposort(device.host(adj[:c]), weights=w_host, active=None)
    assert_slice_matches(device, run(), want, f"toposort B={B}")
    device.finish()
    t_gpu = wall(device, run)
    line = (
        f"[gpu] toposort B={B} N={n} weighted={weighted}: cuda on device arrays {us(t_gpu)} per call, "
        f"{B / t_gpu / 1e6:,.1f} M graphs/s"
    )
    record: dict[str, Any] = {"op": "toposort", "B": B, "weighted": weighted, "cuda_s": t_gpu, "cpu_s": None}
    if _CPU_OK:
        # the alternative: the same graphs on the host, sorted by the compiled CPU backend (all its threads)
        adj_host = device.host(adj)
        weights_host = None if weights is None else device.host(weights)

        def run_cpu() -> Any:
            return ops.toposort(adj_host, weights=weights_host, backend="cpu")

        line += against_cpu(device, run_cpu, want, f"toposort B={B} cpu", t_gpu, record)
        if B >= TOPOSORT_TARGET_B:
            line += f" ({'meets' if record['cpu_s'] / t_gpu >= 10 else 'BELOW'} target >= 10×)"
    else:
        line += f" (no ratio: the CPU backend is not available: {_CPU_WHY})"
    table.add(line, **record)
    del adj, weights
    graphs.clear()
    device.release()
