"""A run's episodes on Ray actors, the run directory kept by the driver exactly as a local run keeps it.

:class:`RayCluster` connects to a cluster (``address``) or starts a local one, and starts ``actors`` actors
(:class:`EpisodeActor`), each with its own engine: in-process vLLM on the GPU Ray gives it, the openai engine
(a server of its node, or any), a replay. :meth:`RayCluster.run_method` then runs one method over the tasks:

- the driver (this process) holds the folder's lock and writes run.json first, as a local run does
  (:func:`~toporoute.methods.harness.start_run`: same checks, so a folder of other settings is refused);
- the episodes not finished yet go out one at a time to the actor with the fewest in flight, at most
  ``concurrency`` per actor; an actor runs its episodes through the same runtime as a local run (its LLM calls
  batched round by round across them, scored in its sandbox) into a scratch folder of its own;
- each finished episode comes back as its record file and trace, which the driver writes into the run folder
  atomically, the trace first: a record on disk means the episode is done, and a rerun skips it wherever it ran;
- summary.json is written last (:func:`~toporoute.methods.harness.finish_run`), from the files.

So an interrupted run (Ctrl-C, a killed driver, a lost cluster) loses only the episodes in flight. An actor that
dies takes its episodes in flight with it: each goes to another actor once more, and the run fails only when no
actor is left. A method that runs its tasks in order (``sequential``: HiVA's stream mode) runs on one actor, one
episode at a time.

The actors must import toporoute, the method and the engine: on a cluster every node needs the same install.
Paths in the method's settings (a Q-Mix checkpoint, an orchestrator) and a replayed transcript are read by the
actors, so on several machines they must sit on a shared file system.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._atomic import write_bytes_atomic
from .._runlock import RunLock
from ..errors import ToporouteError
from ..llm.base import Engine
from ..runtime import BatchStats, EpisodeOutcome, RunSummary, Runtime
from ..runtime.runner import finished_record, progress_bar
from ..tasks import Task

__all__ = ["EpisodeActor", "MethodJob", "RayCluster", "RayOptions", "run_method_on_ray"]

log = logging.getLogger("toporoute")

EngineFactory = Callable[[], Awaitable[Engine]]
"""Opens an engine, in the actor's process (a picklable callable: a module function or a partial of one)."""

_ATTEMPTS = 2  # an episode whose actor died goes to another actor once more


@dataclass(frozen=True)
class RayOptions:
    """How a run uses Ray.

    Parameters
    ----------
    address : str, optional
        The cluster (``ray://host:10001``, ``host:6379`` or ``auto``); None starts a local cluster for the run and
        stops it after.
    actors : int, optional
        Actors, each with its own engine. Default: one per GPU of the cluster when the actors take GPUs, else 2.
    gpus_per_actor : float, optional
        GPUs Ray reserves per actor. Default: 1 when the engine runs in the actor (vLLM) and the cluster has GPUs,
        else 0.
    cpus_per_actor : float
        CPUs Ray reserves per actor (default 1).
    concurrency : int
        Episodes in flight per actor (their LLM calls are batched together on its engine).
    max_wait : float
        The actors' batching wait (:class:`~toporoute.runtime.RoundBatcher`).
    verbose : bool
        The actors' log lines on the driver's stderr (default: only errors come back, with the episode).
    """

    address: str | None = None
    actors: int | None = None
    gpus_per_actor: float | None = None
    cpus_per_actor: float = 1.0
    concurrency: int = 16
    max_wait: float = 0.25
    verbose: bool = False

    def __post_init__(self) -> None:
        from .._checks import at_least

        if self.actors is not None:
            at_least("actors", self.actors, 1)
        if self.gpus_per_actor is not None:
            at_least("gpus_per_actor", self.gpus_per_actor, 0)
        at_least("cpus_per_actor", self.cpus_per_actor, 0)
        at_least("concurrency", self.concurrency, 1)
        at_least("max_wait", self.max_wait, 0)


@dataclass(frozen=True)
class MethodJob:
    """What an actor needs to run one method's episodes: the method's factory and the scoring limits, and
    optionally a second engine for some kinds of call (``meta_engine``, ``meta_kinds``:
    :class:`~toporoute.llm.routed.RoutedEngine`)."""

    make_method: Callable[[], Any]
    eval_timeout_s: float = 10.0
    eval_memory_mb: int = 1024
    eval_workers: int = 2
    meta_engine: EngineFactory | None = None
    meta_kinds: tuple[str, ...] = ()


