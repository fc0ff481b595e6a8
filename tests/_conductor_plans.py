"""AgentConductor plans for the conductor_check tests: hand-written cases (every message the compiled core
writes, every extraction rule), hostile inputs, and hypothesis strategies of random plans in several block
layouts and of text mutations. tests/ops/test_parity.py checks every backend against the reference on them;
tests/ops/test_conductor_core.py checks what the compiled core decides itself."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

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
)


def contexts_of(contexts: Context | Sequence[Context] | None, n: int) -> list[Context]:
    if contexts is None or isinstance(contexts, Context):
        return [contexts or Context()] * n
    return list(contexts)


def fenced(body: str, before: str = "Plan:\n", after: str = "\nDone.") -> str:
    return f"{before}```yaml\n{body}```{after}"


def plan_text(*steps: tuple[int, list[tuple[str, list[str] | None]]]) -> str:
    """The canonical layout: ``- step:`` items, four-space agents, flow refs (None: no ref key)."""
    lines = []
    for step, agents in steps:
        lines += [f"- step: {step}", "  agents:"]
        for tok, refs in agents:
            lines.append(f"    - agent: {tok}")
            if refs is not None:
                lines.append(f"      ref: [{', '.join(refs)}]")
    return "\n".join(lines) + "\n"


def yaml_block(*steps: tuple[int, list[tuple[str, list[str] | None]]]) -> str:
    """A plan as a model writes it (and the validator grammar admits): a ```yaml fence, nothing around it."""
    return fenced(plan_text(*steps), before="", after="")


# a valid second turn after a first turn planner -> coder -> tester: its first step refs that turn's agents
# (L1 holds in the first turn only)
PLAN_FIX = yaml_block((4, [("<debugger>", ["<coder>", "<tester>"])]), (5, [("<tester>", ["<debugger>"])]))

SIMPLE = plan_text(
    (1, [("<planner>", [])]), (2, [("<coder>", ["<planner>"])]), (3, [("<tester>", ["<coder>"])])
)


def ctx(turn: int, *nodes: tuple[str, str, int, int]) -> Context:
    return Context(turn, tuple(Node(i, r, s, t) for i, r, s, t in nodes))


# A context of two earlier turns: turn 0 planned, coded and tested; turn 1 debugged and tested again.
CTX2 = ctx(
    2,
    ("planner", "planner", 1, 0),
    ("coder", "coder", 2, 0),
    ("tester", "tester", 3, 0),
    ("debugger", "debugger", 4, 1),
    ("tester", "tester", 5, 1),
    ("coder_2", "coder", 5, 1),
)
CTX_PLANNER = ctx(1, ("planner", "planner", 1, 0))


Case = tuple[str, str, Context | None, CheckOptions | None, int, bool]


def case(
    name: str,
    text: str,
    *,
    context: Context | None = None,
    options: CheckOptions | None = None,
    want: int = OK,
    decided: bool = True,
) -> Case:
    """A hand-written case: (name, text, context, options, expected class, the core must decide it itself)."""
    return name, text, context, options, want, decided


CASES: list[Case] = [
    # extraction
    case("valid", fenced(SIMPLE)),
    case("no text", "", want=NO_YAML),
    case("prose", "I will plan now.\nStep one: think.", want=NO_YAML),
    case("fence YAML upper", "```YAML\n" + SIMPLE + "```"),
    case("fence yml padded", " \t``` \tYmL \t\n" + SIMPLE + "  ```  \n"),
    case("fence unclosed", "text\n```yaml\n" + SIMPLE),
    case("fence empty", "```yaml\n```", want=SCHEMA),
    case("fence only comments", "```yaml\n# nothing yet\n\n```", want=SCHEMA),
    case("last yaml fence wins", fenced("- step: 1\n", after="\n") + fenced(SIMPLE)),
    case("last fence invalid", fenced(SIMPLE, after="\n") + fenced("- step: 1\n"), want=SCHEMA),
    case("plain fence lenient", "```\n" + SIMPLE + "```"),
    case("plain fence strict", "```\n" + SIMPLE + "```", options=CheckOptions(lenient=False), want=NO_YAML),
    case("plain fence not a plan", "```\nprint(1)\n```\n", want=NO_YAML),
    case("plain fence, first line blank", "```\n\n  \n" + SIMPLE + "```"),
    case("last plain fence with a plan wins", "```\n- step: 9\n```\n```\n" + SIMPLE + "```\n```\nx\n```"),
    case("unfenced", "Plan below.\n" + SIMPLE + "That is all."),
    case("unfenced strict", "Plan below.\n" + SIMPLE, options=CheckOptions(lenient=False), want=NO_YAML),
    case("unfenced spaced step line", "-  step :1\n", want=SCHEMA, decided=False),
    case("python fence before", "```python\nx = 1\n```\n" + fenced(SIMPLE)),
    case(
        "python fence before strict",
        "```python\nx = 1\n```\n" + fenced(SIMPLE),
        options=CheckOptions(lenient=False),
    ),
    case("dedent", "```yaml\n" + "".join("   " + ln + "\n" for ln in SIMPLE.splitlines()) + "```"),
    case(
        "dedent with blank lines",
        "```yaml\n  - step: 1\n    \n  \t\n"
        + "".join("  " + ln + "\n" for ln in SIMPLE.splitlines()[1:])
        + "```",
    ),
    case("crlf", fenced(SIMPLE).replace("\n", "\r\n")),
    case("double cr", fenced(SIMPLE).replace("\n", "\r\r\n"), decided=False),
    case("tab margin", "```yaml\n" + "".join("\t" + ln + "\n" for ln in SIMPLE.splitlines()) + "```"),
    case(
        "tab inside",
        fenced(SIMPLE.replace("    - agent: <planner>", "\t- agent: <planner>")),
        want=PARSE,
        decided=False,
    ),
    case("too many bytes", fenced(SIMPLE), options=CheckOptions(max_bytes=50), want=PARSE),
    case(
        "bytes are utf-8",
        fenced("# é\n" + SIMPLE),
        options=CheckOptions(max_bytes=len(SIMPLE) + 3),
        want=PARSE,
    ),
    # layout variants the core reads
    case(
        "comments",
        fenced(
            "# plan\n- step: 1 # first\n  agents: # who\n    # the planner\n    - agent: <planner>  # p\n"
            "      ref: [] # none\n- step: 2\n  agents:\n    - agent: <coder>\n      ref: [<planner>]\n"
            "- step: 3\n  agents:\n    - agent: <tester>\n      ref: [<coder>]   # last\n"
        ),
    ),
    case(
        "indentless agents",
        fenced(
            "- step: 1\n  agents:\n  - agent: <coder>\n- step: 2\n  agents:\n  - agent: <tester>\n"
            "    ref:\n    - <coder>\n"
        ),
    ),
    case(
        "block refs",
        fenced(
            "- step: 1\n  agents:\n    - agent: <coder>\n    - agent: <planner>\n- step: 2\n  agents:\n"
            "    - agent: <tester>\n      ref:\n        - <coder>\n        - <planner>\n"
        ),
    ),
    case(
        "quoted tokens",
        fenced(
            "- step: 1\n  agents:\n    - agent: '<coder>'\n- step: 2\n  agents:\n"
            "    - agent: \"<tester>\"\n      ref: ['<coder>']\n"
        ),
    ),
    case(
        "ref first",
        fenced(
            "- agents:\n    - ref: []\n      agent: <coder>\n  step: 1\n- step: 2\n  agents:\n"
            "    - {agent: <tester>, ref: [<coder>]}\n"
        ),
        decided=False,
    ),
    case(
        "null and missing refs",
        fenced(
            "- step: 1\n  agents:\n    - agent: <coder>\n      ref:\n    - agent: <planner>\n"
            "      ref: ~\n- step: 2\n  agents:\n    - agent: <tester>\n      ref: [<coder>]\n"
        ),
    ),
    case(
        "wide indent",
        fenced(
            "-   step: 1\n    agents:\n        -   agent: <coder>\n-   step: 2\n    agents:\n"
            "        -   agent: <tester>\n            ref: [ <coder> ]\n"
        ),
    ),
    case(
        "negative and zero steps",
        fenced(plan_text((-3, [("<coder>", [])]), (0, [("<tester>", ["<coder>"])]))),
    ),
    case(
        "big step",
        fenced(
            plan_text(
                (123456789012345678, [("<coder>", [])]), (123456789012345679, [("<tester>", ["<coder>"])])
            )
        ),
    ),
    case(
        "huge step",
        fenced(plan_text((1, [("<coder>", [])]), (10**25, [("<planner>", ["<coder>"])]))),
        want=SCHEMA,
        decided=False,
    ),
    # schema
    case("not a list", fenced("step: 1\n"), want=SCHEMA),
    case("a scalar", fenced("hello world\n"), want=SCHEMA),
    case("an int", fenced("42\n"), want=SCHEMA),
    case("empty list", fenced("[]\n"), want=SCHEMA),
    case("item not a mapping", fenced("- step\n"), want=SCHEMA),
    case("item a list", fenced("- [a, b]\n"), want=SCHEMA),
    case("item null", fenced("-\n"), want=SCHEMA),
    case("unknown step key", fenced("- step: 1\n  agents: []\n  note: hi\n"), want=SCHEMA),
    case("long unknown key", fenced("- step: 1\n  " + "k" * 60 + ": 1\n"), want=SCHEMA),
    case("no step", fenced("- agents:\n    - agent: <coder>\n"), want=SCHEMA),
    case("step a string", fenced("- step: one\n  agents: []\n"), want=SCHEMA),
    case("step quoted", fenced("- step: '1'\n  agents: []\n"), want=SCHEMA),
    case("step null", fenced("- step:\n  agents: []\n"), want=SCHEMA),
    case("step a list", fenced("- step: [1]\n  agents: []\n"), want=SCHEMA),
    case("step a bool", fenced("- step: yes\n  agents: []\n"), want=SCHEMA, decided=False),
    case("step a float", fenced("- step: 1.5\n  agents: []\n"), want=SCHEMA, decided=False),
    case("no agents", fenced("- step: 1\n"), want=SCHEMA),
    case("agents empty", fenced("- step: 1\n  agents: []\n"), want=SCHEMA),
    case("agents null", fenced("- step: 1\n  agents:\n"), want=SCHEMA),
    case("agents a string", fenced("- step: 1\n  agents: <coder>\n"), want=SCHEMA),
    case("agents a mapping", fenced("- step: 1\n  agents:\n    agent: <coder>\n"), want=SCHEMA),
    case(
        "too many agents",
        fenced(plan_text((1, [("<coder>", []), ("<planner>", [])]), (2, [("<tester>", [])]))),
        options=CheckOptions(max_agents=2),
        want=SCHEMA,
    ),
    case("agent not a mapping", fenced("- step: 1\n  agents:\n    - <coder>\n"), want=SCHEMA),
    case(
        "agent unknown key",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      role: coder\n"),
        want=SCHEMA,
    ),
    case("no agent", fenced("- step: 1\n  agents:\n    - ref: []\n"), want=SCHEMA),
    case("agent an int", fenced("- step: 1\n  agents:\n    - agent: 7\n"), want=SCHEMA),
    case("agent null", fenced("- step: 1\n  agents:\n    - agent:\n"), want=SCHEMA),
    case("agent not a token", fenced("- step: 1\n  agents:\n    - agent: coder\n"), want=SCHEMA),
    case("agent bad suffix", fenced("- step: 1\n  agents:\n    - agent: <coder_>\n"), want=SCHEMA),
    case("agent two suffixes", fenced("- step: 1\n  agents:\n    - agent: <coder_1_2>\n"), want=SCHEMA),
    case("agent digit first", fenced("- step: 1\n  agents:\n    - agent: <1coder>\n"), want=SCHEMA),
    case("agent long token", fenced("- step: 1\n  agents:\n    - agent: <" + "x" * 50 + ">x\n"), want=SCHEMA),
    case("agent unknown role", fenced("- step: 1\n  agents:\n    - agent: <reviewer_2>\n"), want=SCHEMA),
    case("agent role case", fenced("- step: 1\n  agents:\n    - agent: <Coder>\n"), want=SCHEMA),
    case("agent spaced role", fenced("- step: 1\n  agents:\n    - agent: <code r>\n"), want=SCHEMA),
    case(
        "ref a string",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref: <planner>\n"),
        want=SCHEMA,
    ),
    case(
        "ref a mapping",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref:\n        a: b\n"),
        want=SCHEMA,
    ),
    case(
        "too many refs",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref: [<a>, <b>, <c>]\n"),
        options=CheckOptions(max_refs=2),
        want=SCHEMA,
    ),
    case(
        "ref an int",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref: [<planner>, 3]\n"),
        want=SCHEMA,
    ),
    case("ref null", fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref: [null]\n"), want=SCHEMA),
    case(
        "ref a list",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref:\n        - [<planner>]\n"),
        want=SCHEMA,
    ),
    case(
        "ref not a token",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref: [planner]\n"),
        want=SCHEMA,
    ),
    case(
        "ref unknown role",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n      ref: ['<boss>']\n"),
        want=SCHEMA,
    ),
    case(
        "schema before logic", fenced(plan_text((2, [("<coder>", [])]), (1, [("<boss>", [])]))), want=SCHEMA
    ),
    case(
        "custom pool",
        fenced(plan_text((1, [("<coder>", [])]), (2, [("<re-viewer 2>", [])]))),
        options=CheckOptions(pool=("coder", "debugger", "tester", "re-viewer 2")),
        want=LOGIC,
    ),
    # logic
    case(
        "steps decrease",
        fenced(plan_text((2, [("<coder>", [])]), (1, [("<tester>", ["<coder>"])]))),
        want=LOGIC,
    ),
    case(
        "steps repeat",
        fenced(plan_text((1, [("<coder>", [])]), (1, [("<tester>", ["<coder>"])]))),
        want=LOGIC,
    ),
    case("id twice", fenced(plan_text((1, [("<coder>", []), ("<coder>", [])]))), want=LOGIC),
    case(
        "repeated role with ids",
        fenced(
            plan_text(
                (1, [("<coder>", []), ("<coder_2>", [])]), (2, [("<tester>", ["<coder>", "<coder_2>"])])
            )
        ),
    ),
    case("debugger first", fenced(plan_text((1, [("<debugger>", [])]))), want=LOGIC),
    case("debugger beside coder", fenced(plan_text((1, [("<coder>", []), ("<debugger>", [])]))), want=LOGIC),
    case("L1", fenced(plan_text((1, [("<coder>", ["<planner>"])]))), want=LOGIC),
    case(
        "L2 unknown",
        fenced(plan_text((1, [("<coder>", [])]), (2, [("<tester>", ["<planner>"])]))),
        want=LOGIC,
    ),
    case(
        "L2 same step",
        fenced(plan_text((1, [("<planner>", [])]), (2, [("<coder>", []), ("<tester>", ["<coder>"])]))),
        want=LOGIC,
    ),
    case(
        "ref twice",
        fenced(plan_text((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>", "<coder>"])]))),
        want=LOGIC,
    ),
    case("L3", fenced(plan_text((1, [("<planner>", [])]), (2, [("<coder>", ["<planner>"])]))), want=LOGIC),
    case(
        "L4",
        fenced(plan_text((1, [("<planner>", []), ("<coder>", [])]), (2, [("<tester>", ["<planner>"])]))),
        want=LOGIC,
    ),
    case(
        "L4 second tester",
        fenced(plan_text((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"]), ("<tester_2>", [])]))),
        want=LOGIC,
    ),
    case(
        "strict tester",
        fenced(
            plan_text(
                (1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])]), (3, [("<tester_2>", ["<coder>"])])
            )
        ),
        options=CheckOptions(strict_tester=True),
        want=LOGIC,
    ),
    case(
        "lax tester",
        fenced(
            plan_text(
                (1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])]), (3, [("<tester_2>", ["<coder>"])])
            )
        ),
    ),
    case(
        "warnings",
        fenced(
            plan_text(
                (1, [("<planner>", []), ("<searcher>", [])]),
                (2, [("<coder>", ["<planner>"])]),
                (3, [("<tester>", ["<coder>"])]),
            )
        ),
    ),
    case(
        "concise",
        fenced(
            plan_text(
                (1, [("<planner>", []), ("<searcher>", [])]),
                (2, [("<coder>", ["<planner>"])]),
                (3, [("<tester>", ["<coder>"])]),
            )
        ),
        options=CheckOptions(concise=True),
        want=LOGIC,
    ),
    case(
        "logic order: L3 before strict",
        fenced(plan_text((1, [("<tester>", [])]), (2, [("<coder>", [])]))),
        options=CheckOptions(strict_tester=True, concise=True),
        want=LOGIC,
    ),
    case(
        "depth",
        fenced(
            plan_text(
                (1, [("<planner>", []), ("<coder>", [])]),
                (2, [("<coder_2>", ["<coder>"])]),
                (3, [("<debugger>", ["<coder_2>", "<planner>"])]),
                (4, [("<tester>", ["<debugger>", "<coder>"])]),
            )
        ),
    ),
    # contexts: cross-turn refs, self edges, repeated ids
    case(
        "cross refs",
        fenced(
            plan_text(
                (7, [("<coder>", ["<planner>", "<tester>"])]), (8, [("<tester>", ["<coder>", "<coder_2>"])])
            )
        ),
        context=CTX2,
    ),
    case(
        "refs in first step ok with context",
        fenced(plan_text((1, [("<debugger>", ["<tester>"])]), (2, [("<tester>", ["<debugger>"])]))),
        context=CTX2,
    ),
    case(
        "first-step refs in a later turn with no context",
        fenced(plan_text((1, [("<coder>", ["<planner>"])]))),
        context=Context(1),
        want=LOGIC,
    ),
    case(
        "debugger after context coder",
        fenced(plan_text((1, [("<debugger>", [])]), (2, [("<tester>", ["<debugger>"])]))),
        context=CTX2,
    ),
    case(
        "debugger without any coder",
        fenced(plan_text((1, [("<debugger>", [])]))),
        context=CTX_PLANNER,
        want=LOGIC,
    ),
    case("L4 through context", fenced(plan_text((1, [("<tester>", ["<coder_2>"])]))), context=CTX2),
    case(
        "L4 context planner",
        fenced(plan_text((1, [("<tester>", ["<planner>"])]))),
        context=CTX_PLANNER,
        want=LOGIC,
    ),
    case(
        "self edges",
        fenced(
            plan_text(
                (1, [("<tester>", []), ("<coder_2>", [])]),
                (2, [("<tester>", ["<coder_2>"])]),
                (3, [("<tester_3>", ["<tester>", "<coder_2>"])]),
            )
        ),
        context=CTX2,
    ),
    case(
        "latest wins",
        fenced(plan_text((1, [("<coder>", ["<tester>"])]), (2, [("<tester>", ["<coder>"])]))),
        context=CTX2,
    ),
    case("context only", fenced(plan_text((5, [("<tester>", ["<coder>"])]))), context=CTX2),
    case(
        "unknown ref with context",
        fenced(plan_text((5, [("<tester>", ["<coder_9>"])]))),
        context=CTX2,
        want=LOGIC,
    ),
    # outside the subset: deferred, the same answer anyway
    case("anchors", fenced("- step: &s 1\n  agents:\n    - agent: <coder>\n"), want=PARSE, decided=False),
    case(
        "aliases",
        fenced("- step: 1\n  agents: &a\n    - agent: <coder>\n- step: 2\n  agents: *a\n"),
        want=PARSE,
        decided=False,
    ),
    case("duplicate keys", fenced("- step: 1\n  step: 2\n  agents: []\n"), want=PARSE, decided=False),
    case("too deep", fenced(SIMPLE), options=CheckOptions(max_depth=5), want=PARSE, decided=False),
    case("deep enough", fenced(SIMPLE), options=CheckOptions(max_depth=6)),
    case("two documents", fenced(SIMPLE + "---\n- step: 4\n"), want=PARSE, decided=False),
    case("bad yaml", fenced("- step: 1\n agents: [\n"), want=PARSE, decided=False),
    case("escapes", fenced('- step: 1\n  agents:\n    - agent: "<tester>\\n"\n'), want=SCHEMA, decided=False),
    case(
        "block scalar",
        fenced("- step: 1\n  agents:\n    - agent: |\n        <coder>\n"),
        want=LOGIC,
        decided=False,
    ),
    case("tags", fenced("- step: !!str 1\n  agents: []\n"), want=SCHEMA, decided=False),
    case(
        "multi-line plain",
        fenced("- step: 1\n  agents:\n    - agent: <coder>\n       <x>\n"),
        want=SCHEMA,
        decided=False,
    ),
    case(
        "non-ascii token", fenced("- step: 1\n  agents:\n    - agent: <códer>\n"), want=SCHEMA, decided=False
    ),
]


