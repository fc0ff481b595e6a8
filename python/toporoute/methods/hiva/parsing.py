"""Reading HiVA's LLM outputs (spec §5), each defensively: a malformed output gives a parse error and the
caller's fallback, never an exception. Also the regular expressions that guide the short structured outputs where
the engine supports them (the topology decision, the sentiment, the gradient, the parallelisability analysis,
the self-critique verdict)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ACTIONS",
    "SENTIMENTS",
    "Decision",
    "Gradient",
    "Parallelism",
    "decision_regex",
    "extract_tool_code",
    "feedback_text",
    "improved_variable",
    "parse_decision",
    "parse_gradient",
    "parse_parallelism",
    "parse_sentiment",
    "parse_verdict",
]

ACTIONS = ("ADD_PARALLEL", "ADD_SERIAL", "REMOVE_SUCCESSOR", "CONNECT_TO_AGGREGATOR", "NO_CHANGE")
SENTIMENTS = ("POSITIVE", "NEUTRAL", "CRITICAL")
SENTIMENT_REGEX = "(POSITIVE|NEUTRAL|CRITICAL)"
VERDICT_REGEX = (
    r"CONSISTENCY: [^\n]{0,200}\nCOMPLETENESS: [^\n]{0,200}\nALIGNMENT: [^\n]{0,200}\nVERDICT: (PASS|FAIL)"
)
GRADIENT_REGEX = (
    r"SYSTEM_PROMPT_FEEDBACK: [^\n]{0,600}\nTOOL_FEEDBACK: [^\n]{0,400}\nOVERALL_FEEDBACK: [^\n]{1,1200}"
)
"""The gradient's guide: one line per field, long enough for the overall feedback to carry a code fix (about
2,200 characters in all, inside the gradient's 800 tokens)."""
PARALLEL_REGEX = (
    r"CAN_PARALLELIZE: (true|false)\nSUBTASKS_COUNT: [0-5]\nCOORDINATION_REQUIRED: (true|false)\n"
    r"PARALLEL_BENEFIT: (High|Medium|Low|None)\nREASON: [^\n]{0,200}"
)
_BENEFIT = {"high": 1.0, "medium": 0.67, "low": 0.33, "none": 0.0}
_FIELDS = ("SYSTEM_PROMPT_FEEDBACK", "TOOL_FEEDBACK", "OVERALL_FEEDBACK")
_EMPTY = {"", "none", "n/a", "na", "empty", "-", "no change", "nothing", "<empty>", "no changes"}


@dataclass(frozen=True)
class Gradient:
    """A node's local textual gradient (Fig. 8); ``error`` says why the output did not parse (then the fields
    hold the fallback: no prompt or tool feedback, the raw text as the overall feedback)."""

    system_prompt: str
    tool: str
    overall: str
    error: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {
            "system_prompt_feedback": self.system_prompt,
            "tool_feedback": self.tool,
            "overall_feedback": self.overall,
            "error": self.error,
        }


@dataclass(frozen=True)
class Decision:
    """A topology decision (Fig. 10): ``action`` one of :data:`ACTIONS`, ``arg`` the description or the target;
    ``error`` says why the output fell back to NO_CHANGE."""

    action: str
    arg: str
    error: str | None = None


@dataclass(frozen=True)
class Parallelism:
    """The parallelisability analysis, with its score (High 1, Medium 0.67, Low 0.33, None 0; 0 when it cannot
    be parallelised); ``error`` when it did not parse (score 0)."""

    can: bool
    subtasks: int
    coordination: bool
    benefit: str
    score: float
    error: str | None = None

    def describe(self) -> str:
        if self.error is not None:
            return "unknown"
        return (
            f"can parallelize: {str(self.can).lower()}, subtasks: {self.subtasks}, "
            f"coordination required: {str(self.coordination).lower()}, benefit: {self.benefit}"
        )


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"^[ \t*#-]*{name}[ \t*]*:[ \t]*(.*)$", text, re.MULTILINE | re.IGNORECASE)
    return None if m is None else m.group(1).strip().strip("*").strip()


def _meaningful(value: str) -> str:
    return "" if value.strip().strip("<>.").lower() in _EMPTY else value.strip()


def _spans(text: str, names: tuple[str, ...]) -> dict[str, str | None]:
    """Each labelled field's value: from its label to the next label (or the end), so that a value may run over
    several lines (a code fix in an unguided reply); None for a label that is not there."""
    heads = [
        (m, name)
        for name in names
        if (m := re.search(rf"^[ \t*#-]*{name}[ \t*]*:[ \t]*", text, re.MULTILINE | re.IGNORECASE))
    ]
    heads.sort(key=lambda h: h[0].start())
    out: dict[str, str | None] = dict.fromkeys(names)
    for k, (m, name) in enumerate(heads):
        end = heads[k + 1][0].start() if k + 1 < len(heads) else len(text)
        out[name] = text[m.end() : end].strip().strip("*").strip()
    return out


