"""The compiled conductor_check (cpp/src/conductor.cpp) on its own: the hand-written cases reach every message
the core writes, a batch equals its plans one by one, concurrent calls are safe, and the binding checks its
arguments. Its parity with the PyYAML reference (every field, on the cases of tests/_conductor_plans.py, random
plans, mutations and hostile input, and that the core decides the canonical layouts itself) is in
tests/ops/test_parity.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import _conductor_plans as plans
import numpy as np
import pytest
from _backends import core, needs_core

from toporoute import errors, ops
from toporoute.backends import cpu
from toporoute.types.conductor_topology import LOGIC, NO_YAML, OK, ROLES, CheckOptions

pytestmark = needs_core


def test_cases_cover_every_message_the_core_writes() -> None:
    """Each message template of conductor_topology (the parts the core writes) appears among the cases."""
    texts = [c[1] for c in plans.CASES]
    out = ops.conductor_check(
        texts,
        context=[plans.contexts_of(c[2], 1)[0] for c in plans.CASES],
        options=CheckOptions(),
        backend="cpu",
    )
    seen = set(out.message)
    for c in plans.CASES:  # cases with their own options
        if c[3] is not None:
            seen |= set(ops.conductor_check([c[1]], context=c[2], options=c[3], backend="cpu").message)
    templates = [
        "no ```yaml block",
        "bytes; the limit is",
        "must be a non-empty list of steps; got an empty list",
        "must be a non-empty list of steps; got a mapping",
        "must be a mapping with 'step' and 'agents'; got",
        "(allowed: step, agents)",
        "has no 'step'",
        ": step must be an integer; got a string",
        "has no 'agents'",
        "agents must be a non-empty list; got an empty list",
        "agents must be a non-empty list; got null",
        "more than 2 agents",
        "must be a mapping with 'agent' and 'ref'; got a string",
        "(allowed: agent, ref)",
        "has no 'agent'",
        "agent must be a token like '<coder>'; got an int",
        "is not an agent token like",
        "names an unknown role",
        "ref must be a list of agent tokens; got a string",
        "refs; the limit is 2",
        "must be a token like '<planner>'; got an int",
        "step numbers must increase",
        "appears twice in one step",
        "(L5)",
        "(L1)",
        "(L2)",
        "> twice",
        "(L3)",
        "(L4)",
        "(strict mode)",
        "feeds no later agent",
        "...'",
    ]
    for t in templates:
        assert any(t in m for m in seen), t
    assert any(w for w in out.warnings)


def test_large_batch_matches_one_by_one() -> None:
    texts = [
        plans.fenced(
            plans.plan_text((1, [("<coder>", [])]), (2 + i % 3, [("<tester>", ["<coder>"] if i % 4 else [])]))
        )
        for i in range(300)
    ]
    batch = ops.conductor_check(texts, backend="cpu")
    for i in (0, 1, 2, 3, 150, 299):
        one = ops.conductor_check([texts[i]], backend="cpu")
        assert batch.item(i) == one.item(0)
    assert (batch.error == np.where(np.arange(300) % 4 == 0, LOGIC, OK)).all()


def test_concurrent_calls_release_the_gil_safely() -> None:
    texts = [
        plans.fenced(plans.SIMPLE),
        "none",
        plans.fenced(plans.plan_text((1, [("<debugger>", [])]))),
    ] * 40
    want = ops.conductor_check(texts, context=plans.CTX2, backend="cpu")
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda _: ops.conductor_check(texts, context=plans.CTX2, backend="cpu"), range(8))
        )
    for got in results:
        assert got.checks() == want.checks()


def test_binding_checks_its_arguments() -> None:
    ok = {
        "texts": [b"x"],
        "pool": list(ROLES),
        "ctx_index": np.zeros(1, np.int64),
        "ctx_turn": np.zeros(1, np.int32),
        "ctx_off": np.zeros(2, np.int64),
        "ctx_id": [],
        "ctx_role": np.zeros(0, np.int16),
        "ctx_node_turn": np.zeros(0, np.int32),
        "lenient": True,
        "strict_tester": False,
        "concise": False,
        "max_bytes": 100,
        "max_depth": 16,
        "max_agents": 64,
        "max_refs": 32,
    }
    assert core.conductor_check(**ok)["error"].tolist() == [NO_YAML]
    bad = [
        ({"texts": ["x"]}, errors.InvalidArgumentError, "texts[0] must be bytes"),
        ({"texts": b"x"}, errors.InvalidArgumentError, "texts must be a list"),
        ({"pool": [1]}, errors.InvalidArgumentError, "pool[0] must be a str"),
        ({"ctx_index": np.zeros(1, np.int32)}, errors.DTypeError, "ctx_index must have dtype int64"),
        ({"ctx_index": np.zeros(2, np.int64)}, errors.ShapeError, "ctx_index must have shape (1,)"),
        ({"ctx_index": np.ones(1, np.int64)}, errors.OutOfRangeError, "ctx_index must lie in [0, 1)"),
        ({"ctx_index": [0]}, errors.DTypeError, "must be a numpy array"),
        ({"ctx_off": np.zeros((2, 1), np.int64)}, errors.ShapeError, "ctx_off must have 1 dimensions"),
        (
            {"ctx_off": np.array([0, 1], np.int64)},
            errors.InvalidArgumentError,
            "ctx_off must start at 0 and end at 0",
        ),
        ({"ctx_role": np.zeros(1, np.int16)}, errors.ShapeError, "ctx_role must have shape (0,)"),
        ({"ctx_turn": np.full(1, -1, np.int32)}, errors.OutOfRangeError, "ctx_turn must be >= 0"),
        ({"max_refs": 0}, errors.OutOfRangeError, "max_refs must be >= 1"),
    ]
    for change, exc, text in bad:
        with pytest.raises(exc) as info:
            core.conductor_check(**{**ok, **change})
        assert text in str(info.value), (change, str(info.value))
    one = dict(ok, ctx_off=np.array([0, 1], np.int64), ctx_id=["coder"], ctx_node_turn=np.zeros(1, np.int32))
    with pytest.raises(errors.OutOfRangeError, match="ctx_role must lie in"):
        core.conductor_check(**dict(one, ctx_role=np.full(1, 9, np.int16), ctx_turn=np.ones(1, np.int32)))
    two = dict(
        one,
        ctx_turn=np.ones(2, np.int32),
        ctx_off=np.array([0, 2, 1], np.int64),
        ctx_role=np.zeros(1, np.int16),
    )
    with pytest.raises(
        errors.InvalidArgumentError, match="ctx_off must be non-decreasing; it falls at index 2"
    ):
        core.conductor_check(**two)
    with pytest.raises(errors.OutOfRangeError, match="turns before their context's turn 0"):
        core.conductor_check(**dict(one, ctx_role=np.zeros(1, np.int16)))
    # ids with lone surrogates travel as surrogatepass bytes; invalid UTF-8 text is deferred, not misread
    out = core.conductor_check(
        **dict(
            one,
            ctx_role=np.zeros(1, np.int16),
            ctx_turn=np.ones(1, np.int32),
            ctx_id=["\ud800"],
            texts=[b"\xff", b"a"],
            ctx_index=np.zeros(2, np.int64),
        )
    )
    assert out["error"].tolist() == [cpu.DEFERRED, NO_YAML]