POOL = ROLES


def _token(role: str, n: int) -> str:
    return role if n == 0 else f"{role}_{n}"


@st.composite
def contexts(draw: st.DrawFn) -> Context:
    turn = draw(st.integers(0, 3))
    nodes = []
    for t in range(turn):
        for k in range(draw(st.integers(0, 3))):
            role = draw(st.sampled_from(POOL))
            nodes.append(Node(_token(role, draw(st.integers(0, 2))), role, k + 1, t))
    return Context(turn, tuple(nodes))


@st.composite
def plans(draw: st.DrawFn, context: Context) -> list[list[tuple[str, object]]]:
    """A plan as items of (key, value) pairs: mostly valid (refs to earlier agents, a last-step tester that refs
    a coder), with one random defect in about half of them."""
    known = [n.id for n in context.nodes]
    roles_known = {n.id: n.role for n in context.nodes}
    coder_seen = any(n.role == "coder" for n in context.nodes)
    n_steps = draw(st.integers(1, 4))
    step = draw(st.integers(-2, 3))
    items: list[list[tuple[str, object]]] = []
    for s in range(n_steps):
        last = s == n_steps - 1
        step += draw(st.integers(1, 3))
        ids: list[str] = []
        agents = []
        for _ in range(draw(st.integers(1, 3))):
            role = draw(st.sampled_from(POOL))
            if role == "debugger" and not coder_seen:
                role = "coder"
            aid = _token(role, draw(st.integers(0, 3)))
            if aid in ids:
                continue
            ids.append(aid)
            pick = (
                []
                if (s == 0 and not context.nodes)
                else draw(st.lists(st.sampled_from(known), unique=True, max_size=3))
                if known
                else []
            )
            agents.append([aid, role, pick])
        if last:
            coders = [i for i in known if roles_known[i] in ("coder", "debugger")]
            tid = "tester" if "tester" not in ids else "tester_9"
            refs = [draw(st.sampled_from(coders))] if coders else []
            agents.append([tid, "tester", refs])
            ids.append(tid)
        for aid, role, _ in agents:
            roles_known[aid] = role
            coder_seen = coder_seen or role == "coder"
        known = known + [i for i in ids if i not in known]
        items.append(
            [
                ("step", step),
                (
                    "agents",
                    [[("agent", f"<{a}>"), ("ref", [f"<{r}>" for r in refs])] for a, _, refs in agents],
                ),
            ]
        )
    if draw(st.booleans()):
        _defect(draw, items)
    return items


