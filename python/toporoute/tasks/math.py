"""Scoring math answers: extracting the final answer from a reply and comparing it with the reference.

Numbers compare by value (``1,000`` = ``1000.0``, ``3/4`` = ``\\frac{3}{4}`` = ``0.75``), everything else by a
normalised string (LaTeX spacing, ``\\left``/``\\right``, ``\\dfrac``, math delimiters, unit text and a
leading ``x =`` removed). No computer algebra: ``2x+6`` and ``2(x+3)`` are different answers.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from .._checks import is_number
from ..errors import InvalidArgumentError
from .base import Score, Task

__all__ = ["extract_math_answer", "math_equal", "normalize_answer", "score_math"]

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_PATTERNS = (
    re.compile(r"^\s*#{4}\s*(?P<a>.+?)\s*$", re.MULTILINE),
    re.compile(
        r"(?:final\s+answer|answer)\s*(?:is|:|=)\s*[:=]?\s*(?P<a>[^\n]+?)\s*$", re.IGNORECASE | re.MULTILINE
    ),
)
# a number: thousands groups, decimals, a fraction of integers; not part of a word or a longer number
_NUMBER = re.compile(
    r"-?\\[dt]?frac\{[^{}]+\}\{[^{}]+\}"  # a LaTeX fraction counts as one number
    r"|(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w])"
    r"|(?<![\w.])-?\.\d+"
)
_NUMERIC = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?$|^[+-]?\.\d+$")
_FRAC = re.compile(r"^([+-]?)\\frac\{([^{}]+)\}\{([^{}]+)\}$")
_SLASH = re.compile(r"^([+-]?[^/]+)/([^/]+)$")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")
_UNIT_WORDS = re.compile(r"^(?P<n>[-+]?[\d.,]+(?:/\d+)?)\s*(?:(?!pi\b)[A-Za-z]{2,}\.?\s*)+$")
_LEADING_VAR = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(?=\S)")


def _boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` with balanced braces, in order (an unclosed one is skipped)."""
    found = []
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append(text[m.end() : i - 1])
    return found


