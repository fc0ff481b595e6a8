"""The CUDA backend's call plumbing that runs without a GPU (backends/_cuda_base.py): which arrays take the
device-array path, the placement errors, and a device-array call's shape against a stand-in core entry (PyTorch
CPU tensors stand in for device tensors; the capsules are real DLPack capsules)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toporoute import errors
from toporoute.backends import _cuda_base as base

torch = pytest.importorskip("torch")


def test_numpy_arrays_take_the_host_path() -> None:
    def entry(*args: Any) -> Any:
        raise AssertionError("the device entry must not run for numpy inputs")

    q = np.zeros((1, 2, 3), np.float32)
    assert base.device_call(("q", "k", "active"), (q, q, None), entry, 0.3, 3) is None


def test_placement_errors_name_the_argument() -> None:
    q = np.zeros((1, 2, 3), np.float32)
    with pytest.raises(errors.InvalidArgumentError, match="on the CPU") as e:
        base.device_call(("q", "k"), (torch.zeros(1, 2, 3), q), lambda *a: a)
    assert e.value.arg == "q"
    with pytest.raises(errors.InvalidArgumentError, match="list") as e:
        base.placement({"q": q, "k": [1.0]})
    assert e.value.arg == "k"
    with pytest.raises(errors.InvalidArgumentError, match="no array argument"):
        base.placement({"q": None})


def test_cpu_tensors_are_not_device_arrays() -> None:
    assert base._fast_framework((torch.zeros(2), None)) is None


def test_device_call_exports_once_and_wraps_the_core_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in for a CUDA device: the torch adapter over CPU tensors, the raw stream a fixed number
    fw = base._Torch.__new__(base._Torch)
    base.Framework.__init__(fw, 0)
    fw.torch, fw.dev, fw._raw_stream = torch, torch.device("cpu"), lambda device: 7
    fw._to, fw._from = torch._C._to_dlpack, torch._C._from_dlpack
    monkeypatch.setattr(base, "_fast_framework", lambda arrays: fw)
    seen: dict[str, Any] = {}
    outputs = (torch.arange(4.0).reshape(1, 2, 2), torch.ones(1, 2, dtype=torch.int32))

    def entry(q: Any, k: Any, active: Any, out: Any, tau: float, k_in: int, stream: int) -> Any:
        seen.update(q=torch._C._from_dlpack(q), active=active, out=out, tau=tau, k_in=k_in, stream=stream)
        return tuple(torch._C._to_dlpack(x) for x in outputs)

    q = torch.randn(1, 2, 3, requires_grad=True)  # exported without its autograd graph
    got = base.device_call(("q", "k", "active"), (q, q.detach(), None), entry, 0.25, 2)
    assert seen["stream"] == 7 and seen["active"] is None and seen["out"] is None
    assert (seen["tau"], seen["k_in"]) == (0.25, 2)
    assert torch.equal(seen["q"], q.detach())
    assert got is not None and len(got) == 2
    for want, have in zip(outputs, got):
        assert isinstance(have, torch.Tensor) and torch.equal(want, have)
