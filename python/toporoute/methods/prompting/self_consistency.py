"""``self-consistency`` (Wang et al.): N chain-of-thought samples with distinct request seeds, sent in one
generate call so that they batch, then one answer chosen among them (:func:`~toporoute.methods.selection.
select_answer`): the majority vote over normalised answers for math and choice, the test-based pick on the
prompt's visible examples for code. The trace records every sample's answer, cluster, votes and (code) pass
count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._checks import int_at_least
from ...tasks import Task
from ...trace.schema import Usage
from ..episode import Clock, Emit, EpisodeOutput
from ..options import option
from ._common import Voting, VotingSettings, answer_of, cot_request, kind_of, message_of

if TYPE_CHECKING:
    from ...runtime import EpisodeContext
    from ..selection import TestRunner

__all__ = ["SelfConsistency", "SelfConsistencySettings", "sample_name"]


def sample_name(i: int) -> str:
    """The trace's agent name of sample ``i`` (0-based): ``Sample1``, ``Sample2``, ..."""
    return f"Sample{i + 1}"


@dataclass(frozen=True)
class SelfConsistencySettings(VotingSettings):
    """Settings of ``self-consistency``: ``samples``, N, the chain-of-thought samples per task (>= 1; the
    paper's comparison: 5). The sampling and the sandbox limits: see
    :class:`~toporoute.methods.prompting._common.VotingSettings`."""

    samples: int = option(5, unset=True, help="N chain-of-thought samples per task (default 5)")

    def __post_init__(self) -> None:
        super().__post_init__()
        int_at_least("samples", self.samples, 1)


class SelfConsistency(Voting[SelfConsistencySettings]):
    """N chain-of-thought samples in one batch, then the vote (math, choice) or the test-based pick (code);
    ``run_tests`` as :class:`~toporoute.methods.prompting._common.Voting` takes it."""

    def __init__(
        self, settings: SelfConsistencySettings | None = None, *, run_tests: TestRunner | None = None
    ) -> None:
        super().__init__("self-consistency", settings or SelfConsistencySettings(), run_tests)

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        kind_of(task)
        s = self.settings
        clock = Clock()
        rc = clock.round()
        names = [sample_name(i) for i in range(s.samples)]
        requests = [cot_request(s, ctx.episode, task, 0, name, "Sampler") for name in names]
        results = await rc.generate(ctx, requests)  # one call: the N samples batch
        answers = [answer_of(task, r) for r in results]
        pick = await self.pick(task, answers)
        emit(
            self.record(
                ctx.episode,
                task,
                0,
                f"{s.samples} independent chain-of-thought samples, then one answer chosen by {pick.rule}.",
                (names, ["Sampler"] * len(names), [], None),
                {n: message_of(task, r, a) for n, r, a in zip(names, results, answers)},
                Usage.of(zip(names, results)),
                rc.timing(),
                {"selection": pick.to_json()},
            )
        )
        chosen = names[pick.index] if pick.index >= 0 else None
        return EpisodeOutput(
            pick.answer,
            1,
            False,
            clock.llm_s,
            0.0,
            extra={
                "self_consistency": {"rule": pick.rule, "chosen": chosen, "votes": max(pick.votes, default=0)}
            },
        )
