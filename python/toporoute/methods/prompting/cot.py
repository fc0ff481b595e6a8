"""``cot``: one chain-of-thought call per task (Wei et al.): reasoning step by step, then the answer (code in one
fenced block, math in ``\\boxed{}``, a choice as ``Answer: X``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...tasks import Task
from ..episode import Clock, Emit, EpisodeOutput, SamplingSettings, one_reply_round
from ._common import Baseline, answer_of, cot_request, kind_of, message_of

if TYPE_CHECKING:
    from ...runtime import EpisodeContext

__all__ = ["AGENT", "ChainOfThought", "CotSettings"]

AGENT = "Assistant"


@dataclass(frozen=True)
class CotSettings(SamplingSettings):
    """Settings of ``cot``: the sampling of its one call (see
    :class:`~toporoute.methods.episode.SamplingSettings`; temperature 0.3 as ``single``)."""


class ChainOfThought(Baseline[CotSettings]):
    """One chain-of-thought call per task; code, math and choice tasks."""

    def __init__(self, settings: CotSettings | None = None) -> None:
        super().__init__("cot", settings or CotSettings())

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        kind_of(task)
        clock = Clock()
        rc = clock.round()
        result = await rc.generate_one(ctx, cot_request(self.settings, ctx.episode, task, 0, AGENT, AGENT))
        answer = answer_of(task, result)
        emit(
            one_reply_round(
                self.name,
                ctx.episode,
                task,
                0,
                "Reason step by step, then answer.",
                AGENT,
                result,
                message_of(task, result, answer),
                rc.timing(),
            )
        )
        return EpisodeOutput(answer, 1, False, clock.llm_s, 0.0)
