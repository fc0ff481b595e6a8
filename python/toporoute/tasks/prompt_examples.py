"""The examples a HumanEval-style prompt shows, read as tests an agent may see (the tester's public tests).

HumanEval writes its examples in many styles. Besides doctests (``>>> f(x)`` then the output), its docstrings
write (one example per line, after an optional bullet, ``for`` or ``assert``)::

    f(x) == y        f(x) ➞ y        f(x) => y        f(x) ==> y        f(x) -> y        f(x) = y
    f(x) returns y   f(x) # returns y   f(x) # => y   f(x) should return y.
    For lst = [1,2,3] the output should be 14        (the names are the function's parameters)
    Input: arr = [4, -4, 4], k = 2                   (or, for a one-parameter function, ``Input: [4, 2, 3]``)
    Output: [4, 4]

A call's arguments and the expected value must be Python literals (``true``/``false`` count as booleans); an
example that does not read that way is left out, never guessed at. After the value, a ``# comment`` or a
``(parenthesised explanation)`` is ignored, and a worked computation ``-> 19 - 5 - 6 = 8`` gives its result (not
after ``=``). Left out on purpose:

- a parenthesised single value, ``("Venus")``: a string in Python, but written where the author means a 1-tuple;
- the ``f(x) = y`` lines of a prompt that defines its function by a recurrence (``tri(n) = 1 + n / 2``): there
  ``tri(4) = 3`` is a term of the sequence, not the function's value (HumanEval/130 returns the list);
- a call of another name, unless no example calls the entry point and every one calls the same name, defined
  nowhere in the prompt and not a builtin (HumanEval/81 writes ``grade_equation`` for
  ``numerical_letter_grade``, /149 ``list_sort`` for ``sorted_list_sum``): that name is the entry point.

Over the 164 HumanEval prompts, doctests alone give 76 prompts visible tests; all these styles give 155 (the
canonical solutions pass every example but those of HumanEval/47 and /116, whose examples contradict their own
tests). Nothing here reads a task's tests or solution.
"""

from __future__ import annotations

import ast
import builtins
import doctest
import re
from collections.abc import Iterator
from dataclasses import dataclass

from .. import _ast_parse

__all__ = ["STYLES", "Example", "prompt_examples"]

STYLES = (
    "doctest",
    "==",
    "➞",
    "=>",
    "==>",
    "->",
    "=",
    "returns",
    "should return",
    "should be",
    "Input/Output",
)

_QUOTES = re.compile(r"^(?P<prefix>[rRuU]?)(?P<quote>\"\"\"|'''|\"|')(?P<body>.*)(?P=quote)$", re.DOTALL)
# an example line: an optional bullet, "for" or "assert", then a call
_CALL_LINE = re.compile(
    r"^[ \t]*(?:[*•-][ \t]+)?(?:(?:for|assert)[ \t]+)?(?P<name>[A-Za-z_]\w*)[ \t]*\(", re.IGNORECASE
)
_SEPARATOR = re.compile(
    r"^[ \t]*(?:#[ \t]*)?(?P<sep>==>|==|=>|-->|->|➞|=|should[ \t]+return\b|returns\b)[ \t]*(?P<want>.*)$",
    re.IGNORECASE,
)
_SEP_STYLE = {"-->": "->"}
_SHOULD_BE = re.compile(
    r"^[ \t]*(?:[*•-][ \t]+)?for[ \t]+(?P<args>.+?)[ \t,]+the[ \t]+(?:output|result)[ \t]+should[ \t]+be[ \t]+"
    r"(?P<want>.+)$",
    re.IGNORECASE,
)
_ASSIGN = re.compile(r"(?:^|,)[ \t]*(?P<name>[A-Za-z_]\w*)[ \t]*=(?!=)[ \t]*")
_MAX_LINES = 12  # lines one example (a call split over lines, an Input block) may span


@dataclass(frozen=True)
class Example:
    """One example of a prompt, as a test: evaluate ``source``, compare the value with ``want``.

    Parameters
    ----------
    source : str
        Doctest: the code after ``>>>`` (continuation lines joined). Other styles: a call of the entry point
        with literal arguments (positional, in the signature's order, for the ``For x = ...`` and ``Input:``
        styles). Ends in a newline.
    want : str
        Doctest: the expected output as written (the value's repr, or printed text; ``""`` when none is
        shown). Other styles: the repr of the expected literal.
    style : str
        How the prompt wrote it, one of :data:`STYLES`.
    """

    source: str
    want: str
    style: str = "doctest"


