"""Benchmarks on device-resident arrays: the GPU's arrays (PyTorch CUDA tensors, else CuPy), the clock that
waits for the GPU, and the PyTorch versions of the ops that ``toporoute bench --backend cuda`` and
``bench/test_bench_gpu.py`` compare with.

Timing: calls on device arrays are asynchronous (the CUDA backend does not synchronise either), so a round is
``n`` back-to-back calls followed by one :meth:`Device.synchronize`, timed with ``time.perf_counter``: the wall
time per call, host overhead included (:func:`toporoute.benchmark.timing.measure` with ``sync=``). Device time
alone comes from CUDA events around the calls (:meth:`Device.event_seconds`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Device", "open_device", "route_bytes", "torch_route"]


class Device:
    """The few operations on GPU arrays the benchmarks need, from PyTorch (when it has CUDA) or CuPy.

    ``framework`` is ``"torch"`` or ``"cupy"``; ``backend`` the ops backend that takes these arrays (``cuda``;
    tests use a host stand-in with ``reference``)."""

    backend = "cuda"

    def __init__(self, torch: Any = None, cupy: Any = None) -> None:
        if torch is None and cupy is None:
            raise ValueError("a Device needs PyTorch or CuPy")
        self.torch = torch
        self.cupy = cupy
        self.framework = "torch" if torch is not None else "cupy"

    # -- arrays ----------------------------------------------------------------------------------------------

    def put(self, x: np.ndarray) -> Any:
        """A device copy of the host array ``x``."""
        if self.torch is not None:
            return self.torch.from_numpy(np.ascontiguousarray(x)).to("cuda")
        return self.cupy.asarray(x)

    def host(self, x: Any) -> np.ndarray:
        """A numpy copy of the device array ``x`` (waits for the GPU)."""
        if isinstance(x, np.ndarray):
            return x
        if self.torch is not None:
            return np.asarray(x.detach().cpu().numpy())
        return np.asarray(self.cupy.asnumpy(x))

    def as_torch(self, x: Any) -> Any:
        """The device array ``x`` (made by :meth:`put`) as a PyTorch tensor sharing its memory; PyTorch must be
        this device's framework."""
        if self.torch is None:
            raise RuntimeError("PyTorch with CUDA is not available")
        return x

    def randn(self, shape: tuple[int, ...], seed: int) -> Any:
        """Standard normal float32, generated on the device (no host copy of a large input)."""
        if self.torch is not None:
            gen = self.torch.Generator(device="cuda").manual_seed(seed)
            return self.torch.randn(shape, generator=gen, device="cuda", dtype=self.torch.float32)
        return self.cupy.random.default_rng(seed).standard_normal(shape, dtype=self.cupy.float32)

    def rand(self, shape: tuple[int, ...], seed: int) -> Any:
        """Uniform [0, 1) float32, generated on the device."""
        if self.torch is not None:
            gen = self.torch.Generator(device="cuda").manual_seed(seed)
            return self.torch.rand(shape, generator=gen, device="cuda", dtype=self.torch.float32)
        return self.cupy.random.default_rng(seed).random(shape, dtype=self.cupy.float32)

    def empty_like(self, x: Any) -> Any:
        return self.torch.empty_like(x) if self.torch is not None else self.cupy.empty_like(x)

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[...] = src`` on the device (asynchronous)."""
        if self.torch is not None:
            dst.copy_(src)
        else:
            dst[...] = src

    # -- the device ------------------------------------------------------------------------------------------

    def synchronize(self) -> None:
        """Waits until the device has finished all queued work."""
        if self.torch is not None:
            self.torch.cuda.synchronize()
        else:
            self.cupy.cuda.Device().synchronize()

    def finish(self) -> None:
        """Waits for the device, then raises what the CUDA backend found wrong in the calls so far (it reports
        errors of asynchronous calls through ``toporoute.backends.cuda.synchronize`` where it has one)."""
        self.synchronize()
        if self.backend == "cuda":
            from ..backends import cuda

            check = getattr(cuda, "synchronize", None)
            if check is not None:
                check()

    def free_bytes(self) -> int:
        if self.torch is not None:
            return int(self.torch.cuda.mem_get_info()[0])
        return int(self.cupy.cuda.runtime.memGetInfo()[0])

    def release(self) -> None:
        """Returns cached device memory (between sizes)."""
        if self.torch is not None:
            self.torch.cuda.empty_cache()
        else:
            self.cupy.get_default_memory_pool().free_all_blocks()

    def name(self) -> str:
        """The device's name, e.g. ``NVIDIA H100 80GB HBM3``."""
        if self.torch is not None:
            return str(self.torch.cuda.get_device_name())
        props = self.cupy.cuda.runtime.getDeviceProperties(self.cupy.cuda.Device().id)
        return str(props["name"].decode())

    def peak_bandwidth(self) -> float | None:
        """HBM peak in bytes/s from the memory clock and bus width (CuPy's device properties), else None."""
        if self.cupy is None:
            return None
        props = self.cupy.cuda.runtime.getDeviceProperties(self.cupy.cuda.Device().id)
        clock_khz, bus_bits = props.get("memoryClockRate", 0), props.get("memoryBusWidth", 0)
        return 2.0 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else None

    def event_seconds(self, fn: Callable[[], object], calls: int, warmup: int = 2) -> float:
        """Mean device time of ``fn`` over ``calls`` back-to-back calls between two CUDA events on the
        current stream (the calls run on it: the CUDA backend uses the framework's current stream)."""
        for _ in range(warmup):
            fn()
        if self.torch is not None:
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3 / calls
        c_start, c_end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        c_start.record()
        for _ in range(calls):
            fn()
        c_end.record()
        c_end.synchronize()
        return float(self.cupy.cuda.get_elapsed_time(c_start, c_end)) / 1e3 / calls

    def torch_module(self, module: Any) -> Any:
        """A copy of the PyTorch ``module`` on this device, in eval mode (the original stays where it is)."""
        if self.torch is None:
            raise RuntimeError("PyTorch with CUDA is not available")
        return copy.deepcopy(module).to("cuda").eval()


