"""GPU benchmarks of the CUDA backend on device arrays (PyTorch, else CuPy), timed with CUDA events:

- ``route`` at N=8, D=384 and B = 262,144 and 1,048,576 (the second when the GPU has the memory): achieved
  bandwidth (bytes read + written per second) against a same-run device-to-device copy of the same input bytes
  and, when known, against the HBM peak (target: >= 50% of peak at B >= 1M);
- ``toposort`` throughput (graphs/s) at N=16 for B = 4,096 .. 1,048,576, unweighted and weighted, against the
  compiled CPU backend on the same machine on host copies of the same graphs (DESIGN.md's target: >= 10x at
  B >= 256k; a ratio is printed at every B).

Each benchmark first checks a slice of its result against the numpy reference. Every call is warmed up before it
is timed. Numbers are printed (and stored in pytest-benchmark's extra_info), not asserted: machines are noisy.
Smoke sizes (bench/_scale.py): B = 4096, one timed repeat.
Run: ``python -m pytest bench/test_bench_gpu.py -s`` on a machine with a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from toporoute import backends, ops
from toporoute.backends import reference

from ._compare import report
from ._compare import seconds as host_seconds
from ._scale import pick

_CUDA_OK, _CUDA_WHY = backends.available()["cuda"]
_CPU_OK, _CPU_WHY = backends.available()["cpu"]
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not _CUDA_OK, reason=f"CUDA unavailable: {_CUDA_WHY}")]

CHECK = 256  # episodes / graphs compared with the reference
REPEATS = pick(5, 1)
WARMUP = 3  # untimed calls first: the first loads the module's kernels, the next ones settle the allocator
TOPOSORT_TARGET_B = 262_144  # DESIGN.md: GPU toposort >= 10x the CPU backend at B >= 256k


class _Gpu:
    """The few device operations the benchmarks need, from PyTorch or CuPy (whichever is installed)."""

    def __init__(self) -> None:
        self.torch: Any = None
        self.cupy: Any = None
        try:
            import torch

            if torch.cuda.is_available():
                self.torch = torch
        except ImportError:
            pass
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            self.cupy = cupy
        except Exception:  # noqa: BLE001 - CuPy missing or without a usable device
            self.cupy = None
        if self.torch is None and self.cupy is None:
            pytest.skip("the GPU benchmarks need PyTorch (with CUDA) or CuPy to hold device arrays")
        self.name = "torch" if self.torch is not None else "cupy"

    def randn(self, shape: tuple[int, ...], seed: int) -> Any:
        if self.torch is not None:
            gen = self.torch.Generator(device="cuda").manual_seed(seed)
            return self.torch.randn(shape, generator=gen, device="cuda", dtype=self.torch.float32)
        return self.cupy.random.default_rng(seed).standard_normal(shape, dtype=self.cupy.float32)

    def rand(self, shape: tuple[int, ...], seed: int) -> Any:
        if self.torch is not None:
            gen = self.torch.Generator(device="cuda").manual_seed(seed)
            return self.torch.rand(shape, generator=gen, device="cuda", dtype=self.torch.float32)
        return self.cupy.random.default_rng(seed).random(shape, dtype=self.cupy.float32)

    def empty_like(self, x: Any) -> Any:
        return self.torch.empty_like(x) if self.torch is not None else self.cupy.empty_like(x)

    def copy(self, dst: Any, src: Any) -> None:
        if self.torch is not None:
            dst.copy_(src)
        else:
            dst[...] = src

    def host(self, x: Any) -> np.ndarray:
        return x.cpu().numpy() if self.torch is not None else self.cupy.asnumpy(x)

    def free_bytes(self) -> int:
        if self.torch is not None:
            return int(self.torch.cuda.mem_get_info()[0])
        return int(self.cupy.cuda.runtime.memGetInfo()[0])

    def release(self) -> None:
        if self.torch is not None:
            self.torch.cuda.empty_cache()
        else:
            self.cupy.get_default_memory_pool().free_all_blocks()

    def device_name(self) -> str:
        if self.torch is not None:
            return str(self.torch.cuda.get_device_name())
        return self.cupy.cuda.runtime.getDeviceProperties(self.cupy.cuda.Device().id)["name"].decode()

    def peak_bandwidth(self) -> float | None:
        """HBM peak in bytes/s from the memory clock and bus width (needs CuPy's device properties)."""
        if self.cupy is None:
            return None
        props = self.cupy.cuda.runtime.getDeviceProperties(self.cupy.cuda.Device().id)
        clock_khz, bus_bits = props.get("memoryClockRate", 0), props.get("memoryBusWidth", 0)
        return 2.0 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None

    def seconds(self, fn: Callable[[], object], repeats: int) -> float:
        """Mean device time of ``fn`` between two CUDA events on the current stream, after ``WARMUP`` calls."""
        for _ in range(WARMUP):
            fn()
        if self.torch is not None:
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / repeats
        start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        return self.cupy.cuda.get_elapsed_time(start, end) / 1e3 / repeats


@pytest.fixture(scope="module")
def gpu() -> _Gpu:
    return _Gpu()


def _assert_routes_slice(gpu: _Gpu, got: Any, q: Any, k: Any) -> None:
    want = reference.route(gpu.host(q[:CHECK]), gpu.host(k[:CHECK]), tau=0.3, k_in=3, active=None)
    np.testing.assert_array_equal(gpu.host(got.adjacency[:CHECK]), want.adjacency)
    np.testing.assert_array_equal(gpu.host(got.inbox[:CHECK]), want.inbox)
    np.testing.assert_array_equal(gpu.host(got.in_degree[:CHECK]), want.in_degree)
    np.testing.assert_allclose(gpu.host(got.scores[:CHECK]), want.scores, rtol=0, atol=1e-6)


@pytest.mark.parametrize("B", pick([262_144, 1_048_576], [4096]))
def test_route_bandwidth(benchmark: Any, gpu: _Gpu, B: int) -> None:
    N, D, k_in = 8, 384, 3
    input_bytes = 2 * B * N * D * 4
    output_bytes = B * N * (N * 4 + N + k_in * 4 + 4)
    need = input_bytes + output_bytes + input_bytes // 2  # the copy's destination holds one of q, k at a time
    if need > 0.9 * gpu.free_bytes():
        pytest.skip(
            f"B={B} needs {need / 2**30:.1f} GiB; the GPU has {gpu.free_bytes() / 2**30:.1f} GiB free"
        )
    benchmark.group = f"cuda route N={N} D={D}"
    # held in a dict so the closures see them and the end of the test can free them before the next size
    arrays = {"q": gpu.randn((B, N, D), seed=1), "k": gpu.randn((B, N, D), seed=2)}

    def run() -> Any:
        return ops.route(arrays["q"], arrays["k"], tau=0.3, k_in=k_in, backend="cuda")

    _assert_routes_slice(gpu, run(), arrays["q"], arrays["k"])
    arrays["scratch"] = gpu.empty_like(arrays["q"])

    def copy() -> None:
        gpu.copy(arrays["scratch"], arrays["q"])
        gpu.copy(arrays["scratch"], arrays["k"])

    t_route = gpu.seconds(run, repeats=REPEATS)
    t_copy = gpu.seconds(copy, repeats=REPEATS)
    route_bw = (input_bytes + output_bytes) / t_route
    copy_bw = 2 * input_bytes / t_copy  # read + write
    peak = gpu.peak_bandwidth()
    line = (
        f"\n[gpu] route B={B} N={N} D={D} on {gpu.device_name()} ({gpu.name}): {t_route * 1e3:.2f} ms, "
        f"{route_bw / 1e9:.0f} GB/s (read + write); D2D copy of the inputs {t_copy * 1e3:.2f} ms, "
        f"{copy_bw / 1e9:.0f} GB/s; route/copy bandwidth {route_bw / copy_bw:.2f}, time {t_route / t_copy:.2f}x"
    )
    if peak:
        verdict = "meets" if route_bw >= 0.5 * peak else "BELOW"
        line += (
            f"; {100 * route_bw / peak:.0f}% of the {peak / 1e12:.2f} TB/s HBM peak ({verdict} target >= 50%)"
        )
    print(line)
    benchmark.extra_info.update(
        {
            "route_GBps": route_bw / 1e9,
            "copy_GBps": copy_bw / 1e9,
            "route_ms": t_route * 1e3,
            "copy_ms": t_copy * 1e3,
        }
    )
    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=0)
    arrays.clear()
    gpu.release()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("B", pick([4096, 65_536, 1_048_576], [4096]))