def prompt_examples(prompt: str, entry_point: str) -> list[Example]:
    """The examples of a HumanEval-style prompt (module docstring above): its doctests, then the examples of the
    other styles, in prompt order, without repeats.

    Taken from the entry point's docstring as written in the source, so that an escape such as ``\\n`` inside
    an example stays an escape (HumanEval/51); doctests from the whole prompt when it has no such docstring.
    Examples whose code does not compile are left out: they would blame the answer for the prompt.

    Parameters
    ----------
    prompt : str
        The prompt (a function signature and docstring).
    entry_point : str
        The function the examples call.

    Returns
    -------
    list of Example
        Empty when the prompt shows none.
    """
    text = _docstring_source(prompt, entry_point)
    examples: list[Example] = []
    for doc in _doctests(prompt if text is None else text):
        want = doc.want
        if text is None:  # the docstring's closing quotes may follow the last example's output
            want = re.sub(r"(?:^[ \t]*(?:\"\"\"|''')[ \t]*\n?)+\Z", "", want, flags=re.MULTILINE)
        if _compiles(doc.source):
            examples.append(Example(doc.source, want))
    if text is not None:
        params = _parameters(prompt, entry_point)
        seen = {e.source for e in examples}
        for ex in _written_examples(text, prompt, entry_point, params):
            if ex.source not in seen and _compiles(ex.source):
                seen.add(ex.source)
                examples.append(ex)
    return examples


# ---------------------------------------------------------------------------------------------------- doctests