def extract_math_answer(text: str) -> str | None:
    """The final answer in a reply.

    The last ``\\boxed{...}`` (balanced braces); else the last "answer is X", "Answer: X", "Final answer: X"
    or "#### X"; else the whole text when it is one short answer (``\\frac{3}{4}``, ``-2.5``); else the last
    number.

    Parameters
    ----------
    text : str
        The reply.

    Returns
    -------
    str or None
        The answer as written (strip it with :func:`normalize_answer`), or None when there is none.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a string; got {type(text).__name__}", "text")
    boxed = [b.strip() for b in _boxed_contents(text) if b.strip()]
    if boxed:
        return boxed[-1]
    for pattern in _ANSWER_PATTERNS:
        hits = [m["a"] for m in pattern.finditer(text)]
        hits = [h.strip().strip("*").strip() for h in hits]
        hits = [h for h in hits if h]
        if hits:
            return hits[-1].rstrip(".").strip()
    stripped = text.strip()
    if _is_bare_answer(stripped):
        return stripped.rstrip(".").strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(" ", "") if numbers else None


def _is_bare_answer(text: str) -> bool:
    """Whether a reply is nothing but a short answer (as :func:`extract_math_answer` returns one): one line,
    and a single token or no words of prose (LaTeX commands aside)."""
    if not text or "\n" in text or len(text) > 40 or _BOXED.search(text):
        return False
    if len(text.split()) == 1 or _TEXT_CMD.fullmatch(text):
        return True
    return re.search(r"[A-Za-z]{2,}", re.sub(r"\\[A-Za-z]+", "", text)) is None


def normalize_answer(s: str) -> str:
    """A canonical string form of an answer: math delimiters, LaTeX spacing, ``\\left``/``\\right``, unit
    text, a leading ``x =``, trailing periods and all whitespace removed; ``\\dfrac``/``\\tfrac`` ->
    ``\\frac``; thousands separators dropped from numbers; lower case.
    """
    if not isinstance(s, str):
        raise InvalidArgumentError(f"s must be a string; got {type(s).__name__}", "s")
    s = s.replace("\\$", "").replace("$", "")
    for a, b in (("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", ""), ("\\left", ""), ("\\right", "")):
        s = s.replace(a, b)
    s = s.strip().rstrip(".").strip()
    boxed = _boxed_contents(s)
    if len(boxed) == 1 and s.startswith(("\\boxed", "\\fbox")) and s.endswith("}"):
        s = boxed[0]
    for spacing in ("\\!", "\\,", "\\;", "\\:", "\\quad", "\\qquad", "\\ ", "~"):
        s = s.replace(spacing, " ")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)  # \frac34
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s)  # degrees
    s = s.strip().rstrip(".").strip()
    # unit text after a value ("5 \text{ cm}") goes; text that is the whole answer ("\text{Monday}") stays
    without_text = _TEXT_CMD.sub("", s).strip()
    s = without_text if without_text else _TEXT_CMD.sub(r"\1", s)
    s = _LEADING_VAR.sub("", s)
    m = _UNIT_WORDS.match(s)
    if m:
        s = m["n"]
    s = re.sub(r"\s+", "", s).rstrip(".")
    if _NUMERIC.match(s.rstrip("%")):
        s = s.replace(",", "")
    return s.lower()


def _as_number(s: str) -> Fraction | None:
    """The exact value of a normalised number (integer, decimal, ``a/b``, ``\\frac{a}{b}``), or None."""
    if _NUMERIC.match(s):
        return Fraction(s.replace(",", ""))
    m = _FRAC.match(s) or _SLASH.match(s)
    if m:
        sign, num, den = m.groups() if m.re is _FRAC else ("", *m.groups())
        num_v, den_v = _as_number(num), _as_number(den)
        if num_v is None or den_v is None or den_v == 0:
            return None
        value = num_v / den_v
        return -value if sign == "-" else value
    return None


def _split_tuple(s: str) -> list[str] | None:
    """The items of ``(a,b)`` / ``[a,b]`` / ``a,b`` at the top nesting level, or None for a single item."""
    if len(s) >= 2 and s[0] + s[-1] in ("()", "[]", "\\{\\}"):
        s = s[1:-1]
    items, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return items if len(items) > 1 else None


def math_equal(pred: str | None, ref: str | None, *, rel_tol: float = 1e-6) -> bool:
    """Whether a predicted answer equals the reference.

    Numbers compare by value within ``rel_tol`` (exact fractions compare exactly); percentages only when both
    sides are percentages; tuples item by item; anything else by :func:`normalize_answer`.

    Parameters
    ----------
    pred, ref : str or None
        The answers (None never equals anything).
    rel_tol : float
        Relative tolerance for numbers, >= 0.

    Returns
    -------
    bool
    """
    if not is_number(rel_tol) or not rel_tol >= 0:
        raise InvalidArgumentError(f"rel_tol must be a number >= 0; got {rel_tol!r}", "rel_tol")
    if pred is None or ref is None:
        return False
    for name, value in (("pred", pred), ("ref", ref)):
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{name} must be a string or None; got {type(value).__name__}", name)
    return _equal(normalize_answer(pred), normalize_answer(ref), rel_tol)


def _equal(a: str, b: str, rel_tol: float) -> bool:
    if a == b:
        return True
    if a.endswith("%") != b.endswith("%"):
        return False
    a, b = a.removesuffix("\\%").removesuffix("%"), b.removesuffix("\\%").removesuffix("%")
    x, y = _as_number(a), _as_number(b)
    if x is not None and y is not None:
        return x == y or math.isclose(float(x), float(y), rel_tol=rel_tol, abs_tol=0.0)
    ta, tb = _split_tuple(a), _split_tuple(b)
    if ta is not None and tb is not None and len(ta) == len(tb):
        return all(_equal(p, q, rel_tol) for p, q in zip(ta, tb, strict=True))
    return a == b


def score_math(task: Task, answer_text: str | None) -> Score:
    """Scores a reply to a math task: :func:`extract_math_answer`, then :func:`math_equal` with
    ``task.answer``.

    Parameters
    ----------
    task : Task
        A math task.
    answer_text : str or None
        The reply.

    Returns
    -------
    Score
        ``passed``, ``failed`` (a different answer) or ``no-answer`` (none found).
    """
    if not isinstance(task, Task) or task.kind != "math" or task.answer is None:
        raise InvalidArgumentError(
            f"task must be a math Task with an answer; got {getattr(task, 'kind', type(task).__name__)!r}",
            "task",
        )
    pred = extract_math_answer(answer_text) if answer_text is not None else None
    if pred is None:
        return Score(False, "no-answer", "no answer found in the reply")
    if math_equal(pred, task.answer):
        return Score(True, "passed", f"answer {pred!r}")
    return Score(False, "failed", f"answer {pred!r}; expected {task.answer!r}")