def _defect(draw: st.DrawFn, items: list[list[tuple[str, object]]]) -> None:
    i = draw(st.integers(0, len(items) - 1))
    item = items[i]
    agents = item[1][1]
    a = agents[draw(st.integers(0, len(agents) - 1))]
    kind = draw(st.integers(0, 13))
    if kind == 0:
        item[0] = ("step", -100)  # steps not increasing (or fine when first)
    elif kind == 1:
        agents.append(list(a))  # an id twice in a step
    elif kind == 2:
        a[1] = ("ref", a[1][1] + ["<planner_7>"])  # unknown ref
    elif kind == 3:
        a[0] = (
            "agent",
            draw(st.sampled_from(["<reviewer>", "coder", "<coder_>", "<Tester>", "<1x>", "<a_b_1>"])),
        )
    elif kind == 4:
        item[0] = ("step", draw(st.sampled_from(["one", None, [1], "'2'"])))
    elif kind == 5:
        item.append(("note", "x"))
    elif kind == 6:
        del item[draw(st.integers(0, 1))]
    elif kind == 7:
        item[1] = ("agents", draw(st.sampled_from([[], None, "<coder>", 3])))
    elif kind == 8:
        a[1] = ("ref", draw(st.sampled_from([None, "<coder>", [3], [None], ["<coder>", "<coder>"]])))
    elif kind == 9:
        del a[1]
    elif kind == 10:
        a.append(("role", "coder"))
    elif kind == 11:
        a[0] = ("agent", "<debugger>")
    elif kind == 12:
        items[-1][1][1].pop()  # drop the last-step tester
        if not items[-1][1][1]:
            items[-1][1] = ("agents", [[("agent", "<planner>"), ("ref", [])]])
    else:
        agents[agents.index(a)] = draw(st.sampled_from(["<coder>", 5]))


