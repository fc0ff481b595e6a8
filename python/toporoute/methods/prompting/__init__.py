"""The prompting baselines the HiVA paper compares against, on the same harness, traces and report as the other
methods; each solves code, math and multiple-choice tasks.

- ``cot`` (:class:`ChainOfThought`): one call that reasons step by step before the answer;
- ``self-consistency`` (:class:`SelfConsistency`, Wang et al.): N = 5 chain-of-thought samples in one batched
  call, then the majority vote (math, choice) or the test-based pick on the prompt's visible examples (code);
- ``self-refine`` (:class:`SelfRefine`, Madaan et al.): an answer, then up to 3 iterations of feedback and
  refinement by the same model, stopping when the feedback says the answer is correct;
- ``debate`` (:class:`Debate`, Du et al.): 3 agents answer, then 2 more rounds in which each sees the others'
  previous answers and updates its own; the last round's answers are voted on (or test-picked, for code).

The rules that choose among several answers live in :mod:`toporoute.methods.selection`; the prompts are data
files in ``toporoute/methods/prompts/{cot,self_refine,debate}``.
"""

from __future__ import annotations

from ._common import KINDS
from .cot import ChainOfThought, CotSettings
from .debate import Debate, DebateSettings
from .self_consistency import SelfConsistency, SelfConsistencySettings
from .self_refine import SelfRefine, SelfRefineSettings

__all__ = [
    "KINDS",
    "ChainOfThought",
    "CotSettings",
    "Debate",
    "DebateSettings",
    "SelfConsistency",
    "SelfConsistencySettings",
    "SelfRefine",
    "SelfRefineSettings",
]