def parse_gradient(text: str) -> Gradient:
    """The three labelled fields of an agent-gradient output (a field's value runs from its label to the next
    one, over several lines if need be). Missing fields: an error, and the fallback (no prompt or tool
    feedback; the stripped text, or "" when blank, as the overall feedback)."""
    values = _spans(text, _FIELDS)
    missing = [name for name, v in values.items() if v is None]
    if missing:
        overall = re.sub(r"\s+", " ", text).strip()[:600]
        return Gradient("", "", overall, f"missing field(s) {', '.join(missing)}")
    sp, tool, overall = (_meaningful(values[n] or "") for n in _FIELDS)
    if not overall:
        return Gradient(sp, tool, "", "empty OVERALL_FEEDBACK")
    return Gradient(sp, tool, overall)


def feedback_text(text: str) -> tuple[str, str | None]:
    """The text inside ``<FEEDBACK>...</FEEDBACK>`` (a missing closing tag tolerated), or the stripped whole
    text with an error when there is no tag; ("", error) for a blank output."""
    return _tagged(text, "FEEDBACK", "no <FEEDBACK> tags")


def improved_variable(text: str) -> tuple[str, str | None]:
    """The new prompt inside ``<IMPROVED_VARIABLE>`` tags (Fig. 9); without the tags the whole response (spec
    §3.3) with a note; ("", error) for a blank one."""
    return _tagged(text, "IMPROVED_VARIABLE", "no <IMPROVED_VARIABLE> tags: the whole response")


def _tagged(text: str, tag: str, untagged: str) -> tuple[str, str | None]:
    """The text inside ``<tag>...</tag>`` (a missing closing tag tolerated); else the stripped whole text with
    the error ``untagged``; ("", "empty output") for a blank text."""
    m = re.search(rf"<{tag}>(.*?)(?:</{tag}>|$)", text, re.DOTALL | re.IGNORECASE)
    if m and m.group(1).strip():
        return m.group(1).strip(), None
    if not text.strip():
        return "", "empty output"
    return text.strip(), untagged


def decision_regex(successors: list[str]) -> str:
    """The guide of a decision line: one action, REMOVE_SUCCESSOR naming one of ``successors`` (or
    ``least_visited``)."""
    targets = "|".join([*(re.escape(s) for s in successors), "least_visited"])
    text = r"[^\n]{1,120}"
    return (
        f"(ADD_PARALLEL: {text}|ADD_SERIAL: {text}|REMOVE_SUCCESSOR: (?:{targets})|"
        f"CONNECT_TO_AGGREGATOR: {text}|NO_CHANGE: {text})"
    )


def parse_decision(text: str) -> Decision:
    """The first line that starts with an action (after optional markup); NO_CHANGE with an error when none
    does."""
    for line in text.splitlines():
        m = re.match(r"^[ \t*#>`-]*([A-Z_]+)[ \t*`]*:?[ \t]*(.*)$", line.strip())
        if m and m.group(1) in ACTIONS:
            return Decision(m.group(1), m.group(2).strip().strip("*`").strip())
    if not text.strip():
        return Decision("NO_CHANGE", "", "empty output")
    return Decision("NO_CHANGE", "", f"no action line in {text.strip()[:80]!r}")


def parse_parallelism(text: str) -> Parallelism:
    """The five-field analysis; unparseable: score 0 with an error."""
    can, count, coord, benefit = (
        _field(text, n)
        for n in ("CAN_PARALLELIZE", "SUBTASKS_COUNT", "COORDINATION_REQUIRED", "PARALLEL_BENEFIT")
    )
    if can is None or benefit is None:
        return Parallelism(False, 0, False, "None", 0.0, "missing CAN_PARALLELIZE or PARALLEL_BENEFIT")
    level = benefit.split()[0].strip(".,").lower() if benefit.split() else ""
    if level not in _BENEFIT:
        return Parallelism(False, 0, False, "None", 0.0, f"PARALLEL_BENEFIT {benefit!r} unknown")
    yes = can.lower().startswith(("true", "yes"))
    m = re.match(r"\d+", count or "")
    n = min(5, int(m.group())) if m else 0
    return Parallelism(
        yes,
        n,
        bool(coord and coord.lower().startswith(("true", "yes"))),
        level.capitalize(),
        _BENEFIT[level] if yes else 0.0,
    )


def parse_sentiment(text: str) -> tuple[str | None, str | None]:
    """``(label, error)``: the first of POSITIVE / NEUTRAL / CRITICAL the output names, else (None, error)."""
    m = re.search(r"\b(POSITIVE|NEUTRAL|CRITICAL)\b", text.upper())
    if m:
        return m.group(1), None
    return None, "no POSITIVE / NEUTRAL / CRITICAL in the output" if text.strip() else "empty output"


def parse_verdict(text: str) -> tuple[bool | None, str | None]:
    """The self-critique's ``VERDICT: PASS|FAIL`` as True / False, or (None, error)."""
    m = re.search(r"VERDICT\W*(PASS|FAIL)", text, re.IGNORECASE)
    if m:
        return m.group(1).upper() == "PASS", None
    return None, "no VERDICT line"


def extract_tool_code(text: str) -> tuple[str, str | None]:
    """The python block of a tool-writing output (the last one that defines ``tool_function``, else the last
    block), or ("", error)."""
    blocks = re.findall(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|$)", text, re.DOTALL)
    if not blocks:
        if "def tool_function" in text:
            return text[text.index("def tool_function") :].strip() + "\n", None
        return "", "no python block"
    defining = [b for b in blocks if "def tool_function" in b]
    return (defining or blocks)[-1].strip() + "\n", None