@st.composite
def layouts(draw: st.DrawFn) -> dict:
    return {
        "indent": draw(st.sampled_from([2, 4])),
        "indentless": draw(st.booleans()),
        "quote": draw(st.sampled_from(["", "", "'", '"'])),
        "block_refs": draw(st.booleans()),
        "empty_ref": draw(st.sampled_from(["[]", "null", "", "~", "omit"])),
        "comments": draw(st.booleans()),
        "blank": draw(st.booleans()),
        "swap": draw(st.booleans()),
        "wrap": draw(st.sampled_from(["yaml", "yaml", "YML", "plain", "bare"])),
        "margin": draw(st.sampled_from(["", "", "  ", "\t"])),
        "crlf": draw(st.booleans()),
        "prose": draw(st.sampled_from(["", "I will plan in steps.\nHere it is:\n", "Note: `-` lists.\n\n"])),
    }


def _scalar(v: object, quote: str) -> str:
    if v is None:
        return "null"
    if isinstance(v, str) and v.startswith("<") and quote:
        return f"{quote}{v}{quote}"
    return str(v)


def _value(key: str, v: object, lay: dict, pad: str, out: list[str]) -> None:
    if key == "agents" and isinstance(v, list) and v:
        out.append(f"{pad}{key}:")
        inner = pad if lay["indentless"] else pad + " " * lay["indent"]
        for agent in v:
            _mapping(agent, lay, inner, out)
    elif isinstance(v, list) and (lay["block_refs"] and v):
        out.append(f"{pad}{key}:" + ("  # refs" if lay["comments"] else ""))
        for x in v:
            out.append(f"{pad}{' ' * lay['indent']}- {_scalar(x, lay['quote'])}")
    elif isinstance(v, list):
        if not v and key == "ref" and lay["empty_ref"] != "[]":
            if lay["empty_ref"] != "omit":
                out.append(f"{pad}{key}: {lay['empty_ref']}".rstrip())
            return
        out.append(f"{pad}{key}: [{', '.join(_scalar(x, lay['quote']) for x in v)}]")
    else:
        out.append(f"{pad}{key}: {_scalar(v, lay['quote'])}" + (" # why" if lay["comments"] else ""))


