"""Badges of the report's method headings: a run whose loop or scorer saw the hidden tests or gold answers is
labelled, since its results are not comparable with a run without them.

Each method records that choice in run.json's params under its own setting; :data:`ORACLE_SETTINGS` lists them
and :func:`oracle_badge` reads them all, so a new method adds one line here rather than a badge of its own.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

__all__ = ["ORACLE_SETTINGS", "oracle_badge"]

# (param, the value that means the oracle was used, badge text, what it means)
ORACLE_SETTINGS: tuple[tuple[str, Any, str, str], ...] = (
    (
        "oracle_feedback",
        True,
        "oracle feedback",
        "the loop saw the hidden tests / gold answers: results are not comparable with a run without them",
    ),
    (
        "scorer",
        "oracle",
        "oracle scorer",
        (
            "the answer scorer used the hidden tests / gold answers (stopping, and the answer choice when asked): "
            "results are not comparable with a run without them"
        ),
    ),
    (
        "retrieval_corpus",
        "humaneval",
        "HumanEval solutions retrievable",
        (
            "AgentConductor's searcher retrieved from HumanEval's canonical solutions (leaving out the task itself "
            "and its near-duplicates): results on HumanEval are not comparable with a run without them"
        ),
    ),
)


def oracle_badge(params: Any) -> str:
    """The oracle badge(s) of a run's params, each with a leading space ("" when no oracle was used).

    Parameters
    ----------
    params : mapping or any
        run.json's ``params`` (anything that is not a mapping gets no badge).

    Returns
    -------
    str
        HTML: one ``<span class="badge bad">`` per setting of :data:`ORACLE_SETTINGS` that is on.
    """
    if not isinstance(params, Mapping):
        return ""
    out = []
    for key, value, text, title in ORACLE_SETTINGS:
        got = params.get(key)
        # True must not match 1, nor "oracle" anything but the string
        if type(got) is type(value) and got == value:
            out.append(
                f' <span class="badge bad oracle" title="{html.escape(title, quote=True)}">'
                f"{html.escape(text)}</span>"
            )
    return "".join(out)
