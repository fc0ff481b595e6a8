"""Structured outputs: reasoning stripped, JSON found (whole, fenced, first balanced object), validated; failed
requests re-prompted together in one batch with the error, up to max_reprompts; usage, latency and attempts
summed; exhaustion gives a validation record; pydantic models round-trip."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from toporoute.errors import InvalidArgumentError
from toporoute.llm import Request, ScriptedEngine, Structured, Tags, Usage, schema_of
from toporoute.llm.scripted import word_count
from toporoute.llm.structured import extract_json, strip_reasoning


class Step(BaseModel):
    title: str
    minutes: int


class Plan(BaseModel):
    answer: int
    steps: list[Step]
    note: str | None = None


PLAN = schema_of(Plan)
GOOD = Plan(answer=42, steps=[Step(title="think", minutes=3), Step(title="write", minutes=5)])


def is_reprompt(r: Request) -> bool:
    return len(r.messages) > 2 and r.messages[-2].role == "assistant"


def req(user: str, schema: dict | None = PLAN, agent: str = "a") -> Request:
    return Request.chat("You plan.", user, schema=schema, tags=Tags("ep", 0, agent, "planner"))


# ------------------------------------------------------------------------------------------------ pure helpers


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('<think>hmm {"x": 0}</think>{"a": 1}', '{"a": 1}'),
        ("<think>a</think> one <think>b\n</think> two", "one  two"),
        ('the prompt opened it</think>\n{"a": 1}', '{"a": 1}'),
        ('<think>ran out of tokens {"a": 1}', ""),
        ("  \n<think>still going", ""),
        ('{"a": 1}', '{"a": 1}'),
        ('{"a": "<think> inside a string is kept"}', '{"a": "<think> inside a string is kept"}'),
    ],
)
def test_strip_reasoning(text: str, want: str) -> None:
    assert strip_reasoning(text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2] ", [1, 2]),
        ('Sure! Here it is:\n```json\n{"a": {"b": [1, 2]}}\n```\nDone.', {"a": {"b": [1, 2]}}),
        ('```\n{"a": 2}\n```', {"a": 2}),
        ('```JSON {"a": 3}```', {"a": 3}),
        ('```python\nx = {1}\n```\n```json\n{"a": 4}\n```', {"a": 4}),
        ('The answer is {"a": "}{", "b": {"c": 1}} and {"d": 2}.', {"a": "}{", "b": {"c": 1}}),
        ('set {not json} then {"a": 5}', {"a": 5}),
    ],
)
def test_extract_json(text: str, want: object) -> None:
    assert extract_json(text) == want


def test_extract_json_failures() -> None:
    for text in ["", "   ", "no json here", "{broken", "[1, 2] trailing"]:
        with pytest.raises(ValueError):
            extract_json(text)
    assert extract_json("list: [1, 2] trailing", arrays=True) == [1, 2]


def test_schema_of_pydantic_and_other_types() -> None:
    assert PLAN == Plan.model_json_schema() and "$defs" in PLAN
    assert schema_of(list[int]) == {"type": "array", "items": {"type": "integer"}}


# --------------------------------------------------------------------------------------------------- the wrapper


@pytest.mark.asyncio
async def test_pydantic_roundtrip_with_think_and_fence() -> None:
    text = f"<think>Let me plan. {{not json}}</think>\n```json\n{GOOD.model_dump_json(indent=1)}\n```"
    engine = Structured(ScriptedEngine(lambda r: text))
    assert engine.name == "scripted" and not engine.supports_guided_json
    (res,) = await engine.generate([req("plan it")])
    assert res.ok and res.attempts == 1 and res.text == text
    assert Plan.model_validate(res.parsed) == GOOD


@pytest.mark.asyncio
async def test_reprompt_succeeds_on_second_attempt_in_one_batch() -> None:
    bad = '{"answer": "forty-two", "steps": []}'

    def reply(r: Request) -> str:
        if r.schema is None:
            return "free text"
        return GOOD.model_dump_json() if is_reprompt(r) else bad

    inner = ScriptedEngine(reply, latency_s=0.005)
    engine = Structured(inner, max_reprompts=2)
    requests = [req("one", agent="a"), req("free", schema=None, agent="b"), req("two", agent="c")]
    results = await engine.generate(requests)

    # first batch: everything; second batch: only the two failures, together
    assert [len(b) for b in inner.batches] == [3, 2]
    retry = inner.batches[1][0]
    assert [m.role for m in retry.messages] == ["system", "user", "assistant", "user"]
    assert retry.messages[2].content == bad
    assert (
        "$.answer" in retry.messages[3].content
        and "'forty-two' is not of type 'integer'" in retry.messages[3].content
    )
    assert retry.tags == requests[0].tags and retry.schema == PLAN

    one, free, two = results
    assert free.text == "free text" and free.parsed is None and free.attempts == 1 and free.tags.agent == "b"
    for res, r in ((one, requests[0]), (two, requests[2])):
        assert res.ok and res.attempts == 2 and res.tags == r.tags
        assert Plan.model_validate(res.parsed) == GOOD
        prompt1 = sum(word_count(m.content) + 1 for m in r.messages)
        prompt2 = prompt1 + word_count(bad) + 1 + word_count(retry.messages[3].content) + 1
        assert res.usage == Usage(prompt1 + prompt2, word_count(bad) + word_count(GOOD.model_dump_json()))
        assert res.latency_s > 0.008  # both attempts


@pytest.mark.asyncio
async def test_exhaustion_gives_validation_record() -> None:
    inner = ScriptedEngine(lambda r: "I refuse to answer in JSON.")
    (res,) = await Structured(inner, max_reprompts=2).generate([req("x")])
    assert [len(b) for b in inner.batches] == [1, 1, 1]
    assert not res.ok and res.error is not None
    assert (res.error.kind, res.error.attempts, res.attempts) == ("validation", 3, 3)
    assert "after 3 attempt(s)" in res.error.message and "no JSON object" in res.error.message
    assert res.parsed is None and res.text == "I refuse to answer in JSON."
    # the conversation grows by one exchange per re-prompt
    assert [len(b[0].messages) for b in inner.batches] == [2, 4, 6]
    assert res.usage.completion_tokens == 3 * word_count(res.text)

    inner0 = ScriptedEngine(lambda r: "nope")
    (res0,) = await Structured(inner0, max_reprompts=0).generate([req("x")])
    assert res0.error is not None and res0.error.kind == "validation" and len(inner0.batches) == 1


@pytest.mark.asyncio
async def test_wrong_shape_and_empty_reply_are_validation_errors() -> None:
    replies = {"list": "[1, 2]", "empty": "<think>only thinking", "missing": '{"answer": 1}'}
    inner = ScriptedEngine(lambda r: replies[r.messages[1].content])
    results = await Structured(inner, max_reprompts=0).generate([req(k) for k in replies])
    msgs = {k: r.error.message for k, r in zip(replies, results) if r.error is not None}
    assert "is not of type 'object'" in msgs["list"]
    assert "empty after the reasoning" in msgs["empty"]
    assert "'steps' is a required property" in msgs["missing"]


@pytest.mark.asyncio
async def test_engine_errors_pass_through_without_reprompt() -> None:
    inner = ScriptedEngine(
        lambda r: "{}", fail=lambda r: "down" if "fail" in r.messages[-1].content else None
    )
    results = await Structured(inner).generate([req("fail"), req("plain fail", schema=None)])
    assert len(inner.batches) == 1
    assert all(r.error is not None and r.error.kind == "engine" for r in results)


@pytest.mark.asyncio
async def test_no_schema_passes_through_untouched() -> None:
    inner = ScriptedEngine(lambda r: "hello there")
    requests = [req("a", schema=None), req("b", schema=None)]
    got = await Structured(inner).generate(requests)
    want = await ScriptedEngine(lambda r: "hello there").generate(requests)
    assert [(r.text, r.usage, r.attempts, r.tags, r.parsed) for r in got] == [
        (r.text, r.usage, r.attempts, r.tags, r.parsed) for r in want
    ]
    assert await Structured(inner).generate([]) == []


@pytest.mark.asyncio
async def test_bad_schema_and_arguments_raise_before_generating() -> None:
    inner = ScriptedEngine(lambda r: "{}")
    with pytest.raises(InvalidArgumentError) as e:
        await Structured(inner).generate([req("x", schema={"type": "no-such-type"})])
    assert e.value.arg == "schema"
    assert inner.batches == []
    with pytest.raises(InvalidArgumentError):
        Structured(inner, max_reprompts=-1)
    with pytest.raises(InvalidArgumentError):
        Structured(inner, reprompt="no placeholder")


@pytest.mark.asyncio
async def test_custom_reprompt_and_array_schema() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    inner = ScriptedEngine(lambda r: "ok: [1, 2, 3]" if is_reprompt(r) else "[1, 'x']")
    (res,) = await Structured(inner, reprompt="Fix this: {error}").generate([req("x", schema=schema)])
    assert res.parsed == [1, 2, 3] and res.attempts == 2
    assert inner.batches[1][0].messages[-1].content.startswith("Fix this: ")