def _mapping(pairs: object, lay: dict, pad: str, out: list[str]) -> None:
    """One sequence entry at column len(pad): a mapping whose first key follows the dash."""
    if not isinstance(pairs, list):
        out.append(f"{pad}- {_scalar(pairs, lay['quote'])}")
        return
    pairs = list(reversed(pairs)) if lay["swap"] else pairs
    lines: list[str] = []
    inner = pad + " " * lay["indent"]
    for k, v in pairs:
        _value(k, v, lay, inner, lines)
    if not lines:
        out.append(f"{pad}-")
        return
    lines[0] = pad + "-" + " " * (lay["indent"] - 1) + lines[0][len(inner) :]
    if lay["comments"]:
        out.append(f"{pad}# entry")
    out.extend(lines)
    if lay["blank"]:
        out.append("")


def render(items: list[list[tuple[str, object]]], lay: dict) -> str:
    out: list[str] = []
    for item in items:
        _mapping(item, lay, "", out)
    block = "\n".join(lay["margin"] + ln if ln else ln for ln in out) + "\n"
    if lay["wrap"] == "bare":
        text = lay["prose"] + block + ("Done." if lay["prose"] else "")
    elif lay["wrap"] == "plain":
        text = lay["prose"] + "```\n" + block + "```\n"
    else:
        text = lay["prose"] + f"```{lay['wrap']}\n" + block + "```\nReasoning after."
    return text.replace("\n", "\r\n") if lay["crlf"] else text


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[str], list[Context]]:
    """Plans in the canonical layouts with their contexts (some shared by several plans)."""
    texts, ctxs = [], []
    shared = draw(contexts())
    for _ in range(draw(st.integers(1, 6))):
        c = shared if draw(st.booleans()) else draw(contexts())
        texts.append(render(draw(plans(c)), draw(layouts())))
        ctxs.append(c)
    return texts, ctxs


