"""``self-refine`` (Madaan et al.): the model answers, then in each of up to ``iterations`` rounds the same model
critiques its latest answer (feedback) and rewrites it given the critique (refine). The loop stops early when the
feedback ends with ``VERDICT: CORRECT``; the verdict line is constrained by a regular expression where the
engine supports it, and parsed from the text everywhere (a missing verdict counts as not correct, so the loop
goes on, and is recorded). The answer is the latest refinement that holds one.

Trace: round 0 is the first answer; round ``i`` (1-based) holds iteration ``i``'s feedback (agent ``Critic``)
and refinement (agent ``Assistant``), with the edges Assistant -> Critic (the answer critiqued) and
Critic -> Assistant (the feedback), and a ``refine`` block (verdict, whether the loop stopped, whether a
refinement without an answer kept the previous one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._checks import int_at_least
from ...llm.types import Request, Tags
from ...tasks import Task
from ...trace.schema import EdgeUsage, Message, Usage, clip
from ..episode import Clock, Emit, EpisodeOutput, SamplingSettings, call_error, one_reply_round, record_edges
from ..options import option
from ..prompt_files import read_json, read_text
from ._common import Baseline, answer_of, cot_request, kind_of, message_of, reply_text, task_view

if TYPE_CHECKING:
    from ...llm.types import Result
    from ...runtime import EpisodeContext

__all__ = ["CORRECT", "INCORRECT", "VERDICT_REGEX", "SelfRefine", "SelfRefineSettings", "parse_verdict"]

CORRECT, INCORRECT = "CORRECT", "INCORRECT"
VERDICT_REGEX = r"([\s\S]*\n)?VERDICT: (CORRECT|INCORRECT)\n?"
"""The feedback's guided-decoding grammar: any critique, then the verdict line last."""
_VERDICT = re.compile(r"VERDICT\s*:?\s*[*_`\"']*\s*(CORRECT|INCORRECT)\b", re.IGNORECASE)
_ANSWER, _CRITIC = "Assistant", "Critic"
_SHOWN = 6000  # characters of an answer shown to the critic and the refiner


def parse_verdict(text: str) -> str | None:
    """The feedback's verdict: the last ``VERDICT: CORRECT|INCORRECT`` line's word (upper case), or None."""
    found = _VERDICT.findall(text)
    return found[-1].upper() if found else None


@dataclass(frozen=True)
class SelfRefineSettings(SamplingSettings):
    """Settings of ``self-refine``.

    Parameters
    ----------
    iterations : int
        Most feedback-then-refine iterations after the first answer (>= 1; the paper's comparison: 3).
    guided_verdict : bool
        Constrain the feedback to end with the verdict line (:data:`VERDICT_REGEX`) where the engine supports
        it.
    temperature, top_p, max_tokens, seed : see :class:`~toporoute.methods.episode.SamplingSettings`.
    """

    iterations: int = option(
        3,
        name="--refine-iterations",
        unset=True,
        help="most feedback-then-refine iterations after the first answer (default 3; else --rounds)",
    )
    guided_verdict: bool = option(
        True,
        name="--no-guided-verdict",
        off=True,
        help="do not constrain the feedback's last line to the VERDICT grammar (it is parsed either way)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        int_at_least("iterations", self.iterations, 1)


class SelfRefine(Baseline[SelfRefineSettings]):
    """An answer, then up to ``iterations`` rounds of self-feedback and refinement, stopping at a CORRECT
    verdict."""

    def __init__(self, settings: SelfRefineSettings | None = None) -> None:
        super().__init__("self-refine", settings or SelfRefineSettings())

    def _feedback_request(self, episode: str, task: Task, it: int, reply: str) -> Request:
        s = self.settings
        user = read_text("self_refine", "feedback.txt").format(
            task=task_view(task),
            answer=clip(reply, _SHOWN),
            checks=read_json("self_refine", "checks.json")[task.kind],
        )
        return Request.chat(
            read_text("self_refine", "critic_system.txt").strip(),
            user.strip(),
            sampling=s.sampling(episode, it, _CRITIC),
            tags=Tags(round=it, agent=_CRITIC, role=_CRITIC),
            regex=VERDICT_REGEX if s.guided_verdict else None,
        )

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        kind_of(task)
        s = self.settings
        clock = Clock()
        rc = clock.round()
        first = await rc.generate_one(ctx, cot_request(s, ctx.episode, task, 0, _ANSWER, _ANSWER))
        answer, reply, reply_tokens = answer_of(task, first), reply_text(first), first.usage.completion_tokens
        emit(
            one_reply_round(
                self.name,
                ctx.episode,
                task,
                0,
                "Answer the task.",
                _ANSWER,
                first,
                message_of(task, first, answer),
                rc.timing(),
            )
        )
        rounds, halted, prev_edges = 1, False, list[tuple[int, int]]()
        for it in range(1, s.iterations + 1):
            if not reply:  # the last call failed or said nothing: nothing to critique
                break
            rc = clock.round()
            fb = await rc.generate_one(ctx, self._feedback_request(ctx.episode, task, it, reply))
            feedback = reply_text(fb)
            verdict = parse_verdict(feedback) if feedback else None
            fb_error = call_error(fb) or (None if verdict else "no VERDICT line in the feedback")
            calls: list[tuple[str, Result]] = [(_CRITIC, fb)]
            edges = [(0, 1)]
            routed = [EdgeUsage(_ANSWER, _CRITIC, reply_tokens)]
            messages = {_CRITIC: Message.of(fb.text, "", verdict, fb_error)}
            kept_previous = False
            stop = verdict == CORRECT or not feedback
            if not stop:
                user = read_text("self_refine", "refine.txt").format(
                    answer=clip(reply, _SHOWN), feedback=clip(feedback, _SHOWN)
                )
                refined = await rc.generate_one(
                    ctx, cot_request(s, ctx.episode, task, it, _ANSWER, _ANSWER, user)
                )
                calls.append((_ANSWER, refined))
                edges.append((1, 0))
                routed.append(EdgeUsage(_CRITIC, _ANSWER, fb.usage.completion_tokens))
                new = answer_of(task, refined)
                messages[_ANSWER] = message_of(task, refined, new)
                if new:
                    answer, reply, reply_tokens = new, reply_text(refined), refined.usage.completion_tokens
                else:
                    kept_previous = True  # a refinement without an answer does not replace the last one
            emit(
                self.record(
                    ctx.episode,
                    task,
                    it,
                    f"Iteration {it}: critique the latest answer, then refine it.",
                    ([_ANSWER, _CRITIC], [_ANSWER, _CRITIC], edges, prev_edges),
                    messages,
                    Usage.of(calls, record_edges(ctx, it, routed)),
                    rc.timing(),
                    {
                        "refine": {
                            "iteration": it,
                            "verdict": verdict,
                            "stopped": stop,
                            "kept_previous": kept_previous,
                        }
                    },
                )
            )
            prev_edges = edges
            rounds += 1
            if stop:
                halted = verdict == CORRECT
                break
        return EpisodeOutput(answer, rounds, halted, clock.llm_s, 0.0)
