"""Multiple-choice tasks (``kind == "choice"``): the JSONL format and its errors, hub rows, the options as shown,
extracting the chosen letter, scoring, and a clear refusal from the methods that do not solve them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import make_method
from toporoute.methods.episode import answer_from, domain_of
from toporoute.runtime import Runtime
from toporoute.tasks import Task, choice_prompt, extract_choice, load_tasks, score, write_tasks_jsonl
from toporoute.tasks.loading import tasks_from_rows

_CHOICE = {
    "id": "mc/1",
    "kind": "choice",
    "prompt": "Which planet is the largest?",
    "choices": ["Mars", "Jupiter", "Venus", "Earth"],
    "answer": "B",
}
_MATH = {"id": "sum/1", "kind": "math", "prompt": "What is 2 + 3?", "answer": "5"}


def _write(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def _without(record: dict, key: str) -> dict:
    return {k: v for k, v in record.items() if k != key}


def test_choice_tasks_load_and_round_trip(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "tasks.jsonl", [_CHOICE, _MATH, {**_CHOICE, "id": "mc/2", "meta": {"subject": "x"}}]
    )
    first, math_task, second = load_tasks(str(f))
    assert first == Task(
        "mc/1",
        "choice",
        "Which planet is the largest?",
        answer="B",
        choices=("Mars", "Jupiter", "Venus", "Earth"),
    )
    assert second.meta == {"subject": "x"} and math_task.choices is None
    out = write_tasks_jsonl(load_tasks(str(f)), tmp_path / "again.jsonl")
    assert load_tasks(str(out)) == load_tasks(str(f))
    assert json.loads(out.read_text().splitlines()[0])["choices"] == _CHOICE["choices"]


@pytest.mark.parametrize(
    ("row", "message", "arg"),
    [
        (_without(_CHOICE, "choices"), "missing field 'choices'", "choices"),
        ({**_CHOICE, "choices": "Mars, Jupiter"}, "'choices' must be a list of 2 to 26 option texts", "choices"),
        ({**_CHOICE, "choices": ["Mars"]}, "'choices' must be a list of 2 to 26 option texts", "choices"),
        ({**_CHOICE, "choices": [f"o{k}" for k in range(27)]}, "'choices' must be a list of 2 to 26", "choices"),
        ({**_CHOICE, "choices": ["Mars", " "]}, "'choices'[1] must be a non-empty string; got ' '", "choices"),
        ({**_CHOICE, "choices": ["Mars", 3]}, "'choices'[1] must be a non-empty string; got 3", "choices"),
        (_without(_CHOICE, "answer"), "missing field 'answer'", "answer"),
        ({**_CHOICE, "answer": "E"}, "'answer' must be the letter of one of the 4 choices (A to D); got 'E'",
         "answer"),
        ({**_CHOICE, "answer": "b"}, "'answer' must be the letter of one of the 4 choices", "answer"),
        ({**_CHOICE, "answer": "AB"}, "'answer' must be the letter", "answer"),
        ({**_CHOICE, "answer": ""}, "'answer' must be the letter", "answer"),
        ({**_CHOICE, "answer": 1}, "'answer' must be the letter", "answer"),
        ({**_CHOICE, "entry_point": "f"}, "'entry_point' is for code tasks; got one on a choice task", "entry_point"),
        ({**_MATH, "choices": ["a", "b"]}, "'choices' is for choice tasks; got one on a math task", "choices"),
        ({**_CHOICE, "kind": "mcq"}, "'kind' must be 'code', 'math' or 'choice'; got 'mcq'", "kind"),
    ],
    ids=[
        "no-choices", "choices-not-list", "one-choice", "27-choices", "blank-choice", "choice-not-string",
        "no-answer", "answer-out-of-range", "answer-lower-case", "answer-two-letters", "answer-empty",
        "answer-index", "code-field", "choices-on-math", "unknown-kind",
    ],
)  # fmt: skip
def test_choice_task_errors_name_the_line_and_field(
    tmp_path: Path, row: dict, message: str, arg: str
) -> None:
    f = _write(tmp_path / "tasks.jsonl", [_MATH, row])
    with pytest.raises(InvalidArgumentError) as info:
        load_tasks(str(f))
    assert str(info.value).startswith("tasks.jsonl line 2: " + message), str(info.value)
    assert info.value.arg == arg


def test_task_checks_choices_and_answer() -> None:
    with pytest.raises(InvalidArgumentError, match="choices of a choice task must be 2 to 26"):
        Task("t", "choice", "q", answer="A")
    with pytest.raises(InvalidArgumentError, match=r"one of its 2 choices \(A-B\); got 'C'"):
        Task("t", "choice", "q", answer="C", choices=("x", "y"))
    with pytest.raises(InvalidArgumentError, match="choices is for choice tasks"):
        Task("t", "math", "q", answer="1", choices=("x", "y"))
    task = Task("t", "choice", "q", answer="A", choices=["x", "y"])  # type: ignore[arg-type]
    assert task.choices == ("x", "y") and hash(task) == hash(
        Task("t", "choice", "q", answer="A", choices=("x", "y"))
    )


def test_hub_rows_with_options_become_choice_tasks() -> None:
    rows = [
        {
            "question_id": 7,
            "question": "Pick one.",
            "options": ["a", "b", "c"],
            "answer": "C",
            "answer_index": 2,
        },
        {"question": "And now?", "choices": ["x", "y", "z", "w"], "answer": 1, "subject": "logic"},
        {"question": "Index only.", "options": ["p", "q"], "answer_index": 0},
    ]
    tasks = tasks_from_rows(rows, source="mmlu")
    assert [(t.kind, t.answer, t.choices) for t in tasks] == [
        ("choice", "C", ("a", "b", "c")),
        ("choice", "B", ("x", "y", "z", "w")),
        ("choice", "A", ("p", "q")),
    ]
    assert tasks[1].meta["subject"] == "logic" and "choices" not in tasks[1].meta
    with pytest.raises(
        InvalidArgumentError, match=r"mmlu row 0: a multiple-choice row needs answer .* got answer 'Z'"
    ):
        tasks_from_rows([{"question": "q", "options": ["a", "b"], "answer": "Z"}], source="mmlu")


def test_choice_prompt_letters_the_options() -> None:
    task = Task("t", "choice", "  Which one?\n", answer="A", choices=("first ", "second"))
    assert choice_prompt(task) == "Which one?\n\nOptions:\nA. first\nB. second"
    with pytest.raises(InvalidArgumentError, match="choice task"):
        choice_prompt(Task("m", "math", "q", answer="1"))


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("B", "B"),
        ("c", "C"),
        ("(D)", "D"),
        ("**A.**", "A"),
        ("Answer: B", "B"),
        ("The answer is (C).", "C"),
        ("so the final answer is **D**", "D"),
        ("Option B is correct, since ...", "B"),
        ("\\boxed{C}", "C"),
        ("we get \\boxed{\\text{A}}", "A"),
        ("B) Jupiter is the largest.", "B"),
        ("C\nJupiter is larger than the others.", "C"),
        ("At first the answer is A. On reflection the answer is D.", "D"),
        ("I think C is right.", "C"),
        ("The answer is a subtle one; only (B) fits.", "B"),
        ("A careful reading rules out B and leaves C.", None),  # several letters stand alone: ambiguous
        ("E", None),  # not an option of four
        ("The answer is E.", None),
        ("Jupiter.", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_choice(text: str | None, letter: str | None) -> None:
    assert extract_choice(text, 4) == letter


def test_extract_choice_checks_its_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="n_choices must be an integer in 2..26; got 1"):
        extract_choice("A", 1)
    with pytest.raises(InvalidArgumentError, match="text must be a string"):
        extract_choice(3, 4)  # type: ignore[arg-type]


def test_score_choice_by_exact_letter() -> None:
    task = Task("t", "choice", "q", answer="B", choices=("a", "b", "c", "d"))
    passed = score(task, "Answer: B")
    assert passed.passed and passed.status == "passed" and passed.detail == "chose B"
    failed = score(task, "The answer is C")
    assert failed.status == "failed" and failed.detail == "chose C; expected B"
    assert score(task, "no idea").status == "no-answer" and score(task, None).status == "no-answer"
    # an answer already extracted by the method scores the same as the reply it came from
    assert answer_from(task, "<reasoning> the answer is B") == "B" and score(task, "B").passed


def choice_task() -> Task:
    return Task(
        "mc/1", "choice", "Which planet is the largest?", answer="B", choices=tuple(_CHOICE["choices"])
    )


@pytest.mark.parametrize("method", ["dytopo", "single", "parallel", "conductor"])
def test_methods_without_choice_support_refuse_with_the_task_and_kind(method: str) -> None:
    built = make_method(method)
    errors: list[BaseException] = []

    async def fn(ctx):
        try:
            await built.episode(ctx, choice_task(), lambda r: None)
        except InvalidArgumentError as exc:
            errors.append(exc)
        return {}

    asyncio.run(Runtime(ScriptedEngine(lambda r: "B"), concurrency=1, progress=False).run([("ep", fn)]))
    assert len(errors) == 1
    assert "'mc/1'" in str(errors[0]) and "'choice'" in str(errors[0])
    with pytest.raises(
        InvalidArgumentError, match="task 'mc/1': this method solves code and math tasks; got kind 'choice'"
    ):
        domain_of(choice_task())


def test_run_command_refuses_choice_tasks_for_other_methods(tmp_path: Path) -> None:
    f = _write(tmp_path / "tasks.jsonl", [_MATH, _CHOICE])
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "toporoute",
            "run",
            "single",
            "--tasks",
            str(f),
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode == 2
    assert "method single solves code and math tasks" in p.stderr and "'mc/1' of kind 'choice'" in p.stderr
    assert "starting vLLM" not in p.stderr  # refused before any engine starts