def _docstring_source(prompt: str, entry_point: str) -> str | None:
    """The entry point's docstring as it is written in ``prompt``, without its quotes, or None."""
    try:
        tree = _ast_parse.parse(prompt)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != entry_point:
            continue
        first = node.body[0] if node.body else None
        if not (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            return None
        segment = ast.get_source_segment(prompt, first.value)
        m = _QUOTES.match(segment or "")
        return m["body"] if m else None
    return None


def _doctests(text: str) -> list[doctest.Example]:
    parser = doctest.DocTestParser()
    try:
        return parser.get_examples(text)
    except ValueError:
        # doctest insists on consistent indentation within an example; a prompt that breaks it still has
        # examples worth running, so try again with every line flush left
        try:
            return parser.get_examples("\n".join(line.lstrip() for line in text.splitlines()))
        except ValueError:
            return []


def _compiles(source: str) -> bool:
    try:
        compile(source, "<example>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


# ------------------------------------------------------------------------------------------ the other styles


def _written_examples(
    text: str, prompt: str, entry_point: str, params: list[str] | None
) -> Iterator[Example]:
    """The examples of every style but doctest, in line order."""
    lines = _without_doctests(text.splitlines())
    calls: list[tuple[int, str, Example]] = []  # (line, the called name, example)
    recurrence = False
    for i, line in enumerate(lines):
        m = _CALL_LINE.match(line)
        if m is not None:
            got = _call_example(lines, i, m)
            if got is None:
                continue
            if isinstance(got, str):  # "f(n) = ...": the prompt defines f by a recurrence
                recurrence = recurrence or got == m["name"] == entry_point
                continue
            calls.append((i, m["name"], got))
    named = [(i, ex) for i, name, ex in calls if name == entry_point]
    others = {name for _, name, _ in calls if name != entry_point}
    if not named and len(others) == 1:
        (alias,) = others
        if not hasattr(builtins, alias) and alias not in _defined_names(prompt):
            named = [(i, _renamed(ex, alias, entry_point)) for i, _, ex in calls]
    if recurrence:
        named = [(i, ex) for i, ex in named if ex.style != "="]
    found = named
    if params:
        found = found + list(_should_be_examples(lines, entry_point, params))
        found = found + list(_input_output_examples(lines, entry_point, params))
    for _, ex in sorted(found, key=lambda item: item[0]):
        yield ex


def _without_doctests(lines: list[str]) -> list[str]:
    """``lines`` with every doctest line (``>>>``, ``...`` and the output up to a blank line) blanked, so that
    the other styles never read a doctest twice."""
    out = list(lines)
    in_example = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_example = True
        elif not stripped:
            in_example = False
        if in_example:
            out[i] = ""
    return out


def _call_example(lines: list[str], i: int, m: re.Match[str]) -> Example | str | None:
    """The example of a call line: an :class:`Example`; the called name when the call is not literal but an
    ``=`` follows (a definition such as ``f(n) = ...``); None when the line is no example."""
    start = m.start("name")
    joined = lines[i][start:]
    end = _call_end(joined)
    extra = 1
    while end is None and extra < _MAX_LINES and i + extra < len(lines):
        joined += "\n" + lines[i + extra]
        extra += 1
        end = _call_end(joined)
    if end is None:
        return None
    call, rest = joined[:end], joined[end:]
    sep = _SEPARATOR.match(rest)
    if sep is None:
        return None
    style = sep["sep"].lower()
    style = _SEP_STYLE.get(style, re.sub(r"[ \t]+", " ", style))
    args = _literal_call(call)
    if args is None:
        return m["name"] if style == "=" else None
    value = _expected(sep["want"], worked=style != "=")
    if value is None:
        return None
    return Example(call.strip() + "\n", repr(value[0]) + "\n", style)


def _call_end(text: str) -> int | None:
    """The index just past the parenthesis that closes the first one in ``text`` (quotes respected), or None
    when it does not close."""
    depth = 0
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
            elif ch == "\n":
                return None  # a string never spans lines in an example
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
            if depth < 0:
                return None
        i += 1
    return None


def _literal_call(call: str) -> ast.Call | None:
    """``call`` parsed, when it calls a plain name with literal arguments only."""
    try:
        node = _ast_parse.parse_expression(call.strip()).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    values = [*node.args, *(k.value for k in node.keywords)]
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return None
    if not all(_is_literal(v) for v in values):
        return None
    return node


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _literal(text: str) -> tuple[object] | None:
    """``(value,)`` of a literal written as ``text``, or None."""
    text = text.strip()
    if text in ("true", "false"):
        return (text == "true",)
    if not text:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if text.startswith("(") and not isinstance(value, tuple):
        return None  # ("Venus"): a string to Python, a 1-tuple to the author
    return (value,)


def _expected(text: str, *, worked: bool) -> tuple[object] | None:
    """The expected value written at the start of ``text``: the whole text (without a sentence's final
    period), else the part before a ``#`` comment or a parenthesised explanation, else (``worked``) the result
    of a worked computation after its last ``=``."""
    text = text.strip()
    candidates = [text[:-1]] if text.endswith(".") else []
    candidates.append(text)
    cuts = [m.start() for m in re.finditer(r"[ \t]+[#(]", text)]
    candidates += [text[:c] for c in reversed(cuts)]
    for c in candidates:
        value = _literal(c)
        if value is not None:
            return value
    if worked and "=" in text:
        head, tail = text.rsplit("=", 1)
        if head.strip() and not head.rstrip().endswith(("=", "!", "<", ">")):
            return _literal(tail.rstrip().rstrip("."))
    return None


def _renamed(ex: Example, alias: str, entry_point: str) -> Example:
    return Example(entry_point + ex.source[len(alias) :], ex.want, ex.style)


def _defined_names(prompt: str) -> set[str]:
    try:
        tree = _ast_parse.parse(prompt)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _parameters(prompt: str, entry_point: str) -> list[str] | None:
    """The entry point's positional parameters, when it takes only those (no defaults, no ``*args``)."""
    try:
        tree = _ast_parse.parse(prompt)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            a = node.args
            if a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
                return None
            return [p.arg for p in (*a.posonlyargs, *a.args)]
    return None


def _arguments(text: str, params: list[str]) -> list[str] | None:
    """The literal arguments, in ``params`` order, of ``text``: ``name = value, ...`` naming every parameter
    once, or a single literal for a one-parameter function. Text after a value's last comma that is not a
    literal is dropped (``N = 1000, the sum of digits will be 1``)."""
    text = text.strip()
    marks = list(_ASSIGN.finditer(text))
    if not marks or marks[0].start() != 0:
        if len(params) == 1 and _literal(_uncommented(text)) is not None:
            return [_uncommented(text)]
        return None
    values: dict[str, str] = {}
    for j, m in enumerate(marks):
        end = marks[j + 1].start() if j + 1 < len(marks) else len(text)
        value = _literal_prefix(text[m.end() : end])
        if value is None or m["name"] in values:
            return None
        values[m["name"]] = value
    if sorted(values) != sorted(params):
        return None
    return [values[p] for p in params]


def _literal_prefix(text: str) -> str | None:
    """The longest comma-delimited prefix of ``text`` that is a literal."""
    text = _uncommented(text).rstrip(" \t,")
    while True:
        if _literal(text) is not None:
            return text
        if "," not in text:
            return None
        text = text.rsplit(",", 1)[0].rstrip()


def _uncommented(text: str) -> str:
    m = re.search(r"[ \t]+#", text)
    return (text[: m.start()] if m else text).strip()


def _should_be_examples(
    lines: list[str], entry_point: str, params: list[str]
) -> Iterator[tuple[int, Example]]:
    """``For lst = [1,2,3] the output should be 14`` (also ``the result should be``)."""
    for i, line in enumerate(lines):
        m = _SHOULD_BE.match(line)
        if m is None:
            continue
        args = _arguments(m["args"], params)
        value = _expected(m["want"], worked=True)
        if args is not None and value is not None:
            yield i, Example(f"{entry_point}({', '.join(args)})\n", repr(value[0]) + "\n", "should be")


def _input_output_examples(
    lines: list[str], entry_point: str, params: list[str]
) -> Iterator[tuple[int, Example]]:
    """``Input: <arguments>`` (on the line or the lines below), then ``Output: <value>``."""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.lower().startswith("input:"):
            continue
        parts = [stripped[len("input:") :]]
        want = None
        for j in range(i + 1, min(i + _MAX_LINES, len(lines))):
            nxt = lines[j].strip()
            if nxt.lower().startswith("output:"):
                want = nxt[len("output:") :]
                break
            if nxt.lower().startswith("input:"):
                break
            parts.append(nxt)
        if want is None:
            continue
        args = _arguments(" ".join(p for p in parts if p), params)
        value = _expected(want, worked=True)
        if args is not None and value is not None:
            yield i, Example(f"{entry_point}({', '.join(args)})\n", repr(value[0]) + "\n", "Input/Output")
