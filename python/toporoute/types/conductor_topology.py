"""AgentConductor's topology language: YAML plans of layered DAGs (methods/agentconductor.md §2.3, §3.1, §3.2, §9).

An orchestrator writes one YAML plan per turn::

    - step: 1
      agents:
        - agent: <planner>
          ref: []
    - step: 2
      agents:
        - agent: <coder>
          ref: [<planner>]
    - step: 3
      agents:
        - agent: <tester>
          ref: [<coder>]

:func:`check` extracts, parses, validates and decodes one plan; :func:`toporoute.ops.conductor_check` does the
same for a batch in the compiled core, with this module as its reference. The first failing check gives the
error, one of four classes (:data:`TAGS`):

1. ``[NO YAML FOUND]``: no YAML block (the last ```` ```yaml ```` fence; in lenient mode also a plain fence or
   an unfenced list whose first line is ``- step:``).
2. ``[YAML PARSE ERROR]``: not YAML, or outside the topology language's YAML: anchors and aliases, duplicate
   keys, nesting deeper than ``max_depth``, a block over ``max_bytes``, several documents, unknown tags.
3. ``[YAML SCHEMA INVALID]``: not a non-empty list of ``{step: int, agents: [{agent: <role>, ref: [...]}]}``
   (unknown keys, unknown roles, malformed tokens, more than ``max_agents`` agents or ``max_refs`` refs).
   A missing or null ``ref`` is ``[]``.
4. ``[YAML LOGIC INVALID]``: step numbers not increasing; an id twice in one step; a ref listed twice; refs in
   the first step of the first turn (L1); a ref that names no agent of an earlier step, in this turn or an
   earlier one (L2); no ``<tester>`` in the last step (L3); a last-step tester that refs no ``<coder>`` or
   ``<debugger>`` (L4); a ``<debugger>`` with no ``<coder>`` in an earlier step or turn (L5); in strict mode a
   tester outside the last step; with ``concise`` an agent outside the last step that feeds no later agent.

Tokens are ``<role>`` or ``<role_N>`` (an id for a repeated role); the agent's id is the token without the
brackets. A ref resolves to the most recent agent with that id in an earlier step (cross-turn when it lies in
an earlier turn). An id that also ran in the previous turn gets a self edge from it (its first node in the turn).
|E| counts the declared refs; ``depth`` is the number of nodes on the longest intra-turn path.
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError

__all__ = [
    "DEFAULT_OPTIONS",
    "LOGIC",
    "NO_YAML",
    "OK",
    "PARSE",
    "REQUIRED_ROLES",
    "ROLES",
    "ROLE_NAME",
    "SCHEMA",
    "TAGS",
    "CheckOptions",
    "Context",
    "Node",
    "TopologyBatch",
    "TopologyCheck",
    "TurnGraph",
    "assemble",
    "check",
    "check_batch",
    "extract_yaml",
    "render_yaml",
]

ROLES = ("planner", "searcher", "algorithmer", "coder", "debugger", "tester")
OK, NO_YAML, PARSE, SCHEMA, LOGIC = 0, 1, 2, 3, 4
TAGS = {
    NO_YAML: "[NO YAML FOUND]",
    PARSE: "[YAML PARSE ERROR]",
    SCHEMA: "[YAML SCHEMA INVALID]",
    LOGIC: "[YAML LOGIC INVALID]",
}
# What a pool must hold and what a role may be called (the service declares both in its OpenAPI document).
REQUIRED_ROLES = ("coder", "debugger", "tester")
ROLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9 -]*")
_TOKEN = re.compile(r"<([A-Za-z][A-Za-z0-9 -]*?)(?:_([0-9]+))?>")
_FENCE = re.compile(r"^[ \t]*```(.*)$")
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")
_STEP_LINE = re.compile(r"^-[ \t]*step[ \t]*:")


@dataclass(frozen=True)
class CheckOptions:
    """How plans are checked.

    Parameters
    ----------
    pool : tuple of str
        Role names (tokens are ``<name>``); must include coder, debugger and tester.
    lenient : bool
        Also accept a plain fence or an unfenced ``- step:`` list when there is no ```` ```yaml ```` fence.
    strict_tester : bool
        Reject testers outside the last step.
    concise : bool
        Reject agents outside the last step that feed no later agent of the turn (else they are warnings).
    max_bytes, max_depth, max_agents, max_refs : int
        Limits: bytes of the YAML block (UTF-8), YAML nesting, agents per turn, refs per agent.
    """

    pool: tuple[str, ...] = ROLES
    lenient: bool = True
    strict_tester: bool = False
    concise: bool = False
    max_bytes: int = 65536
    max_depth: int = 16
    max_agents: int = 64
    max_refs: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "pool", tuple(self.pool))
        for name in self.pool:
            if not isinstance(name, str) or not ROLE_NAME.fullmatch(name):
                raise InvalidArgumentError(
                    f"pool roles must be names of letters, digits, spaces and dashes starting with a letter; "
                    f"got {name!r}",
                    "pool",
                )
        if len(set(self.pool)) != len(self.pool):
            raise InvalidArgumentError(f"pool lists a role twice: {self.pool}", "pool")
        missing = [r for r in REQUIRED_ROLES if r not in self.pool]
        if missing:
            raise InvalidArgumentError(f"pool must include {', '.join(missing)}; got {self.pool}", "pool")
        for name in ("max_bytes", "max_depth", "max_agents", "max_refs"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1; got {getattr(self, name)!r}", name)


# Frozen, so one instance serves every call without options (building one runs the pool checks).
DEFAULT_OPTIONS = CheckOptions()


@dataclass(frozen=True)
class Node:
    """One agent of a decoded topology: its id (``coder_2``), role, step number and turn (0-based)."""

    id: str
    role: str
    step: int
    turn: int

    @property
    def token(self) -> str:
        return f"<{self.id}>"


@dataclass(frozen=True)
class Context:
    """What a turn's plan may refer to: the turn being written (0-based) and the agents of earlier turns' valid
    plans, in order (their global indices are their positions here)."""

    turn: int = 0
    nodes: tuple[Node, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if not isinstance(self.turn, int) or self.turn < 0:
            raise InvalidArgumentError(f"Context.turn must be an int >= 0; got {self.turn!r}", "context")
        for n in self.nodes:
            if not isinstance(n, Node) or n.turn >= self.turn:
                raise InvalidArgumentError(
                    f"Context.nodes must be Nodes of turns before {self.turn}; got {n!r}", "context"
                )

    def next(self, graph: TurnGraph | None = None) -> Context:
        """The context of the following turn, after ``graph`` ran (None: this turn had no valid plan)."""
        return Context(self.turn + 1, self.nodes + (graph.nodes if graph is not None else ()))


@dataclass(frozen=True)
class TurnGraph:
    """A decoded turn: a layered DAG whose nodes continue the context's global numbering.

    Attributes
    ----------
    turn : int
    base : int
        Global index of this turn's first node (= the number of context nodes).
    nodes : tuple of Node
        In document order; node ``i`` has global index ``base + i``.
    refs : tuple of tuple of int
        Per node, the global indices its declared refs resolve to, in the order written.
    cross : tuple of tuple of bool
        Per node and ref, whether the ref points into an earlier turn.
    self_src : tuple of int
        Per node, the global index of the previous turn's node with the same id (a self edge), or -1.
    layers : tuple of tuple of int
        Per step, the local indices of its nodes.
    steps : tuple of int
        The step numbers as written.
    depth : int
        Nodes on the longest intra-turn path (Theorem 1: ``depth <= len(steps)``).
    warnings : tuple of str
        Agents outside the last step that feed no later agent (when ``concise`` is off).
    """

    turn: int
    base: int
    nodes: tuple[Node, ...]
    refs: tuple[tuple[int, ...], ...]
    cross: tuple[tuple[bool, ...], ...]
    self_src: tuple[int, ...]
    layers: tuple[tuple[int, ...], ...]
    steps: tuple[int, ...]
    depth: int
    warnings: tuple[str, ...] = ()

    @property
    def n_nodes(self) -> int:
        """|V|."""
        return len(self.nodes)

    @property
    def n_edges(self) -> int:
        """|E|: declared refs, intra- and cross-turn (self edges excluded)."""
        return sum(len(r) for r in self.refs)

    @property
    def n_steps(self) -> int:
        """s."""
        return len(self.steps)

    def edges(self) -> list[tuple[int, int, str]]:
        """``(src, dst, kind)`` with global indices; kind ``intra``, ``cross`` or ``self``."""
        out: list[tuple[int, int, str]] = []
        for i, (refs, cross) in enumerate(zip(self.refs, self.cross)):
            out.extend((src, self.base + i, "cross" if c else "intra") for src, c in zip(refs, cross))
            if self.self_src[i] >= 0:
                out.append((self.self_src[i], self.base + i, "self"))
        return out


@dataclass(frozen=True)
class TopologyCheck:
    """The outcome of checking one plan: ``error`` (:data:`OK` or an error class), the message, the extracted
    YAML block (None when none was found) and the decoded graph (when valid)."""

    error: int
    message: str
    yaml: str | None
    graph: TurnGraph | None

    @property
    def ok(self) -> bool:
        return self.error == OK

    @property
    def tag(self) -> str | None:
        """The error class as the orchestrator sees it (``[YAML LOGIC INVALID]``), None when valid."""
        return TAGS.get(self.error)


@dataclass(frozen=True)
class TopologyBatch:
    """Many checked plans in CSR arrays (what :func:`toporoute.ops.conductor_check` returns).

    Attributes
    ----------
    error : uint8 (B,)
    nodes, edges, steps, depth : int64 (B,)
        |V|, |E|, s and depth of valid plans (0 otherwise): the inputs of ``ops.conductor_density``.
    node_off : int64 (B+1,)
        Item b's nodes are ``node_off[b]:node_off[b+1]``.
    node_role : int16 (N,)
        Index into ``options.pool``.
    node_step : int64 (N,)
    node_layer : int32 (N,)
        0-based step position within the turn.
    node_self : int64 (N,)
        Global index (the item's context first) of the self-edge source, or -1.
    ref_off : int64 (N+1,)
    ref_src : int64 (R,)
        Global index of each ref's target.
    ref_cross : bool (R,)
    node_id : tuple of str (N,)
    message, yaml, warnings : per item
    contexts : tuple of Context (B,)
    options : CheckOptions
    """

    ARRAYS: ClassVar[tuple[str, ...]] = (
        "error", "nodes", "edges", "steps", "depth", "node_off", "node_role", "node_step", "node_layer",
        "node_self", "ref_off", "ref_src", "ref_cross",
    )  # fmt: skip

    error: np.ndarray
    nodes: np.ndarray
    edges: np.ndarray
    steps: np.ndarray
    depth: np.ndarray
    node_off: np.ndarray
    node_role: np.ndarray
    node_step: np.ndarray
    node_layer: np.ndarray
    node_self: np.ndarray
    ref_off: np.ndarray
    ref_src: np.ndarray
    ref_cross: np.ndarray
    node_id: tuple[str, ...]
    message: tuple[str, ...]
    yaml: tuple[str | None, ...]
    warnings: tuple[tuple[str, ...], ...]
    contexts: tuple[Context, ...]
    options: CheckOptions = field(default_factory=CheckOptions)

    def __len__(self) -> int:
        return len(self.error)

    @property
    def ok(self) -> np.ndarray:
        valid: np.ndarray = self.error == OK
        return valid

    def item(self, b: int) -> TopologyCheck:
        """Item ``b`` as a :class:`TopologyCheck` (its graph rebuilt from the arrays)."""
        b = int(b)
        err = int(self.error[b])
        if err != OK:
            return TopologyCheck(err, self.message[b], self.yaml[b], None)
        ctx = self.contexts[b]
        lo, hi = int(self.node_off[b]), int(self.node_off[b + 1])
        pool = self.options.pool
        nodes = tuple(
            Node(self.node_id[k], pool[int(self.node_role[k])], int(self.node_step[k]), ctx.turn)
            for k in range(lo, hi)
        )
        refs = tuple(
            tuple(int(x) for x in self.ref_src[self.ref_off[k] : self.ref_off[k + 1]]) for k in range(lo, hi)
        )
        cross = tuple(
            tuple(bool(x) for x in self.ref_cross[self.ref_off[k] : self.ref_off[k + 1]])
            for k in range(lo, hi)
        )
        layer = self.node_layer[lo:hi]
        n_layers = int(layer.max()) + 1 if hi > lo else 0
        layers = tuple(tuple(int(i) for i in np.flatnonzero(layer == li)) for li in range(n_layers))
        steps = tuple(int(self.node_step[lo + ls[0]]) for ls in layers)
        graph = TurnGraph(
            ctx.turn,
            len(ctx.nodes),
            nodes,
            refs,
            cross,
            tuple(int(x) for x in self.node_self[lo:hi]),
            layers,
            steps,
            int(self.depth[b]),
            self.warnings[b],
        )
        return TopologyCheck(OK, "", self.yaml[b], graph)

    def checks(self) -> list[TopologyCheck]:
        return [self.item(b) for b in range(len(self))]


class _Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------------------------------------------- extraction


def _dedent(lines: list[str]) -> str:
    return textwrap.dedent("\n".join(lines))


def extract_yaml(text: str, *, lenient: bool = True) -> str | None:
    """The plan's YAML block in ``text``, dedented, or None.

    A line starting (after spaces and tabs) with three backticks opens a fenced block, which the next line of
    only backticks and blanks closes. The last ```` ```yaml ```` (or ```` ```yml ````, any case) block wins; an
    unclosed last fence runs to the end of the text; blocks of other languages are skipped. Lenient mode, when there is none: the last plain ```` ``` ```` fence whose first non-blank line starts
    with ``- step:``, else the first unfenced run of lines from a line starting ``- step:`` while lines are
    blank, indented, comments (``#``) or list items (``-``). Lines are split on ``\\n`` and a trailing ``\\r``
    is dropped.
    """
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]
    yaml_blocks: list[list[str]] = []
    plain_blocks: list[list[str]] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not _CLOSE.match(lines[j]):
                j += 1
            info = m.group(1).strip(" \t")
            if not info:
                plain_blocks.append(lines[i + 1 : j])
            elif info.isascii() and info.lower() in ("yaml", "yml"):
                yaml_blocks.append(lines[i + 1 : j])
            i = j + 1  # another language's block (```python) is skipped whole
            continue
        i += 1
    if yaml_blocks:
        return _dedent(yaml_blocks[-1])
    if not lenient:
        return None
    for block in reversed(plain_blocks):
        body = _dedent(block)
        first = next((ln for ln in body.split("\n") if ln.strip()), "")
        if _STEP_LINE.match(first):
            return body
    for i, line in enumerate(lines):
        if _STEP_LINE.match(line):
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or lines[j][0] in " \t#-"):
                j += 1
            return _dedent(lines[i:j])
    return None


# ------------------------------------------------------------------------------------------------------- parsing


@functools.lru_cache(maxsize=8)
def _loader(max_depth: int) -> Any:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader without anchors, aliases or duplicate keys, and with a nesting limit."""

        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise yaml.composer.ComposerError(
                    None, None, "anchors and aliases are not allowed", event.start_mark
                )
            self.depth += 1
            if self.depth > max_depth:
                raise yaml.composer.ComposerError(
                    None, None, f"nesting deeper than {max_depth} levels", event.start_mark
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:
                    dup = False  # unhashable keys: the base class reports them
                if dup:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {_show(key)}", key_node.start_mark
                    )
            return super().construct_mapping(node, deep)

    return Loader


def _parse(block: str, options: CheckOptions) -> Any:
    import yaml

    try:
        return yaml.load(block, Loader=_loader(options.max_depth))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise _Fail(PARSE, f"{exc.problem or exc.context or 'invalid YAML'}{where}") from None
    except yaml.YAMLError as exc:
        raise _Fail(PARSE, str(exc).splitlines()[0] if str(exc) else "invalid YAML") from None
    except RecursionError:
        raise _Fail(PARSE, f"nesting deeper than {options.max_depth} levels") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4300 digits
        raise _Fail(PARSE, f"unreadable value: {str(exc).splitlines()[0][:80]}") from None


# -------------------------------------------------------------------------------------------------------- schema


def _q(value: str) -> str:
    """A string as messages quote it: at most 40 characters (code points), then ``...``."""
    return "'" + (value[:40] + "..." if len(value) > 40 else value) + "'"


def _show(value: Any) -> str:
    return _q(value) if isinstance(value, str) else _kind(value)


# What messages call a YAML value of each type; bool comes before int, its base class.
_KINDS: tuple[tuple[type, str], ...] = (
    (type(None), "null"),
    (bool, "a bool"),
    (int, "an int"),
    (float, "a float"),
    (str, "a string"),
    (list, "a list"),
    (dict, "a mapping"),
)


def _kind(value: Any) -> str:
    return next((name for cls, name in _KINDS if isinstance(value, cls)), f"a {type(value).__name__}")


@dataclass(frozen=True)
class _Agent:
    id: str
    role: str
    refs: tuple[str, ...]  # ids


@dataclass(frozen=True)
class _Step:
    step: int
    agents: tuple[_Agent, ...]


def _entry(item: Any, where: str, keys: tuple[str, str]) -> Any:
    """The value of ``keys[0]`` in ``item``, a plan entry that must be a mapping of ``keys[0]`` (required) and
    ``keys[1]``, and nothing else."""
    if not isinstance(item, dict):
        raise _Fail(SCHEMA, f"{where} must be a mapping with '{keys[0]}' and '{keys[1]}'; got {_kind(item)}")
    for key in item:
        if key not in keys:
            raise _Fail(SCHEMA, f"{where} has an unknown key {_show(key)} (allowed: {', '.join(keys)})")
    if keys[0] not in item:
        raise _Fail(SCHEMA, f"{where} has no '{keys[0]}'")
    return item[keys[0]]


def _token(value: str, pool: tuple[str, ...], where: str, what: str) -> tuple[str, str]:
    m = _TOKEN.fullmatch(value)
    if not m:
        raise _Fail(
            SCHEMA, f"{where}: {what} {_q(value)} is not an agent token like '<coder>' or '<coder_2>'"
        )
    role = m.group(1)
    if role not in pool:
        raise _Fail(
            SCHEMA, f"{where}: {what} {_q(value)} names an unknown role (the pool: {', '.join(pool)})"
        )
    return value[1:-1], role


def _schema(doc: Any, options: CheckOptions) -> list[_Step]:
    if not isinstance(doc, list) or not doc:
        got = "an empty list" if isinstance(doc, list) else _kind(doc)
        raise _Fail(SCHEMA, f"the plan must be a non-empty list of steps; got {got}")
    pool = options.pool
    steps: list[_Step] = []
    count = 0
    for i, item in enumerate(doc):
        where = f"list item {i + 1}"
        step = _entry(item, where, ("step", "agents"))
        if not isinstance(step, int) or isinstance(step, bool):
            raise _Fail(SCHEMA, f"{where}: step must be an integer; got {_kind(step)}")
        if not -(2**63) <= step < 2**63:
            raise _Fail(SCHEMA, f"{where}: step must fit in 64 bits; got one of {len(str(abs(step)))} digits")
        where = f"step {step}"
        agents = item.get("agents")
        if "agents" not in item:
            raise _Fail(SCHEMA, f"{where} has no 'agents'")
        if not isinstance(agents, list) or not agents:
            got = "an empty list" if isinstance(agents, list) else _kind(agents)
            raise _Fail(SCHEMA, f"{where}: agents must be a non-empty list; got {got}")
        parsed = []
        for j, a in enumerate(agents):
            count += 1
            if count > options.max_agents:
                raise _Fail(SCHEMA, f"the plan has more than {options.max_agents} agents")
            w = f"{where}, agent {j + 1}"
            tok = _entry(a, w, ("agent", "ref"))
            if not isinstance(tok, str):
                raise _Fail(SCHEMA, f"{w}: agent must be a token like '<coder>'; got {_kind(tok)}")
            aid, role = _token(tok, pool, w, "agent")
            refs = a.get("ref")
            if refs is None:
                refs = []
            if not isinstance(refs, list):
                raise _Fail(SCHEMA, f"{w}: ref must be a list of agent tokens; got {_kind(refs)}")
            if len(refs) > options.max_refs:
                raise _Fail(SCHEMA, f"{w}: {len(refs)} refs; the limit is {options.max_refs}")
            ids = []
            for k, r in enumerate(refs):
                if not isinstance(r, str):
                    raise _Fail(SCHEMA, f"{w}: ref {k + 1} must be a token like '<planner>'; got {_kind(r)}")
                ids.append(_token(r, pool, w, f"ref {k + 1}")[0])
            parsed.append(_Agent(aid, role, tuple(ids)))
        steps.append(_Step(step, tuple(parsed)))
    return steps


# --------------------------------------------------------------------------------------------- logic and decode


def _decode(steps: list[_Step], context: Context, options: CheckOptions) -> TurnGraph:
    base = len(context.nodes)
    latest: dict[str, int] = {}
    for g, n in enumerate(context.nodes):
        latest[n.id] = g
    previous_turn = {n.id: g for g, n in enumerate(context.nodes) if n.turn == context.turn - 1}
    roles = {g: n.role for g, n in enumerate(context.nodes)}
    seen_coder = any(n.role == "coder" for n in context.nodes)
    nodes: list[Node] = []
    refs: list[tuple[int, ...]] = []
    self_src: list[int] = []
    layers: list[tuple[int, ...]] = []
    depth_of: list[int] = []
    first_of_id: set[str] = set()
    prev_step: int | None = None
    for si, st in enumerate(steps):
        if prev_step is not None and st.step <= prev_step:
            raise _Fail(LOGIC, f"step {st.step} follows step {prev_step}; step numbers must increase")
        prev_step = st.step
        ids_here: set[str] = set()
        layer = []
        for a in st.agents:
            tok = f"<{a.id}>"
            if a.id in ids_here:
                raise _Fail(
                    LOGIC,
                    f"step {st.step}: {tok} appears twice in one step (repeated roles need ids like <coder_2>)",
                )
            ids_here.add(a.id)
            if a.role == "debugger" and not seen_coder:
                raise _Fail(LOGIC, f"step {st.step}: {tok} needs a <coder> in an earlier step (L5)")
            if si == 0 and context.turn == 0 and a.refs:
                raise _Fail(
                    LOGIC,
                    f"step {st.step}: {tok} refs <{a.refs[0]}>, but first-step agents take no refs (L1)",
                )
            resolved = []
            for r in a.refs:
                src = latest.get(r)
                if src is None:
                    raise _Fail(
                        LOGIC, f"step {st.step}: {tok} refs <{r}>, which is no agent of an earlier step (L2)"
                    )
                if src in resolved:
                    raise _Fail(LOGIC, f"step {st.step}: {tok} refs <{r}> twice")
                resolved.append(src)
            g = base + len(nodes)
            nodes.append(Node(a.id, a.role, st.step, context.turn))
            roles[g] = a.role
            refs.append(tuple(resolved))
            if a.id in previous_turn and a.id not in first_of_id:
                self_src.append(previous_turn[a.id])
            else:
                self_src.append(-1)
            first_of_id.add(a.id)
            depth_of.append(1 + max((depth_of[s - base] for s in resolved if s >= base), default=0))
            layer.append(g - base)
        for local in layer:
            latest[nodes[local].id] = base + local
            seen_coder = seen_coder or nodes[local].role == "coder"
        layers.append(tuple(layer))
    last = steps[-1].step
    testers = [i for i in layers[-1] if nodes[i].role == "tester"]
    if not testers:
        raise _Fail(LOGIC, f"the last step (step {last}) has no <tester> (L3)")
    for i in testers:
        if not any(roles[s] in ("coder", "debugger") for s in refs[i]):
            raise _Fail(LOGIC, f"step {last}: {nodes[i].token} must ref a <coder> or <debugger> (L4)")
    if options.strict_tester:
        for members in layers[:-1]:
            for i in members:
                if nodes[i].role == "tester":
                    raise _Fail(
                        LOGIC, f"step {nodes[i].step}: {nodes[i].token} outside the last step (strict mode)"
                    )
    fed = {s - base for r in refs for s in r if s >= base}
    warnings = []
    for members in layers[:-1]:
        for i in members:
            if i not in fed:
                msg = f"step {nodes[i].step}: {nodes[i].token} feeds no later agent"
                if options.concise:
                    raise _Fail(LOGIC, msg)
                warnings.append(msg)
    cross = tuple(tuple(s < base for s in r) for r in refs)
    return TurnGraph(
        context.turn,
        base,
        tuple(nodes),
        tuple(refs),
        cross,
        tuple(self_src),
        tuple(layers),
        tuple(st.step for st in steps),
        max(depth_of),
        tuple(warnings),
    )


def check(text: str, context: Context | None = None, options: CheckOptions | None = None) -> TopologyCheck:
    """Extracts, parses, validates and decodes one plan (the reference of ``ops.conductor_check``).

    Parameters
    ----------
    text : str
        The orchestrator's whole output (reasoning around the YAML is allowed).
    context : Context, optional
        The turn and the earlier turns' agents (default: the first turn).
    options : CheckOptions, optional
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a string; got {type(text).__name__}", "text")
    context = context or Context()
    options = options or DEFAULT_OPTIONS
    block = extract_yaml(text, lenient=options.lenient)
    if block is None:
        return TopologyCheck(NO_YAML, "no ```yaml block in the output", None, None)
    try:
        size = len(block.encode("utf-8", "surrogatepass"))
        if size > options.max_bytes:
            raise _Fail(PARSE, f"the YAML block is {size} bytes; the limit is {options.max_bytes}")
        steps = _schema(_parse(block, options), options)
        graph = _decode(steps, context, options)
    except _Fail as f:
        return TopologyCheck(f.code, f.message, block, None)
    return TopologyCheck(OK, "", block, graph)


def check_batch(texts: Sequence[str], contexts: Sequence[Context], options: CheckOptions) -> TopologyBatch:
    """:func:`check` over a batch, as a :class:`TopologyBatch` (the reference backend)."""
    return assemble([check(t, c, options) for t, c in zip(texts, contexts)], contexts, options)


def assemble(
    items: Sequence[TopologyCheck], contexts: Sequence[Context], options: CheckOptions
) -> TopologyBatch:
    """Packs checked plans into a :class:`TopologyBatch`."""
    role_index = {r: i for i, r in enumerate(options.pool)}
    b = len(items)
    error = np.zeros(b, np.uint8)
    stats = np.zeros((4, b), np.int64)
    node_off = np.zeros(b + 1, np.int64)
    role: list[int] = []
    step: list[int] = []
    layer: list[int] = []
    self_src: list[int] = []
    ref_off: list[int] = [0]
    ref_src: list[int] = []
    ref_cross: list[bool] = []
    ids: list[str] = []
    for x, item in enumerate(items):
        error[x] = item.error
        g = item.graph
        if g is not None:
            stats[:, x] = (g.n_nodes, g.n_edges, g.n_steps, g.depth)
            pos = {i: li for li, ls in enumerate(g.layers) for i in ls}
            for i, n in enumerate(g.nodes):
                role.append(role_index[n.role])
                step.append(n.step)
                layer.append(pos[i])
                self_src.append(g.self_src[i])
                ids.append(n.id)
                ref_src.extend(g.refs[i])
                ref_cross.extend(g.cross[i])
                ref_off.append(len(ref_src))
        node_off[x + 1] = len(role)
    return TopologyBatch(
        error,
        stats[0],
        stats[1],
        stats[2],
        stats[3],
        node_off,
        np.asarray(role, np.int16),
        np.asarray(step, np.int64),
        np.asarray(layer, np.int32),
        np.asarray(self_src, np.int64),
        np.asarray(ref_off, np.int64),
        np.asarray(ref_src, np.int64),
        np.asarray(ref_cross, np.bool_),
        tuple(ids),
        tuple(i.message for i in items),
        tuple(i.yaml for i in items),
        tuple(i.graph.warnings if i.graph is not None else () for i in items),
        tuple(contexts),
        options,
    )


def render_yaml(graph: TurnGraph, context: Context | None = None) -> str:
    """A decoded turn written back in the canonical layout (refs as the tokens of their targets)."""
    context = context or Context(graph.turn)
    everyone = list(context.nodes) + list(graph.nodes)
    out = []
    for li, layer in enumerate(graph.layers):
        out.append(f"- step: {graph.steps[li]}\n  agents:")
        for i in layer:
            refs = ", ".join(everyone[s].token if s < len(everyone) else f"<#{s}>" for s in graph.refs[i])
            out.append(f"    - agent: {graph.nodes[i].token}\n      ref: [{refs}]")
    return "\n".join(out) + "\n"
