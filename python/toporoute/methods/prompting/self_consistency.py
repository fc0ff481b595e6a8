"""``self-consistency`` (Wang et al.): N chain-of-thought samples with distinct request seeds, sent in one
generate call so that they batch, then one answer chosen among them (:func:`~toporoute.methods.selection.
select_answer`): the majority vote over normalised answers for math and choice, the test-based pick on the
prompt's visible examples for code. The trace records every sample's answer, cluster, votes and (code) pass
count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgumentError
from ...tasks import Task
from ...tasks.codetest import run_public_tests
from ...trace.schema import RoundRecord, Usage
from ..episode import Clock, Emit, EpisodeOutput, SamplingSettings
from ..selection import select_answer
from ._common import answer_of, cot_request, graph_block, kind_of, message_of, params_of

if TYPE_CHECKING:
    from ...runtime import EpisodeContext
    from ..selection import TestRunner

__all__ = ["SelfConsistency", "SelfConsistencySettings", "sample_name"]


def sample_name(i: int) -> str:
    """The trace's agent name of sample ``i`` (0-based): ``Sample1``, ``Sample2``, ..."""
    return f"Sample{i + 1}"


@dataclass(frozen=True)
class SelfConsistencySettings(SamplingSettings):
    """Settings of ``self-consistency``.

    Parameters
    ----------
    samples : int
        N, the chain-of-thought samples per task (>= 1; the paper's comparison: 5).
    temperature : float
        Sampling temperature of every sample (default 0.7: the samples must differ to vote).
    test_timeout_s, test_memory_mb : limits of one sandbox run on the visible examples (code).
    top_p, max_tokens, seed : see :class:`~toporoute.methods.episode.SamplingSettings`.
    """

    temperature: float = 0.7
    samples: int = 5
    test_timeout_s: float = 5.0
    test_memory_mb: int = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1:
            raise InvalidArgumentError(f"samples must be an integer >= 1; got {self.samples!r}", "samples")
        if not self.test_timeout_s > 0:
            raise InvalidArgumentError(
                f"test_timeout_s must be > 0; got {self.test_timeout_s}", "test_timeout_s"
            )


class SelfConsistency:
    """N chain-of-thought samples in one batch, then the vote (math, choice) or the test-based pick (code).

    Parameters
    ----------
    settings : SelfConsistencySettings, optional
    run_tests : callable, optional
        The visible-example runner (default :func:`~toporoute.tasks.codetest.run_public_tests`; tests pass a
        stand-in).
    """

    engine_failures = "all"
    """Its calls are independent samples: one the engine failed is left out of the vote and counted in the
    usage's ``engine_failed_calls``; the episode is an error only when the engine failed every call of a
    batch (:mod:`toporoute.runtime`)."""

    def __init__(
        self, settings: SelfConsistencySettings | None = None, *, run_tests: TestRunner | None = None
    ) -> None:
        self.settings = settings or SelfConsistencySettings()
        self.name = "self-consistency"
        self._run_tests = run_tests or run_public_tests

    def params(self) -> dict[str, Any]:
        return params_of(self.name, self.settings)

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        kind_of(task)
        s = self.settings
        clock = Clock()
        rc = clock.round()
        names = [sample_name(i) for i in range(s.samples)]
        requests = [cot_request(s, ctx.episode, task, 0, name, "Sampler") for name in names]
        results = await rc.generate(ctx, requests)  # one call: the N samples batch
        answers = [answer_of(task, r) for r in results]
        pick = await select_answer(
            task, answers, timeout_s=s.test_timeout_s, memory_mb=s.test_memory_mb, run=self._run_tests
        )
        graph, stats = graph_block(names, ["Sampler"] * len(names), [])
        emit(
            RoundRecord(
                method=self.name,
                episode=ctx.episode,
                task=task.id,
                round=0,
                goal=f"{s.samples} independent chain-of-thought samples, then one answer chosen by {pick.rule}.",
                graph=graph,
                messages={n: message_of(task, r, a) for n, r, a in zip(names, results, answers)},
                usage=Usage.of(zip(names, results)),
                stats=stats,
                timing=rc.timing(),
                extra={"selection": pick.to_json()},
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