def open_device() -> Device:
    """The GPU through PyTorch (when it has CUDA), else CuPy; :class:`~toporoute.benchmark.cases.Unsupported`
    saying why when neither can reach a device."""
    from .cases import Unsupported

    torch: Any = None
    cupy: Any = None
    why = []
    try:
        import torch as _torch

        if _torch.cuda.is_available():
            torch = _torch
        else:
            why.append(f"PyTorch {_torch.__version__} has no CUDA device")
    except ImportError:
        why.append("PyTorch is not installed")
    if torch is None:
        try:
            import cupy as _cupy

            _cupy.cuda.runtime.getDeviceCount()
            cupy = _cupy
        except ImportError:
            why.append("CuPy is not installed")
        except Exception as exc:  # noqa: BLE001 - CuPy without a usable device or driver
            why.append(f"CuPy has no usable device ({exc})")
    if torch is None and cupy is None:
        raise Unsupported("device arrays need PyTorch with CUDA or CuPy: " + "; ".join(why))
    return Device(torch, cupy)


def route_bytes(B: int, N: int, D: int, k_in: int) -> tuple[int, int]:
    """(bytes ``route`` reads, bytes it writes) for ``B`` episodes: q and k in, scores (float32), adjacency
    (bool), inbox (int32, width ``k_in`` or N - 1 uncapped) and in_degree (int32) out."""
    K = k_in if k_in > 0 else N - 1
    return 2 * B * N * D * 4, B * N * (N * 4 + N + K * 4 + 4)


def torch_route(q: Any, k: Any, tau: float, k_in: int) -> tuple[Any, Any, Any, Any]:
    """``route`` written in PyTorch the way a careful user would (the GPU benchmark's alternative):
    ``(scores, adjacency, inbox, in_degree)`` for ``(B, N, D)`` float32 tensors on any device.

    Norms and one batched matrix product over the raw inputs (no normalised copies of q and k, which at
    B = 1M would not fit next to the inputs), threshold, no self-edges, then ``topk`` over the providers of
    each recipient. Matches :func:`toporoute.backends.reference.route` on inputs without exact score ties
    (``topk`` does not promise the lower index first) and without zero rows."""
    import torch

    N = q.shape[1]
    K = k_in if k_in > 0 else N - 1
    denom = torch.linalg.vector_norm(k, dim=-1)[:, :, None] * torch.linalg.vector_norm(q, dim=-1)[:, None, :]
    scores = (torch.bmm(k, q.transpose(1, 2)) / denom).clamp_(-1.0, 1.0)  # [b, j, i]
    cand = scores > tau
    cand &= ~torch.eye(N, dtype=torch.bool, device=q.device)
    ranked = scores.masked_fill(~cand, float("-inf"))
    best, who = ranked.topk(min(K, N), dim=1)  # [b, rank, i]: recipient i's best providers
    kept = best > float("-inf")
    adjacency = torch.zeros_like(cand).scatter_(1, who, kept)
    inbox = torch.where(kept, who, -1).to(torch.int32).transpose(1, 2)
    if K > N:
        inbox = torch.nn.functional.pad(inbox, (0, K - N), value=-1)
    in_degree = kept.sum(dim=1, dtype=torch.int32)
    return scores, adjacency, inbox, in_degree