OPTIONS = st.builds(
    CheckOptions,
    lenient=st.booleans(),
    strict_tester=st.booleans(),
    concise=st.booleans(),
    max_agents=st.sampled_from([3, 64]),
    max_refs=st.sampled_from([1, 32]),
)


MUTATION_CHARS = list(" -:#[]{},'\"\n\r\t<>_&*!|?~%@`0123456789abyn.") + [
    "é",
    "\x00",
    "  ",
    "- ",
    ": ",
    "\n  ",
    "```",
]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, Context]:
    c = draw(contexts())
    text = render(draw(plans(c)), draw(layouts()))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 3))
        pos = draw(st.integers(0, len(text)))
        if op == 0:
            text = text[:pos] + draw(st.sampled_from(MUTATION_CHARS)) + text[pos:]
        elif op == 1:
            text = text[:pos] + text[pos + draw(st.integers(1, 3)) :]
        elif op == 2:
            text = text[:pos] + draw(st.sampled_from(MUTATION_CHARS)) + text[pos + 1 :]
        else:
            text = text[:pos]
    return text, c


def _bomb(levels: int = 9) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for k in range(1, levels):
        prev, cur = chr(ord("a") + k - 1), chr(ord("a") + k)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "```yaml\n" + "\n".join(lines) + "\n```"


