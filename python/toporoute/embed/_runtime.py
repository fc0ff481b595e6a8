"""Which inference runtime runs the encoder's graph, and the OpenVINO one.

``auto`` (the default, or ``$TOPOROUTE_ENCODER_RUNTIME``) takes OpenVINO on an Intel CPU when the ``openvino``
package is installed, else ONNX Runtime. On a 2-vCPU Xeon (AVX-512, AMX), OpenVINO with its throughput hint
(two streams of one thread, buckets running side by side) encoded 512 mixed-length descriptors 1.24x and 1.41x
faster than ONNX Runtime with two intra-op threads in two runs (rounds with other jobs on the cores left out),
1.40x and 1.53x sentence-transformers, cosine agreement 8.9e-7 (bench/test_bench_embed.py times it). OpenVINO
runs the standard-op graph: on ONNX Runtime's fused contrib ops it was 1.5x slower.
"""

from __future__ import annotations

import importlib.util
import os
import queue
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailableError, InvalidArgumentError

ENV = "TOPOROUTE_ENCODER_RUNTIME"
RUNTIMES = ("onnxruntime", "openvino")


def _intel_cpu() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return "GenuineIntel" in line
    except OSError:
        pass
    import platform

    return "intel" in platform.processor().lower()


def choose(runtime: str | None, device: str) -> str:
    """The runtime to use: ``runtime``, else ``$TOPOROUTE_ENCODER_RUNTIME``, else ``auto`` (see the module
    docstring). Raises InvalidArgumentError for an unknown name or OpenVINO on a GPU, BackendUnavailableError
    when OpenVINO is asked for and not installed."""
    arg = "runtime" if runtime is not None else ENV
    name = runtime if runtime is not None else os.environ.get(ENV) or "auto"
    if name not in ("auto", *RUNTIMES):
        raise InvalidArgumentError(
            f"{arg} must be 'auto', 'onnxruntime' or 'openvino'; got {name!r}", "runtime"
        )
    have_openvino = importlib.util.find_spec("openvino") is not None
    if name == "auto":
        return "openvino" if device == "cpu" and have_openvino and _intel_cpu() else "onnxruntime"
    if name == "openvino":
        if device != "cpu":
            raise InvalidArgumentError(
                f"{arg}='openvino' runs on device='cpu' only; got device={device!r}", "runtime"
            )
        if not have_openvino:
            raise BackendUnavailableError(
                f"{arg}='openvino' needs the openvino package: pip install 'toporoute[openvino]'", "runtime"
            )
    return name


class OpenVinoRunner:
    """An fp32 graph compiled by OpenVINO for the CPU with the throughput hint; :meth:`run` is thread-safe and
    ``streams`` calls run in parallel (one infer request per stream); ``dim`` is the hidden size."""

    def __init__(self, onnx_path: Path, threads: int | None) -> None:
        import openvino as ov

        core = ov.Core()
        # f32 explicitly: on CPUs with AMX or avx512_bf16 OpenVINO would otherwise run in bf16, whose cosine
        # similarities are far outside the 1e-5 the encoder promises.
        config: dict[str, object] = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT"}
        if threads is not None:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        self._compiled = core.compile_model(core.read_model(str(onnx_path)), "CPU", config)
        self.streams = max(1, int(self._compiled.get_property("NUM_STREAMS")))
        self.version = ov.__version__
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(self.streams):
            self._requests.put(self._compiled.create_infer_request())
        self._output = self._compiled.output("last_hidden_state")
        self.dim = int(self._output.get_partial_shape()[-1].get_length())

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``last_hidden_state (b, L, D) float32`` for ``input_ids`` and ``attention_mask (b, L) int64``."""
        request = self._requests.get()
        try:
            request.infer({"input_ids": ids, "attention_mask": mask}, share_inputs=True)
            # A copy: the request's output buffer is overwritten by its next call.
            return request.get_tensor(self._output).data.copy()
        finally:
            self._requests.put(request)
