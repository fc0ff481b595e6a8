"""Baselines on the same harness as DyTopo (spec 8.19 and the paper's Table 2).

- ``single``: one LLM call, no agents (the paper's "LLM Output").
- ``parallel``: the method's workers answer once, independently, with no routing and no manager ("Single-turn
  Agent"); the answer comes from the domain's answer agent (Developer / Solver).
- ``random``: DyTopo's loop with a random graph each round holding as many edges as DyTopo's graph of the same
  episode and round (from a DyTopo run of the same tasks), fixed 5 rounds.
- ``chain``, ``star``, ``full``: the loop over a fixed topology, fixed 5 rounds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..llm.types import Request, Sampling, Tags
from ..tasks import Task, extract_code, extract_math_answer
from ._team import prompt_text
from .dytopo import Emit, EpisodeOutput, LoopConfig, WorkerLoop, _clip, _usage, domain_of, request_seed

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..runtime import EpisodeContext

__all__ = ["SingleCall", "baseline"]

BASELINE_ROUNDS = 5


class SingleCall:
    """One plain LLM call per task: code in a fenced block, or a ``\\boxed{}`` math answer."""

    def __init__(self, config: LoopConfig | None = None) -> None:
        self.config = config or LoopConfig()
        self.name = "single"

    def params(self) -> dict[str, Any]:
        c = self.config
        return {
            "method": self.name,
            "temperature": c.temperature,
            "top_p": c.top_p,
            "max_tokens": c.max_tokens,
            "seed": c.seed,
        }

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        c = self.config
        domain = domain_of(task)
        start = time.perf_counter()
        sampling = Sampling(
            max_tokens=c.max_tokens,
            temperature=c.temperature,
            top_p=c.top_p,
            seed=request_seed(c.seed, ctx.episode, 0, "Assistant"),
        )
        request = Request.chat(
            prompt_text(f"single_{domain}.txt").strip(),
            task.prompt.strip(),
            sampling=sampling,
            tags=Tags(round=0, agent="Assistant", role="Assistant"),
        )
        result = (await ctx.generate([request]))[0]
        llm_s = time.perf_counter() - start
        if domain == "code":
            answer = extract_code(result.text, task.entry_point) or ""
        else:
            answer = extract_math_answer(result.text) or ""
        emit(
            {
                "v": 1,
                "method": self.name,
                "episode": ctx.episode,
                "task": task.id,
                "round": 0,
                "goal": "Solve the task in one reply.",
                "agents": ["Assistant"],
                "roles": ["Assistant"],
                "descriptors": {"query": [""], "key": [""]},
                "scores": None,
                "edges": [],
                "order": ["Assistant"],
                "levels": [0],
                "removed": [],
                "is_dag": True,
                "inbox": {"Assistant": []},
                "messages": {
                    "Assistant": {
                        "public": _clip(result.text),
                        "private": "",
                        "answer": answer,
                        "parse_error": None if result.ok else result.error.message,  # type: ignore[union-attr]
                    }
                },
                "usage": {"agents": {"Assistant": _usage(result)}, "edges": []},
                "manager": None,
                "stats": {"edges": 0, "density": 0.0, "reciprocity": 0.0, "jaccard_prev": None},
                "timing": {"round_s": round(llm_s, 4), "llm_s": round(llm_s, 4), "routing_s": 0.0},
            }
        )
        return EpisodeOutput(answer, 1, False, llm_s, 0.0)


def baseline(
    name: str,
    config: LoopConfig | None = None,
    *,
    edge_counts: Mapping[str, Sequence[int]] | None = None,
    encoder: Encoder | None = None,
) -> WorkerLoop | SingleCall:
    """The baseline ``name`` over ``config`` (rounds, halting and topology set as the baseline defines them,
    unless ``config`` was built with other rounds explicitly: pass ``max_rounds`` to override)."""
    config = config or LoopConfig()
    if name == "single":
        return SingleCall(config)
    if name == "parallel":
        cfg = replace(config, topology="none", max_rounds=1, halting=False, manager=False)
        return WorkerLoop(cfg, name="parallel")
    cfg = replace(config, topology=name, halting=False)
    return WorkerLoop(cfg, name=name, edge_counts=edge_counts, encoder=encoder)