class EpisodeActor:
    """One Ray actor: its own engine, one method at a time, many episodes at once (an async actor: Ray runs its
    calls concurrently on one event loop, so the episodes' LLM calls meet in one batcher)."""

    def __init__(self, make_engine: EngineFactory, max_wait: float) -> None:
        self._make_engine = make_engine
        self._max_wait = max_wait
        self._engine: Engine | None = None
        self._meta: Engine | None = None
        self._job: _ActorJob | None = None

    async def open(self) -> dict[str, Any]:
        """Opens the engine; returns where the actor runs (host, pid) and the engine's name."""
        import socket

        if self._engine is None:
            self._engine = await self._make_engine()
        return {"host": socket.gethostname(), "pid": os.getpid(), "engine": getattr(self._engine, "name", "")}

    async def begin(self, job: MethodJob) -> None:
        """Builds the method of ``job`` (and its second engine) for the episodes that follow."""
        from ..llm.routed import RoutedEngine

        await self.end()
        engine = self._engine
        if engine is None:
            raise ToporouteError("EpisodeActor.begin before open()")
        method = job.make_method()
        if job.meta_engine is not None:
            self._meta = await job.meta_engine()
            engine = RoutedEngine(engine, self._meta, job.meta_kinds)
        scratch = Path(tempfile.mkdtemp(prefix="toporoute-actor-"))
        runtime = Runtime(
            engine,
            max_wait=self._max_wait,
            out_dir=scratch,
            progress=False,
            engine_failures=getattr(method, "engine_failures", "any"),
        )
        self._job = _ActorJob(job, method, runtime, runtime.batcher(), scratch)

    async def run(self, episode: str, task: Task) -> tuple[EpisodeOutcome, bytes, bytes | None]:
        """Runs one episode of the current method; returns its outcome, record file and trace (None: the method
        wrote no round)."""
        from ..methods.harness import episode_fn

        job = self._job
        if job is None:
            raise ToporouteError("EpisodeActor.run before begin()")
        fn = episode_fn(
            job.method,
            task,
            job.scratch,
            job.eval_gate,
            timeout_s=job.spec.eval_timeout_s,
            memory_mb=job.spec.eval_memory_mb,
        )
        outcome = await job.runtime.run_episode(episode, fn, job.batcher)
        record = job.scratch / "episodes" / f"{episode}.json"
        trace = job.scratch / "traces" / f"{episode}.jsonl"
        data = record.read_bytes()
        lines = trace.read_bytes() if trace.is_file() else None
        record.unlink()
        trace.unlink(missing_ok=True)
        return outcome, data, lines

    async def end(self) -> list[BatchStats]:
        """Ends the current method (its second engine closed, its scratch folder removed); returns its engine
        calls."""
        job, self._job = self._job, None
        meta, self._meta = self._meta, None
        if meta is not None:
            await meta.aclose()
        if job is None:
            return []
        shutil.rmtree(job.scratch, ignore_errors=True)
        return list(job.batcher.flushes)

    async def close(self) -> None:
        await self.end()
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.aclose()


class _ActorJob:
    """An actor's state for one method."""

    def __init__(self, spec: MethodJob, method: Any, runtime: Runtime, batcher: Any, scratch: Path) -> None:
        self.spec, self.method, self.runtime, self.batcher, self.scratch = (
            spec,
            method,
            runtime,
            batcher,
            scratch,
        )
        self.eval_gate = asyncio.Semaphore(max(1, spec.eval_workers))


class _Slot:
    """The driver's view of one actor."""

    def __init__(self, index: int, handle: Any, where: dict[str, Any]) -> None:
        self.index, self.handle, self.where = index, handle, where
        self.in_flight = 0
        self.alive = True