def test_toposort_throughput(benchmark: Any, gpu: _Gpu, B: int, weighted: bool) -> None:
    N = 16
    benchmark.group = f"cuda toposort N={N} weighted={weighted}"
    adj = gpu.rand((B, N, N), seed=3) < 0.2  # cyclic in general: exercises cycle breaking
    weights = gpu.rand((B, N, N), seed=4) if weighted else None

    def run() -> Any:
        return ops.toposort(adj, weights=weights, backend="cuda")

    got = run()
    w_host = None if weights is None else gpu.host(weights[:CHECK])
    want = reference.toposort(gpu.host(adj[:CHECK]), weights=w_host, active=None)
    for field in ("order", "level", "removed", "is_dag"):
        np.testing.assert_array_equal(gpu.host(getattr(got, field)[:CHECK]), getattr(want, field))
    t_gpu = gpu.seconds(run, repeats=REPEATS)
    print(
        f"\n[gpu] toposort B={B} N={N} weighted={weighted} ({gpu.name}): {t_gpu * 1e3:.3f} ms, "
        f"{B / t_gpu / 1e6:.1f} M graphs/s"
    )
    benchmark.extra_info.update({"graphs_per_s": B / t_gpu, "ms": t_gpu * 1e3})
    if _CPU_OK:
        # the alternative: the same graphs on the host, sorted by the compiled CPU backend (all its threads)
        adj_host = gpu.host(adj)
        weights_host = None if weights is None else gpu.host(weights)

        def run_cpu() -> Any:
            return ops.toposort(adj_host, weights=weights_host, backend="cpu")

        on_cpu = run_cpu()
        for field in ("order", "level", "removed", "is_dag"):
            np.testing.assert_array_equal(getattr(on_cpu, field)[:CHECK], getattr(want, field), err_msg=field)
        t_cpu = host_seconds(run_cpu)
        target = 10.0 if B >= TOPOSORT_TARGET_B else None
        report(
            f"toposort B={B} N={N} weighted={weighted}, device arrays vs host arrays",
            "cpu backend",
            t_cpu,
            f"cuda ({gpu.device_name()})",
            t_gpu,
            target,
        )
        benchmark.extra_info["cpu_ms"] = t_cpu * 1e3
        del adj_host, weights_host, on_cpu
    else:
        print(f"[gpu] toposort: no ratio, the CPU backend is not available: {_CPU_WHY}")
    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=0)
