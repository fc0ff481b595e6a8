"""``toporoute bench`` on device-resident inputs, without a GPU: the PyTorch alternatives (``route`` and the Q-Mix
networks) against the reference on CPU tensors, the clock's synchronisation (a fake device that counts and sleeps),
the device rows of a run (op, PyTorch alternative, device copy with GB/s; ratios against the device alternative)
on a host stand-in for the device, their formatting, and the clear errors where no GPU is usable.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import numpy as np
import pytest

from toporoute import backends
from toporoute.backends import reference
from toporoute.benchmark import BenchOptions, Row, Timing, format_run, measure, run_bench
from toporoute.benchmark import cases as bench_cases
from toporoute.benchmark import runner as bench_runner
from toporoute.benchmark.device import Device, open_device, route_bytes, torch_route
from toporoute.benchmark.export import to_markdown

torch = pytest.importorskip("torch", reason="the device alternatives are PyTorch code")


class HostDevice(Device):
    """A stand-in for the GPU: numpy arrays on the host, run by the ``reference`` backend, PyTorch on the CPU;
    counts synchronisations and ``finish`` calls."""

    backend = "reference"

    def __init__(self) -> None:
        super().__init__(torch=torch)
        self.syncs = 0
        self.finished = 0

    def put(self, x: np.ndarray) -> Any:
        return np.array(x, copy=True)

    def host(self, x: Any) -> np.ndarray:
        return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    def as_torch(self, x: Any) -> Any:
        return torch.from_numpy(x)

    def empty_like(self, x: Any) -> Any:
        return np.empty_like(x)

    def copy(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    def synchronize(self) -> None:
        self.syncs += 1

    def finish(self) -> None:
        self.finished += 1

    def name(self) -> str:
        return "host stand-in"

    def torch_module(self, module: Any) -> Any:
        return copy.deepcopy(module).eval()


@pytest.mark.parametrize(("n", "k_in"), [(8, 3), (8, 0), (5, 7), (2, 1)])
def test_torch_route_matches_the_reference(n: int, k_in: int) -> None:
    rng = np.random.default_rng(n + k_in)
    q = rng.standard_normal((64, n, 16), dtype=np.float32)
    k = rng.standard_normal((64, n, 16), dtype=np.float32)
    want = reference.route(q, k, None, 0.1, k_in)
    scores, adjacency, inbox, in_degree = torch_route(torch.from_numpy(q), torch.from_numpy(k), 0.1, k_in)
    assert want.adjacency.any() and not want.adjacency.all()  # the threshold and the cap both bite
    np.testing.assert_allclose(scores.numpy(), want.scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(adjacency.numpy(), want.adjacency)
    np.testing.assert_array_equal(inbox.numpy(), want.inbox)
    assert inbox.dtype == torch.int32 and in_degree.dtype == torch.int32
    np.testing.assert_array_equal(in_degree.numpy(), want.in_degree)


def test_route_bytes() -> None:
    assert route_bytes(2, 8, 384, 3) == (2 * 2 * 8 * 384 * 4, 2 * 8 * (8 * 4 + 8 + 3 * 4 + 4))
    assert route_bytes(1, 8, 4, 0)[1] == 8 * (8 * 4 + 8 + 7 * 4 + 4)  # uncapped: N - 1 inbox slots


@pytest.mark.parametrize("op", ["qmix_forward", "qmix_mix"])
def test_qmix_device_alternative_is_the_reference_network(op: str) -> None:
    # the PyTorch networks the GPU benchmark runs (copied to the device) compute what the reference does
    case = bench_cases.OPS[op].prepare(16, bench_cases.Context())
    assert case.on_device is not None
    dcase = case.on_device(HostDevice())
    assert dcase.alternative is not None and not dcase.alternative_note
    ours, theirs = dcase.call(), dcase.alternative()
    want = case.call("reference")()
    for got in (ours, theirs):
        got_fields = got if isinstance(got, tuple) else (got,)
        want_fields = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got_fields, want_fields):
            g = g.numpy() if isinstance(g, torch.Tensor) else g
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_every_op_with_a_device_placement_has_a_device_form() -> None:
    from toporoute.types.op_table import OPS as OP_TABLE

    ctx = bench_cases.Context()
    dev = HostDevice()
    for name, spec in bench_cases.OPS.items():
        if name not in OP_TABLE:
            continue
        case = spec.prepare(2, ctx)
        assert (case.on_device is not None) == bool(OP_TABLE[name].device), name
        assert case.op is not None and case.args, name
        if case.on_device is not None:
            dcase = case.on_device(dev)
            # the device arrays are copies of the host inputs, not the inputs themselves
            partial = dcase.call
            assert all(
                a is not h
                for a, h in zip(partial.args, case.args)  # type: ignore[attr-defined]
                if isinstance(h, np.ndarray)
            ), name


def test_measure_synchronises_once_per_round_inside_the_clock() -> None:
    syncs: list[float] = []

    def sync() -> None:  # a device still busy for 2 ms after the last call
        syncs.append(time.perf_counter())
        time.sleep(0.002)

    t = measure(lambda: None, repeats=3, round_time=0.0, sync=sync)
    assert t.number == 1 and t.rounds == 3
    assert len(syncs) == t.warmup + t.rounds  # one after each warm-up call, one per round
    assert t.min >= 0.002  # the wait is part of the round
    t = measure(lambda: None, repeats=2, round_time=0.01, sync=sync, max_time=1.0)
    assert t.number >= 2  # the calls of a round share one synchronisation
    assert len(syncs) - 3 - 3 == t.warmup + 2


def _run(dev: HostDevice, *ops: str, alternatives: bool = True) -> Any:
    opts = BenchOptions(
        ops=ops,
        backends=("reference",),
        sizes={op: (3,) for op in ops},
        repeats=2,
        round_time=0.0,
        max_time=0.05,
        alternatives=alternatives,
    )
    return run_bench(opts, device=dev)


def test_device_rows_of_a_run() -> None:
    dev = HostDevice()
    run = _run(dev, "route", "qmix_mix", "toposort", "conductor_check")
    sides = {
        op: [(r.side, r.kind, r.status) for r in run.rows if r.op == op]
        for op in dict.fromkeys(r.op for r in run.rows)
    }
    assert sides["route"] == [
        ("reference", "backend", "ok"),
        ("torch", "alternative", "ok"),
        ("numpy", "alternative", "ok"),
        ("cuda-device", "device", "ok"),
        ("d2d-copy", "device copy", "ok"),
        ("torch-cuda", "device alternative", "ok"),
    ]
    assert [s for s, _, _ in sides["qmix_mix"]] == ["reference", "torch", "cuda-device", "torch-cuda"]
    assert [s for s, _, _ in sides["toposort"]] == [
        "reference",
        "networkx",
        "cuda-device",
    ]  # no GPU alternative
    assert [s for s, _, _ in sides["conductor_check"]] == ["reference"]  # host only: no device form
    assert dev.finished >= 3 and dev.syncs > 0
    assert any(n.startswith("device: host stand-in (torch arrays)") for n in run.notes)
    assert run.machine["device"] == {"name": "host stand-in", "framework": "torch"}
    by = {(r.op, r.side): r for r in run.rows}
    device_row, copy_row, alt = (by["route", s] for s in ("cuda-device", "d2d-copy", "torch-cuda"))
    assert device_row.timing and copy_row.timing and alt.timing
    assert "GB/s" in copy_row.note and copy_row.vs_reference is None and copy_row.vs_alternative is None
    assert "GB/s" in device_row.note and "of the copy's" in device_row.note
    assert "differ" not in device_row.note
    # the device rows' "vs alt" is the device alternative's; the host rows' the host alternative's
    assert device_row.vs_alternative == pytest.approx(alt.timing.median / device_row.timing.median)
    assert alt.vs_alternative == pytest.approx(1.0)
    mix_ref, mix_dev = by["qmix_mix", "reference"], by["qmix_mix", "cuda-device"]
    assert (
        mix_ref.timing
        and mix_dev.timing
        and by["qmix_mix", "torch"].timing
        and by["qmix_mix", "torch-cuda"].timing
    )
    assert mix_ref.vs_alternative == pytest.approx(
        by["qmix_mix", "torch"].timing.median / mix_ref.timing.median
    )
    assert mix_dev.vs_alternative == pytest.approx(
        by["qmix_mix", "torch-cuda"].timing.median / mix_dev.timing.median
    )
    text = format_run(run)
    assert (
        "route (B episodes of N=8 agents, D=384, tau=0.3, k_in=3; alternatives: torch, numpy (vs alt: the "
        "fastest); on device arrays: PyTorch on the GPU)" in text
    )
    assert "toposort (B DAGs of N=16 nodes (p=0.3); alternative: networkx)" in text
    assert "note: device: host stand-in" in text
    assert "on device arrays: PyTorch on the GPU" in to_markdown(run)
    no_alt = _run(HostDevice(), "route", alternatives=False)
    assert [r.side for r in no_alt.rows] == ["reference", "cuda-device", "d2d-copy"]


def test_a_device_result_that_differs_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = bench_cases.OPS["graph_stats"]

    def prepare(B: int, ctx: bench_cases.Context) -> bench_cases.OpCase:
        case = spec.prepare(B, ctx)
        right: Any = case.call("reference")()
        wrong = dataclasses.replace(right, edges=right.edges + 1)
        return dataclasses.replace(case, on_device=lambda device: bench_cases.DeviceCase(lambda: wrong))

    monkeypatch.setitem(bench_cases.OPS, "graph_stats", dataclasses.replace(spec, prepare=prepare))
    run = _run(HostDevice(), "graph_stats")
    row = next(r for r in run.rows if r.side == "cuda-device")
    assert row.status == "ok" and row.note == "results differ from the reference (edges)"


def test_device_rows_report_failures_per_row(monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing(HostDevice):
        def finish(self) -> None:
            raise RuntimeError("device-side error: code 3")

    run = _run(Failing(), "route")
    row = next(r for r in run.rows if r.side == "cuda-device")
    assert row.status == "error" and "RuntimeError: device-side error: code 3" in row.note
    # nothing else timed on a broken device
    assert [r.side for r in run.rows] == ["reference", "torch", "numpy", "cuda-device"]


def test_no_device_rows_for_an_op_without_a_kernel_there(monkeypatch: pytest.MonkeyPatch) -> None:
    # the host rows of such an op already say that its backend has no kernel; the device adds nothing
    monkeypatch.setattr(bench_runner._backends, "kernels", lambda name: frozenset({"route"}))
    run = _run(HostDevice(), "route", "graph_stats")
    assert [(r.op, r.side) for r in run.rows if r.kind == "device"] == [("route", "cuda-device")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="PyTorch has a CUDA device here")
def test_open_device_without_a_gpu_says_why() -> None:
    with pytest.raises(bench_cases.Unsupported) as exc:
        open_device()
    assert "device arrays need PyTorch with CUDA or CuPy" in str(exc.value)
    assert "has no CUDA device" in str(exc.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="PyTorch has a CUDA device here")
def test_a_cuda_run_without_a_device_notes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # the CUDA backend available (as on a GPU build) but no framework reaches a device: a note, no device rows
    monkeypatch.setattr(bench_runner, "_case_rows", lambda *a, **k: [])
    opts = BenchOptions(ops=("route",), backends=("cuda",), sizes={"route": (1,)})
    run = run_bench(opts)
    assert any(
        n.startswith("no device-array rows: device arrays need PyTorch with CUDA or CuPy") for n in run.notes
    )
    assert "device" not in run.machine


def test_device_results_are_compared_field_by_field() -> None:
    # a PyTorch tensor has a __dict__ (empty): it must count as one array, not as a result without fields
    want = np.arange(6, dtype=np.float32)
    dev = HostDevice()
    assert bench_runner._differs(torch.from_numpy(want.copy()), want, dev.host) == ""
    assert bench_runner._differs(torch.from_numpy(want + 1), want, dev.host) == "result"
    routes = reference.route(np.ones((1, 2, 3), np.float32), np.ones((1, 2, 3), np.float32), None, 0.3, 1)
    as_torch = type(routes)(*(torch.from_numpy(x) for x in vars(routes).values()))
    assert bench_runner._differs(as_torch, routes, dev.host) == ""
    bad = dataclasses.replace(as_torch, inbox=as_torch.inbox + 1)
    assert bench_runner._differs(bad, routes, dev.host) == "inbox"
    assert bench_runner._differs((want, want), want, dev.host) == "2 result fields vs 1"


def test_with_ratios_groups_host_and_device_sides() -> None:
    def row(side: str, kind: str, median: float) -> Row:
        return Row("route", 1, side, kind, "ok", "", Timing(median, median, median, median, 1, 1))

    rows = bench_runner._with_ratios(
        [
            row("reference", "backend", 8.0),
            row("cpu", "backend", 2.0),
            row("cuda-device", "device", 1.0),
            row("d2d-copy", "device copy", 0.5),
            row("torch-cuda", "device alternative", 4.0),
        ]
    )
    got = {r.side: (r.vs_reference, r.vs_alternative) for r in rows}
    assert got == {
        "reference": (1.0, None),
        "cpu": (4.0, None),
        "cuda-device": (8.0, 4.0),
        "d2d-copy": (None, None),
        "torch-cuda": (2.0, 1.0),
    }


def test_cuda_named_without_cuda_is_a_usage_error() -> None:
    if backends.available()["cuda"][0]:
        pytest.skip("CUDA is available here")
    from toporoute.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match="--backend cuda: not available here"):
        bench_runner.resolve_backends("cuda")