def _long_plan(steps: int) -> str:
    return fenced(plan_text(*[(s + 1, [("<coder>" if s % 2 else "<planner>", [])]) for s in range(steps)]))


HOSTILE = [
    ("alias bomb", _bomb(), None, PARSE),
    (
        "alias bomb in a plan",
        fenced("- step: 1\n  agents: &x [<coder>]\n- step: 2\n  agents: *x\n"),
        None,
        PARSE,
    ),
    ("deep flow nesting", "```yaml\n" + "[" * 10_000 + "]" * 10_000 + "\n```", None, PARSE),
    ("deep flow nesting, unclosed", "```yaml\n" + "[" * 10_000 + "\n```", None, PARSE),
    (
        "deep block nesting",
        "```yaml\n" + "".join(" " * i + "- \n" for i in range(2_000)) + "```",
        None,
        PARSE,
    ),
    ("deep inline entries", "```yaml\n" + "- " * 5_000 + "x\n```", None, PARSE),
    ("megabyte prose", "lorem ipsum dolor " * 60_000, None, NO_YAML),
    ("megabyte dashes", "- x\n" * 250_000, None, NO_YAML),
    ("megabyte fence", "```yaml\n" + "# filler\n" * 120_000 + "```", None, PARSE),
    ("megabyte unclosed fence", "```yaml\n" + "x" * 1_000_000, None, PARSE),
    ("megabyte prose then a plan", "reasoning " * 100_000 + "\n" + fenced(SIMPLE), None, OK),
    ("many fences", "```\n" * 200_000, None, NO_YAML),
    ("100k-line plan", _long_plan(25_000), None, PARSE),
    ("8k-line plan, raised byte limit", _long_plan(2_000), CheckOptions(max_bytes=10**7), SCHEMA),
    ("NUL bytes", fenced(SIMPLE.replace("step: 2", "step: 2\x00")), None, PARSE),
    ("NUL outside", "\x00" + fenced(SIMPLE) + "\x00", None, OK),
    ("lone surrogate", fenced(SIMPLE.replace("<coder>", "<coder\ud800>", 1)), None, PARSE),
    ("lone surrogate outside", "\udfff\n" + fenced(SIMPLE), None, OK),
    ("non-ascii prose", "计划如下 🚀\n" + fenced(SIMPLE) + "\n完成", None, OK),
    ("non-ascii role", fenced(SIMPLE.replace("<planner>", "<plannér>")), None, SCHEMA),
    ("non-ascii whitespace", fenced(SIMPLE.replace("  agents", "\u3000 agents", 1)), None, PARSE),
    ("bom", "\ufeff" + fenced(SIMPLE), None, OK),
    ("bom in the block", "```yaml\n\ufeff" + SIMPLE + "```", None, OK),
    ("huge int", fenced("- step: " + "9" * 5_000 + "\n  agents: []\n"), None, PARSE),
    ("long key", fenced("- " + "k" * 5_000 + ": 1\n"), None, PARSE),
    (
        "long token",
        fenced("- step: 1\n  agents:\n    - agent: <" + "c" * 100_000 + ">\n"),
        CheckOptions(max_bytes=10**6),
        SCHEMA,
    ),
]
