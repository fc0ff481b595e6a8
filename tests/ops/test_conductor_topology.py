"""AgentConductor's topology language (toporoute.types.conductor_topology, ops.conductor_check): the spec's vectors
(methods/agentconductor.md §2.3, §4.7), every error class and rule, extraction, hostile YAML, and properties
over random plans. Both backends are checked where the compiled core is built; tests/ops/test_parity.py holds
the exhaustive parity suite."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _backends import backend_names, runnable_names
from _conductor_plans import plan_text, yaml_block
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toporoute import ops
from toporoute.errors import InvalidArgumentError
from toporoute.types.conductor_topology import (
    LOGIC,
    NO_YAML,
    OK,
    PARSE,
    ROLES,
    SCHEMA,
    CheckOptions,
    Context,
    Node,
    check,
    extract_yaml,
    render_yaml,
)

BACKENDS = backend_names("conductor_check")  # the host backends of the grid (tests/_backends.py)


def plan(*steps: tuple[int, list[tuple[str, list[str]]]], fence: bool = True) -> str:
    return yaml_block(*steps) if fence else plan_text(*steps)


FIG1_T1 = plan(
    (1, [("<planner>", []), ("<searcher>", [])]),
    (2, [("<planner>", ["<planner>", "<searcher>"]), ("<algorithmer>", ["<planner>", "<searcher>"])]),
    (3, [("<searcher>", ["<planner>", "<algorithmer>", "<searcher>"])]),
    (4, [("<coder>", ["<planner>", "<algorithmer>", "<searcher>"])]),
    (5, [("<tester>", ["<coder>"])]),
)
FIG1_T2 = plan(
    (6, [("<algorithmer>", ["<planner>", "<searcher>", "<coder>", "<tester>"])]),
    (7, [("<debugger>", ["<planner>", "<algorithmer>", "<tester>"])]),
    (8, [("<tester>", ["<debugger>"])]),
)


def run(text: str, backend: str, context: Context | None = None, **opts):
    return ops.conductor_check([text], context=context, options=CheckOptions(**opts), backend=backend).item(0)


# --------------------------------------------------------------------------------------------- spec vectors


@pytest.mark.parametrize("backend", BACKENDS)
def test_figure1_two_turns(backend: str) -> None:
    c1 = run("Reasoning first.\n" + FIG1_T1 + "\ndone", backend)
    assert c1.ok, c1.message
    g1 = c1.graph
    assert (g1.n_nodes, g1.n_edges, g1.n_steps, g1.depth) == (7, 11, 5, 5)
    assert [len(layer) for layer in g1.layers] == [2, 2, 1, 1, 1]
    # step 2's planner reads step 1's planner and searcher; step 3's searcher reads the step-2 planner
    assert g1.refs[2] == (0, 1) and g1.refs[4] == (2, 3, 1)
    d = ops.conductor_density(g1.n_nodes, g1.n_edges, g1.n_steps, 10)
    assert float(d.s_complex) == pytest.approx(10.5149, abs=1e-4)

    ctx = Context().next(g1)
    c2 = run(FIG1_T2, backend, ctx)
    assert c2.ok, c2.message
    g2 = c2.graph
    assert (g2.n_nodes, g2.n_edges, g2.n_steps, g2.depth) == (3, 8, 3, 3)
    assert g2.base == 7
    edges = g2.edges()
    # the turn-2 algorithmer re-runs: a self edge from the turn-1 one (node 3); its refs are cross-turn
    assert (3, 7, "self") in edges
    assert [k for s, d, k in edges if d == 7 and k != "self"] == ["cross"] * 4
    assert (7, 8, "intra") in edges and (8, 9, "intra") in edges
    assert float(ops.conductor_density(3, 8, 3, 10).s_complex) == pytest.approx(4.1750, abs=1e-4)


@pytest.mark.parametrize(
    ("text", "vne"),
    [
        (plan((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])])), (2, 1, 2)),
        (
            plan(
                (1, [("<planner>", [])]), (2, [("<coder>", ["<planner>"])]), (3, [("<tester>", ["<coder>"])])
            ),
            (3, 2, 3),
        ),
        (
            plan(
                (1, [("<planner>", []), ("<searcher>", [])]),
                (2, [("<coder>", ["<planner>", "<searcher>"])]),
                (3, [("<tester>", ["<coder>"])]),
            ),
            (4, 3, 3),
        ),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_spec_vectors_decode_to_the_table(text: str, vne: tuple[int, int, int], backend: str) -> None:
    g = run(text, backend).graph
    assert (g.n_nodes, g.n_edges, g.n_steps) == vne


def test_density_vectors() -> None:
    table = [(2, 1, 2, 4, 7.6875), (3, 2, 3, 4, 7.4203), (4, 3, 3, 4, 9.3196), (7, 11, 5, 10, 10.5149),
             (3, 8, 3, 10, 4.1750), (1, 0, 1, 4, 16.0997)]  # fmt: skip
    v, e, s, cap, want = (np.array(c) for c in zip(*table))
    for backend in runnable_names("conductor_density"):
        np.testing.assert_allclose(
            ops.conductor_density(v, e, s, cap, backend=backend).reward, want, atol=1e-4
        )
    over = ops.conductor_density([5, 6, 8, 9, 11], [4, 5, 7, 8, 10], [5, 6, 8, 9, 11], [4, 4, 7, 7, 10])
    np.testing.assert_allclose(over.reward, [-0.2449, -0.4621, -0.1419, -0.2782, -0.0997], atol=1e-4)


# --------------------------------------------------------------------------------------------- error classes

VALID_TAIL = [(9, [("<tester>", ["<coder>"])])]


@pytest.mark.parametrize(
    ("text", "code", "fragment"),
    [
        ("no plan here", NO_YAML, "no ```yaml block"),
        ("```python\nprint(1)\n```", NO_YAML, "no ```yaml block"),
        ("```yaml\n- step: [1\n```", PARSE, "line"),
        ("```yaml\n- step: 1\n  step: 2\n```", PARSE, "duplicate key 'step'"),
        ("```yaml\n- &a {step: 1}\n- *a\n```", PARSE, "anchors and aliases"),
        ("```yaml\n- step: 1\n---\n- step: 2\n```", PARSE, "another document"),
        ("```yaml\n- !!python/object:os.system {}\n```", PARSE, "constructor"),
        ("```yaml\n```", SCHEMA, "got null"),
        ("```yaml\nstep: 1\n```", SCHEMA, "got a mapping"),
        ("```yaml\n[]\n```", SCHEMA, "got an empty list"),
        ("```yaml\n- 3\n```", SCHEMA, "list item 1 must be a mapping"),
        ("```yaml\n- step: 1\n  agents: []\n```", SCHEMA, "agents must be a non-empty list; got an empty list"),
        ("```yaml\n- step: one\n  agents: []\n```", SCHEMA, "step must be an integer; got a string"),
        ("```yaml\n- step: 1\n```", SCHEMA, "step 1 has no 'agents'"),
        ("```yaml\n- agents: []\n```", SCHEMA, "has no 'step'"),
        ("```yaml\n- step: 1\n  agents: [{agent: <coder>}]\n  name: x\n```", SCHEMA, "unknown key 'name'"),
        ("```yaml\n- step: 1\n  agents: [{agent: <wizard>}]\n```", SCHEMA, "unknown role"),
        ("```yaml\n- step: 1\n  agents: [{agent: coder}]\n```", SCHEMA, "is not an agent token"),
        ("```yaml\n- step: 1\n  agents: [{agent: <coder>, refs: []}]\n```", SCHEMA, "unknown key 'refs'"),
        ("```yaml\n- step: 1\n  agents: [{agent: <coder>, ref: <planner>}]\n```", SCHEMA, "ref must be a list"),
        ("```yaml\n- step: 1\n  agents: [{agent: <coder>, ref: [1]}]\n```", SCHEMA, "ref 1 must be a token"),
        ("```yaml\n- step: 1\n  agents: [{agent: true}]\n```", SCHEMA, "got a bool"),
        (plan((1, [("<coder>", [])]), (1, [("<tester>", ["<coder>"])])), LOGIC, "step numbers must increase"),
        (plan((1, [("<coder>", []), ("<coder>", [])]), (2, [("<tester>", ["<coder>"])])), LOGIC, "twice in one step"),
        (plan((1, [("<coder>", ["<planner>"])]), (2, [("<tester>", ["<coder>"])])), LOGIC, "(L1)"),
        (plan((1, [("<planner>", [])]), (2, [("<coder>", ["<searcher>"])]), (3, [("<tester>", ["<coder>"])])), LOGIC, "(L2)"),
        (plan((1, [("<coder>", [])]), (2, [("<coder_2>", ["<coder>", "<coder>"])]), (3, [("<tester>", ["<coder_2>"])])), LOGIC, "twice"),
        (plan((1, [("<planner>", [])]), (2, [("<coder>", ["<planner>"])])), LOGIC, "has no <tester> (L3)"),
        (plan((1, [("<planner>", [])]), (2, [("<tester>", ["<planner>"])])), LOGIC, "(L4)"),
        (plan((1, [("<planner>", [])]), (2, [("<debugger>", ["<planner>"])]), (3, [("<tester>", ["<debugger>"])])), LOGIC, "(L5)"),
        # a ref to an agent of the same step is not an earlier agent (agents of a step cannot see each other)
        (plan((1, [("<planner>", []), ("<coder>", ["<planner>"])]), (2, [("<tester>", ["<coder>"])])), LOGIC, "(L1)"),
        (plan((1, [("<planner>", [])]), (2, [("<searcher>", []), ("<coder>", ["<searcher>"])]), (3, [("<tester>", ["<coder>"])])), LOGIC, "(L2)"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("backend", BACKENDS)
def test_error_classes(text: str, code: int, fragment: str, backend: str) -> None:
    c = run(text, backend)
    assert c.error == code, c.message
    assert fragment in c.message
    assert c.graph is None and c.tag is not None


@pytest.mark.parametrize("backend", BACKENDS)
def test_options(backend: str) -> None:
    stray = plan(
        (1, [("<planner>", []), ("<searcher>", [])]),
        (2, [("<coder>", ["<planner>"])]),
        (3, [("<tester>", ["<coder>"])]),
    )
    c = run(stray, backend)
    assert c.ok and c.graph.warnings == ("step 1: <searcher> feeds no later agent",)
    assert run(stray, backend, concise=True).error == LOGIC
    early = plan(
        (1, [("<coder>", [])]),
        (2, [("<tester>", ["<coder>"])]),
        (3, [("<coder_2>", ["<tester>"])]),
        (4, [("<tester>", ["<coder_2>"])]),
    )
    assert run(early, backend).ok
    assert "strict mode" in run(early, backend, strict_tester=True).message
    unfenced = (
        "I will plan.\n"
        + plan((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])]), fence=False)
        + "\nThat is all."
    )
    assert run(unfenced, backend).ok
    assert run(unfenced, backend, lenient=False).error == NO_YAML
    assert run(FIG1_T1, backend, max_agents=6).error == SCHEMA
    assert "the limit is 2" in run(FIG1_T1, backend, max_refs=2).message
    assert run(FIG1_T1, backend, max_bytes=100).error == PARSE
    pool = (*ROLES, "online searcher")
    extra = plan(
        (1, [("<online searcher>", [])]),
        (2, [("<coder>", ["<online searcher>"])]),
        (3, [("<tester>", ["<coder>"])]),
    )
    assert run(extra, backend).error == SCHEMA
    g = run(extra, backend, pool=pool).graph
    assert g.nodes[0].role == "online searcher"  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_quoting_ids_and_ref_forms(backend: str) -> None:
    text = """```yaml
# a comment
- step: 1
  agents:
    - agent: "<planner>"
    - agent: '<coder>'
      ref:
- step: 2
  agents:
    - {agent: <coder_2>, ref: ["<planner>"]}
- step: 3
  agents:
    - agent: <tester>   # runs both
      ref:
        - <coder>
        - <coder_2>
```"""
    c = run(text, backend)
    assert c.ok, c.message
    g = c.graph
    assert [n.id for n in g.nodes] == ["planner", "coder", "coder_2", "tester"]
    assert [n.role for n in g.nodes] == ["planner", "coder", "coder", "tester"]
    assert g.refs == ((), (), (0,), (1, 2))
    assert g.warnings == ()


@pytest.mark.parametrize("backend", BACKENDS)
def test_later_turns(backend: str) -> None:
    t1 = run(plan((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])])), backend).graph
    ctx = Context().next(t1)
    # restarting the numbering is accepted; the first step may ref earlier-turn agents (L1 is turn 1 only)
    again = plan((1, [("<debugger>", ["<coder>", "<tester>"])]), (2, [("<tester>", ["<debugger>"])]))
    g = run(again, backend, ctx).graph
    assert g.turn == 1 and g.refs[0] == (0, 1) and g.cross[0] == (True, True)
    assert g.self_src == (-1, 1)  # the tester re-runs
    # a debugger needs a coder earlier in the trajectory: turn 1's counts
    assert run(again, backend, Context(1)).error == LOGIC
    # an invalid first turn leaves no agents: turn 2 is checked like a first turn, except L1
    after_invalid = Context().next(None)
    assert run(again, backend, after_invalid).message.endswith("(L5)")
    refs_first = plan((1, [("<coder>", ["<planner>"])]), (2, [("<tester>", ["<coder>"])]))
    assert run(refs_first, backend, after_invalid).message.endswith("(L2)")
    assert run(refs_first, backend).message.endswith("(L1)")
    # the most recent earlier agent wins: turn 2's coder shadows turn 1's
    shadow = plan((3, [("<coder>", ["<tester>"])]), (4, [("<tester>", ["<coder>"])]))
    g = run(shadow, backend, ctx).graph
    assert g.refs == ((1,), (2,)) and g.self_src == (0, 1)


def test_context_validation() -> None:
    with pytest.raises(InvalidArgumentError, match="turns before 0"):
        Context(0, (Node("coder", "coder", 1, 0),))
    with pytest.raises(InvalidArgumentError, match="pool"):
        ops.conductor_check("x", context=Context(1, (Node("wizard", "wizard", 1, 0),)))
    with pytest.raises(InvalidArgumentError, match="one per text"):
        ops.conductor_check(["a", "b"], context=[Context()])
    with pytest.raises(InvalidArgumentError, match="texts\\[1\\]"):
        ops.conductor_check(["a", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="must include"):
        CheckOptions(pool=("planner",))
    with pytest.raises(InvalidArgumentError, match="max_bytes"):
        CheckOptions(max_bytes=0)


def test_extraction_rules() -> None:
    two = "```yaml\n- step: 1\n```\ntext\n```YML\n  - step: 2\n```"
    assert extract_yaml(two) == "- step: 2"
    assert extract_yaml("```yaml\r\n- step: 1\r\n```\r\n") == "- step: 1"
    assert extract_yaml("```yaml\n- step: 3\n  agents:") == "- step: 3\n  agents:"  # unclosed: to the end
    plain = "```\nnot a plan\n```\n```\n- step: 4\n```"
    assert extract_yaml(plain) == "- step: 4"
    assert extract_yaml(plain, lenient=False) is None
    # another language's block is skipped whole: its closing fence opens nothing
    assert extract_yaml("```python\nx = 1\n```\n```yaml\n- step: 5\n```", lenient=False) == "- step: 5"
    assert extract_yaml("```python\n- step: 6\n```", lenient=False) is None
    assert (
        extract_yaml("a\n- step: 1\n  agents:\n# c\n- step: 2\nbye\n- step: 9")
        == "- step: 1\n  agents:\n# c\n- step: 2"
    )


# --------------------------------------------------------------------------------------------- hostile YAML


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "```yaml\n" + "\n".join(lines) + "\n```"


HOSTILE = {
    "alias bomb": (_bomb(), PARSE),
    "deep flow nesting": ("```yaml\n" + "[" * 20000 + "]" * 20000 + "\n```", PARSE),
    "deep block nesting": ("```yaml\n" + "".join("  " * i + "- \n" for i in range(3000)) + "```", PARSE),
    "megabyte block": ("```yaml\n" + "- step: 1\n" * 120000 + "```", PARSE),
    "megabyte prose": ("word " * 250000, NO_YAML),
    "many plans": ((FIG1_T1 + "\n") * 5000, OK),
    "nul bytes": ("```yaml\n- step: 1\x00\n```", PARSE),
    "lone surrogate": ("```yaml\n- step: \ud800\n```", PARSE),
    "python tag": ("```yaml\n- !!python/object/apply:os.system ['true']\n```", PARSE),
    "huge int": ("```yaml\n- step: " + "9" * 5000 + "\n  agents: [{agent: <coder>}]\n```", PARSE),
    "big int": ("```yaml\n- step: " + "9" * 40 + "\n  agents: [{agent: <coder>}]\n```", SCHEMA),
    "newline in a token": ('```yaml\n- step: 1\n  agents: [{agent: "<tester>\\n"}]\n```', SCHEMA),
}


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_yaml_is_rejected_with_the_right_class(name: str, backend: str) -> None:
    text, code = HOSTILE[name]
    t0 = time.perf_counter()
    c = run(text, backend)
    elapsed = time.perf_counter() - t0
    assert c.error == code, (name, c.message)
    print(f"{name} [{backend}]: {c.tag or 'valid'} in {elapsed * 1e3:.1f} ms")


# --------------------------------------------------------------------------------------------- properties


@st.composite
def layered_plans(draw: st.DrawFn) -> tuple[list[tuple[int, list[tuple[str, list[str]]]]], list[list[int]]]:
    """A valid first-turn plan by construction, and the refs as (layer, position) of each agent."""
    n_mid = draw(st.integers(0, 4))
    roles = ["planner", "searcher", "algorithmer"]
    steps: list[tuple[int, list[tuple[str, list[str]]]]] = []
    placed: list[str] = []
    step_no = draw(st.integers(1, 5))
    first = draw(st.lists(st.sampled_from(roles + ["coder"]), min_size=1, max_size=3, unique=True))
    steps.append((step_no, [(f"<{r}>", []) for r in first]))
    placed += first
    for _ in range(n_mid):
        step_no += draw(st.integers(1, 3))
        members = draw(st.lists(st.sampled_from(roles + ["coder"]), min_size=1, max_size=3, unique=True))
        agents = []
        for r in members:
            refs = draw(st.lists(st.sampled_from(placed), max_size=3, unique=True))
            agents.append((f"<{r}>", [f"<{x}>" for x in refs]))
        steps.append((step_no, agents))
        placed += [r for r in members if r not in placed]
    if "coder" not in placed:
        step_no += 1
        steps.append((step_no, [("<coder>", [f"<{placed[-1]}>"])]))
        placed.append("coder")
    step_no += draw(st.integers(1, 2))
    extra = draw(st.lists(st.sampled_from(placed), max_size=2, unique=True))
    refs = ["<coder>"] + [f"<{x}>" for x in extra if x != "coder"]
    steps.append((step_no, [("<tester>", refs)]))
    return steps, []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layered_plans())
def test_random_valid_plans_decode_consistently(drawn) -> None:
    steps, _ = drawn
    text = plan(*steps)
    c = check(text)
    assert c.ok, (c.message, text)
    g = c.graph
    assert g.n_nodes == sum(len(a) for _, a in steps)
    assert g.n_edges == sum(len(r) for _, a in steps for _, r in a)
    assert g.n_steps == len(steps) and 1 <= g.depth <= g.n_steps  # Theorem 1
    # Expected from the drawn plan alone: the nodes in writing order, and each ref resolved to the latest
    # agent of that id in an earlier step (a step's own agents become visible only after the step).
    want_ids: list[str] = []
    want_refs: list[tuple[int, ...]] = []
    latest: dict[str, int] = {}
    for _, agents in steps:
        here = {}
        for tok, refs in agents:
            here[tok.strip("<>")] = len(want_ids)
            want_ids.append(tok.strip("<>"))
            want_refs.append(tuple(latest[r.strip("<>")] for r in refs))
        latest.update(here)
    assert [n.id for n in g.nodes] == want_ids
    assert g.refs == tuple(want_refs)
    layer_of = {i: li for li, layer in enumerate(g.layers) for i in layer}
    for i, refs in enumerate(g.refs):
        for src in refs:
            assert layer_of[src] < layer_of[i]  # sequentiality
    # round trip through the canonical layout
    again = check("```yaml\n" + render_yaml(g) + "```")
    assert again.ok and again.graph == g
    for backend in runnable_names("conductor_check", reference=False):
        b = ops.conductor_check([text], backend=backend).item(0)
        assert b == c


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layered_plans(), st.data())
def test_mutated_plans_agree_across_backends_and_never_crash(drawn, data) -> None:
    steps, _ = drawn
    text = plan(*steps)
    pos = data.draw(st.integers(0, len(text)))
    junk = data.draw(
        st.sampled_from(["", "-", ":", "[", "]", "{", "&a ", "*a", "\t", "#", "'", '"', "\n", "  ", "<", "x"])
    )
    cut = data.draw(st.integers(0, 3))
    mutated = text[:pos] + junk + text[pos + cut :]
    ref = ops.conductor_check(mutated, backend="reference").item(0)
    assert ref.error in (OK, NO_YAML, PARSE, SCHEMA, LOGIC)
    assert (ref.graph is not None) == (ref.error == OK)
    for backend in runnable_names("conductor_check", reference=False):
        assert ops.conductor_check(mutated, backend=backend).item(0) == ref
