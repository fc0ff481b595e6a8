"""Baselines on the same harness as DyTopo (spec 8.19 and the paper's Table 2).

- ``single``: one LLM call, no agents (the paper's "LLM Output").
- ``parallel``: the method's workers answer once, independently, with no routing and no manager ("Single-turn
  Agent"); the answer comes from the domain's answer agent (Developer / Solver).
- ``random``: DyTopo's loop with a random graph each round holding as many edges as DyTopo's graph of the same
  episode and round (from a DyTopo run of the same tasks), fixed 5 rounds.
- ``chain``, ``star``, ``full``: the loop over a fixed topology, fixed 5 rounds.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..llm.types import Request, Tags
from ..tasks import Task
from ..trace.schema import Message
from .dytopo import LoopConfig, WorkerLoop
from .dytopo.plugin import LOOP_OPTIONS
from .episode import Clock, Emit, EpisodeOutput, SamplingSettings, answer_from, domain_of, one_reply_round
from .options import Builder, MethodSpec, settings_of
from .prompt_files import read_text

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..runtime import EpisodeContext
    from .episode import Method

__all__ = ["BASELINE_ROUNDS", "SPECS", "SingleCall", "baseline", "dytopo_edge_counts"]

log = logging.getLogger("toporoute")

BASELINE_ROUNDS = 5
_AGENT = "Assistant"


class SingleCall:
    """One plain LLM call per task: code in a fenced block, or a ``\\boxed{}`` math answer."""

    def __init__(self, config: SamplingSettings | None = None) -> None:
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
        domain = domain_of(task)
        clock = Clock()
        rc = clock.round()
        request = Request.chat(
            read_text("single", f"{domain}.txt").strip(),
            task.prompt.strip(),
            sampling=self.config.sampling(ctx.episode, 0, _AGENT),
            tags=Tags(round=0, agent=_AGENT, role=_AGENT),
        )
        result = await rc.generate_one(ctx, request)
        answer = answer_from(task, result.text)
        error = None if result.error is None else result.error.message
        emit(
            one_reply_round(
                self.name,
                ctx.episode,
                task,
                0,
                "Solve the task in one reply.",
                _AGENT,
                result,
                Message.of(result.text, "", answer, error),
                rc.timing(),
            )
        )
        return EpisodeOutput(answer, 1, False, clock.llm_s, 0.0)


def baseline(
    name: str,
    config: LoopConfig | None = None,
    *,
    edge_counts: Mapping[str, Sequence[int]] | None = None,
    encoder: Encoder | None = None,
) -> WorkerLoop | SingleCall:
    """The baseline ``name`` over ``config`` (rounds, halting and topology set as the baseline defines them,
    unless ``config`` was built with other rounds explicitly: pass ``max_rounds`` to override).

    The baselines match no descriptors, so DyTopo's matching options are off in them (``manager_sink``,
    ``role_prefix``; their recorded params say so): one command can run DyTopo with them and its baselines.
    """
    config = config or LoopConfig()
    if name == "single":
        return SingleCall(config)
    config = replace(config, manager_sink=False, role_prefix=False)
    if name == "parallel":
        cfg = replace(config, topology="none", max_rounds=1, halting=False, manager=False)
        return WorkerLoop(cfg, name="parallel")
    cfg = replace(config, topology=name, halting=False)
    return WorkerLoop(cfg, name=name, edge_counts=edge_counts, encoder=encoder)


def dytopo_edge_counts(method_dir: str | Path) -> dict[str, list[int]]:
    """Per-episode, per-round edge counts between workers of a DyTopo method folder (the random baseline's;
    edges into a manager matched as a sink node are not counted), empty when the folder holds no run."""
    from ..trace.reader import load_run

    if not (Path(method_dir) / "run.json").is_file():
        return {}
    traces = load_run(method_dir).methods[0].traces  # sorted by round; a torn last line is skipped
    return {
        ep: [sum(e.dst in r.messages for e in r.graph.edges) for r in rounds]
        for ep, rounds in traces.items()
        if rounds
    }


def _builder(name: str) -> Builder:
    def build(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
        edge_counts = settings.pop("edge_counts", None)
        if name in ("random", "chain", "star", "full"):  # single and parallel have one round
            settings["max_rounds"] = BASELINE_ROUNDS if rounds is None else rounds
        return baseline(
            name, settings_of(LoopConfig, settings, name), edge_counts=edge_counts, encoder=encoder
        )

    return build


def _random_edge_counts(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    """The random baseline's edge counts: DyTopo's in the same run folder (it runs after DyTopo)."""
    counts = dytopo_edge_counts(run_dir / "dytopo")
    if not counts:
        log.warning(
            "random: no DyTopo run in %s; drawing %d edges per round (run dytopo first to match its edge counts)",
            run_dir / "dytopo",
            LoopConfig.random_edges,
        )
    return {"edge_counts": counts}


SPECS = (
    MethodSpec("single", "baseline: one plain LLM call per task", _builder("single")),
    MethodSpec(
        "parallel",
        "baseline: DyTopo's workers answer once, independently",
        _builder("parallel"),
        LOOP_OPTIONS,
    ),
    MethodSpec(
        "random",
        "baseline: DyTopo's loop on random graphs with DyTopo's per-round edge counts (5 rounds)",
        _builder("random"),
        LOOP_OPTIONS.with_reader(_random_edge_counts),
        after=("dytopo",),
    ),
    MethodSpec("chain", "baseline: DyTopo's loop on a chain (5 rounds)", _builder("chain"), LOOP_OPTIONS),
    MethodSpec("star", "baseline: DyTopo's loop on a star (5 rounds)", _builder("star"), LOOP_OPTIONS),
    MethodSpec(
        "full", "baseline: DyTopo's loop on the complete graph (5 rounds)", _builder("full"), LOOP_OPTIONS
    ),
)
"""The baselines as ``toporoute run`` methods (DyTopo's option group; ``single`` takes none)."""