class RayCluster:
    """Actors on a Ray cluster, each with an engine from ``make_engine``, for one command's methods.

    ``gpu_engine``: the engine runs in the actor on a GPU when there is one (in-process vLLM), so actors take a
    GPU each by default. Use as ``async with RayCluster(...) as cluster: await cluster.run_method(...)``.
    """

    def __init__(self, options: RayOptions, make_engine: EngineFactory, *, gpu_engine: bool = False) -> None:
        self.options = options
        self.make_engine = make_engine
        self.gpu_engine = gpu_engine
        self.slots: list[_Slot] = []
        self._started_ray = False
        self._per_gpu = 0.0

    async def __aenter__(self) -> RayCluster:  # noqa: PYI034 - Self needs Python 3.11
        ray = _import_ray()
        opts = self.options
        if not ray.is_initialized():
            self._started_ray = True
            ray.init(**_init_kwargs(opts))
        resources = ray.cluster_resources()
        gpus = float(resources.get("GPU", 0.0))
        per_gpu = opts.gpus_per_actor
        if per_gpu is None:
            per_gpu = 1.0 if self.gpu_engine and gpus >= 1 else 0.0
        self._per_gpu = per_gpu
        actors = opts.actors or (max(1, int(gpus // per_gpu)) if per_gpu > 0 else 2)
        cls = ray.remote(EpisodeActor).options(
            num_cpus=opts.cpus_per_actor,
            num_gpus=per_gpu,
            max_concurrency=max(opts.concurrency * 4, 64),
            max_restarts=0,
        )
        handles = [cls.remote(self.make_engine, opts.max_wait) for _ in range(actors)]
        try:
            where = await asyncio.gather(*(h.open.remote() for h in handles))
        except BaseException:
            await self._stop(handles)
            raise
        self.slots = [_Slot(i, h, w) for i, (h, w) in enumerate(zip(handles, where))]
        hosts = sorted({w["host"] for w in where})
        print(
            f"ray: {actors} actor(s) on {len(hosts)} node(s) ({', '.join(hosts)}), "
            f"{per_gpu:g} GPU and {opts.cpus_per_actor:g} CPU each, up to {opts.concurrency} episodes each",
            file=sys.stderr,
            flush=True,
        )
        return self

    def describe(self) -> dict[str, Any]:
        """What run.json records of the cluster: its address, the actors and their hosts, each actor's
        resources and episodes in flight."""
        opts = self.options
        return {
            "address": opts.address or "local",
            "actors": len(self.slots),
            "hosts": sorted({str(s.where.get("host")) for s in self.slots}),
            "gpus_per_actor": self._per_gpu,
            "cpus_per_actor": opts.cpus_per_actor,
            "concurrency_per_actor": opts.concurrency,
        }

    async def __aexit__(self, *exc: object) -> None:
        await self._stop([s.handle for s in self.slots if s.alive])
        self.slots = []

    async def _stop(self, handles: Sequence[Any]) -> None:
        ray = _import_ray()
        try:
            await asyncio.wait_for(
                asyncio.gather(*(h.close.remote() for h in handles), return_exceptions=True), 60
            )
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
        for h in handles:
            ray.kill(h)
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    async def run_method(
        self,
        method: Any,
        job: MethodJob,
        tasks: Sequence[Task],
        out_dir: str | Path,
        *,
        model: str | None,
        engine: str,
        info: dict[str, Any] | None = None,
        progress: bool = True,
    ) -> dict[str, Any]:
        """Runs ``method`` (the driver's copy: its name, settings, task choice; the actors build theirs with
        ``job.make_method``) on ``tasks`` into the method folder ``out_dir``; returns its summary, as
        :func:`~toporoute.methods.harness.run_method` does."""
        from ..methods.harness import finish_run, start_run

        out = Path(out_dir)
        with RunLock(out):
            tasks = start_run(method, tasks, out, model, engine, info)
            sequential = bool(getattr(method, "sequential", False))
            slots = [s for s in self.slots if s.alive][: 1 if sequential else None]
            if not slots:
                raise ToporouteError("no Ray actor is left")
            await asyncio.gather(*(s.handle.begin.remote(job) for s in slots))
            start = time.perf_counter()
            outcomes: dict[str, EpisodeOutcome] = {}
            todo: list[tuple[str, Task]] = []
            for task in tasks:
                saved = finished_record(out, task.episode_id)
                if saved is not None:
                    outcomes[task.episode_id] = EpisodeOutcome(
                        task.episode_id, "skipped", saved.get("record"), saved.get("usage"), 0.0
                    )
                else:
                    todo.append((task.episode_id, task))
            per_actor = 1 if sequential else self.options.concurrency
            bar = _Bar(len(tasks), len(outcomes), progress)
            try:
                await _dispatch(todo, slots, per_actor, out, outcomes, bar)
            finally:
                bar.close()
                ends = await asyncio.gather(
                    *(s.handle.end.remote() for s in slots if s.alive), return_exceptions=True
                )
            batches = [b for e in ends if isinstance(e, list) for b in e]
            summary = RunSummary(
                [outcomes[t.episode_id] for t in tasks], batches, time.perf_counter() - start
            )
            return finish_run(out, summary)


async def _dispatch(
    todo: list[tuple[str, Task]],
    slots: list[_Slot],
    per_actor: int,
    out: Path,
    outcomes: dict[str, EpisodeOutcome],
    bar: _Bar,
) -> None:
    """Sends the episodes of ``todo`` in order, each to the live actor with the fewest in flight (at most
    ``per_actor`` each), and writes each one's files as it comes back."""
    ray = _import_ray()
    queue = list(reversed(todo))  # popped from the end: in task order
    attempts: dict[str, int] = {}
    running: dict[asyncio.Future[Any], tuple[_Slot, str, Task]] = {}
    try:
        while queue or running:
            while queue:
                live = [s for s in slots if s.alive and s.in_flight < per_actor]
                if not live:
                    break
                slot = min(live, key=lambda s: (s.in_flight, s.index))
                episode, task = queue.pop()
                attempts[episode] = attempts.get(episode, 0) + 1
                sent = asyncio.ensure_future(_result(slot.handle.run.remote(episode, task)))
                running[sent] = (slot, episode, task)
                slot.in_flight += 1
            if not running:
                raise ToporouteError(
                    "every Ray actor has died; the finished episodes are saved: rerun the same command to go on"
                )
            bar.show(slots)
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                slot, episode, task = running.pop(future)
                slot.in_flight -= 1
                try:
                    outcome, record, trace = future.result()
                except ray.exceptions.RayActorError as exc:
                    slot.alive = False
                    log.warning("ray: actor %d (%s) died: %s", slot.index, slot.where.get("host"), exc)
                    if attempts[episode] < _ATTEMPTS:
                        queue.append((episode, task))
                        continue
                    raise ToporouteError(
                        f"episode {episode} lost its actor {_ATTEMPTS} times; the finished episodes are saved: "
                        "rerun the same command to go on"
                    ) from exc
                if trace is not None:  # first: a record on disk means the episode is done
                    write_bytes_atomic(out / "traces" / f"{episode}.jsonl", trace)
                write_bytes_atomic(out / "episodes" / f"{episode}.json", record)
                outcomes[episode] = outcome
                bar.done(outcome)
            bar.show(slots)
    finally:
        for future in running:
            future.cancel()
        for slot, *_ in running.values():
            slot.in_flight = 0


async def _result(ref: Any) -> Any:
    return await ref


class _Bar:
    """The driver's progress bar: finished episodes, and the actors' episodes in flight and LLM calls."""

    def __init__(self, total: int, skipped: int, enabled: bool) -> None:
        self.bar = progress_bar(total, enabled)
        self.bar.update(skipped)
        self.calls = 0
        self.errors = 0

    def show(self, slots: Sequence[_Slot]) -> None:
        live = [s for s in slots if s.alive]
        text = (
            f"{len(live)} actor{'s' if len(live) != 1 else ''} · {sum(s.in_flight for s in live)} in flight"
        )
        text += f" · {self.calls} calls" + (f" · {self.errors} errors" if self.errors else "")
        self.bar.set_postfix_str(text)

    def done(self, outcome: EpisodeOutcome) -> None:
        self.calls += int((outcome.usage or {}).get("calls", 0))
        self.errors += outcome.status == "error"
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


async def run_method_on_ray(
    method: Any,
    job: MethodJob,
    make_engine: EngineFactory,
    tasks: Sequence[Task],
    out_dir: str | Path,
    *,
    options: RayOptions | None = None,
    model: str | None = None,
    engine: str = "engine",
    info: dict[str, Any] | None = None,
    gpu_engine: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """One method on a cluster started for it: :class:`RayCluster` and :meth:`RayCluster.run_method` in one
    call (a command that runs several methods keeps one cluster for all)."""
    async with RayCluster(options or RayOptions(), make_engine, gpu_engine=gpu_engine) as cluster:
        return await cluster.run_method(
            method, job, tasks, out_dir, model=model, engine=engine, info=info, progress=progress
        )


def _init_kwargs(opts: RayOptions) -> dict[str, Any]:
    """``ray.init``'s arguments: the address, or a local cluster sized for the actors whose workers import what
    this process imports (its ``sys.path``)."""
    kwargs: dict[str, Any] = {
        "log_to_driver": opts.verbose,
        "logging_level": logging.INFO if opts.verbose else logging.WARNING,
    }
    if opts.address is not None:
        return {**kwargs, "address": opts.address}
    actors = opts.actors or 2
    path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
    return {
        **kwargs,
        "num_cpus": max(os.cpu_count() or 1, int(actors * opts.cpus_per_actor + 0.999)),
        "include_dashboard": False,
        "runtime_env": {"env_vars": {"PYTHONPATH": path}},
    }


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the message is the point
        raise ToporouteError(
            "--ray needs Ray: pip install 'toporoute[ray]' (on every node of the cluster)", "ray"
        ) from exc
    return ray
