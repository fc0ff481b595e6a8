"""Inputs of the benchmarks beyond the ops' own samples (:mod:`toporoute.backends.samples`: arrays), shared by
``toporoute bench`` and the pytest suites under ``bench/``: text. Every builder is a pure function of its sizes
and a seed, so both time the same data: AgentConductor's YAML plans with a share of schema and logic errors,
DyTopo's need/offer descriptors, the research-code routing the Router is compared with, and ``route`` in plain
numpy, vectorised over the batch (one of ``toporoute bench route``'s alternatives).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "AGENT_ROLES",
    "DESCRIPTOR_THINGS",
    "batched_numpy_route",
    "conductor_plan",
    "conductor_texts",
    "descriptors",
    "mixed_descriptors",
    "numpy_route",
]


def conductor_plan(rng: np.random.Generator) -> str:
    """One orchestrator output: reasoning around a ```` ```yaml ```` plan of 2 to 5 steps in the canonical
    layout, valid or (one time in five) with a schema or logic error (a non-integer step, an unknown role, a
    missing tester, an unknown ref, a comment line)."""
    n_steps = int(rng.integers(2, 6))
    first: list[tuple[str, list[str]]] = [("planner", [])]
    if rng.random() < 0.5:
        first.append(("searcher", []))
    steps = [first]
    for s in range(1, n_steps - 1):
        prev = [a for a, _ in steps[-1]]
        agents = [("coder" if s == 1 else "coder_2" if rng.random() < 0.5 else "debugger", prev)]
        if rng.random() < 0.4:
            agents.append(("algorithmer", prev))
        steps.append(agents)
    if n_steps == 2:
        steps[0].append(("coder", []))
    last_coder = next(
        a for agents in reversed(steps) for a, _ in agents if a.startswith(("coder", "debugger"))
    )
    steps.append([("tester", [last_coder])])
    defect = int(rng.integers(0, 5)) if rng.random() < 0.2 else -1
    lines = []
    for s, agents in enumerate(steps):
        lines.append(f"- step: {'two' if defect == 0 and s == 1 else s + 1}")
        lines.append("  agents:")
        for a, refs in agents:
            tok = "reviewer" if defect == 1 and s == 0 else a
            if defect == 2 and s == len(steps) - 1:
                tok = "coder_3"
            lines.append(f"    - agent: <{tok}>")
            refs = refs + ["planner_9"] if defect == 3 and s == len(steps) - 1 else refs
            lines.append(f"      ref: [{', '.join(f'<{r}>' for r in refs)}]")
    if defect == 4:
        lines.insert(2, "    # the first agents")
    body = "\n".join(lines)
    return (
        "I split the task into planning, coding and testing.\n```yaml\n"
        + body
        + "\n```\nEach step only reads earlier steps."
    )


def conductor_texts(B: int, seed: int | None = None) -> list[str]:
    """``B`` orchestrator outputs (:func:`conductor_plan`), about 80% valid; the seed defaults to ``B``."""
    rng = np.random.default_rng(B if seed is None else seed)
    return [conductor_plan(rng) for _ in range(B)]


AGENT_ROLES = ("developer", "researcher", "tester", "designer", "manager")
DESCRIPTOR_THINGS = (
    "the problem statement and its constraints",
    "a draft implementation of the function",
    "unit tests for the edge cases",
    "a review of the interface design",
    "the list of failing test cases",
    "an analysis of the time complexity",
    "the expected input and output format",
    "a step-by-step plan for the algorithm",
)


def descriptors(episodes: int, agents: int = 5, seed: int = 0) -> tuple[list[list[str]], list[list[str]]]:
    """DyTopo-style one-sentence needs and offers, ``[episode][agent]``, distinct across agents and episodes."""
    rng = np.random.default_rng(seed)
    roles, things = AGENT_ROLES, DESCRIPTOR_THINGS
    needs, offers = [], []
    for e in range(episodes):
        needs.append(
            [
                f"I need {things[rng.integers(8)]} from the {roles[rng.integers(5)]} for task {e}"
                for _ in range(agents)
            ]
        )
        offers.append(
            [
                f"I provide {things[rng.integers(8)]} as the {roles[a % len(roles)]} (case {e}.{a})"
                for a in range(agents)
            ]
        )
    return needs, offers


def mixed_descriptors(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct descriptors of one to four sentences (about 10 to 70 word pieces), shuffled: the mixed
    lengths agents write, which length bucketing has to pad well."""
    rng = np.random.default_rng(seed)
    texts = []
    for i in range(n):
        sentences = [
            f"I {('need', 'provide')[rng.integers(2)]} {DESCRIPTOR_THINGS[rng.integers(8)]} "
            f"from the {AGENT_ROLES[rng.integers(5)]}"
            for _ in range(int(rng.integers(1, 5)))
        ]
        texts.append(". ".join(sentences) + f" (item {i}).")
    return texts


def numpy_route(q: np.ndarray, k: np.ndarray, tau: float, k_in: int) -> np.ndarray:
    """Research-code routing of one episode (the usual alternative to the Router): similarity matrix,
    threshold, top-``k_in`` providers per recipient. ``q``, ``k``: ``(N, D)`` unit rows; returns ``(N, N)``
    bool ``adj[src, dst]``."""
    s = k @ q.T  # s[j, i]: provider j's offer against recipient i's need
    np.fill_diagonal(s, -np.inf)
    adj = np.zeros(s.shape, dtype=bool)
    for i in range(s.shape[1]):
        best = np.argsort(-s[:, i], kind="stable")[:k_in]
        adj[best[s[best, i] > tau], i] = True
    return adj


def batched_numpy_route(
    q: np.ndarray, k: np.ndarray, tau: float, k_in: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``route`` in numpy the way a careful user would write it (``toporoute bench route``'s numpy
    alternative): ``(scores, adjacency, inbox, in_degree)`` for ``(B, N, D)`` float32 ``q`` and ``k``, the
    shapes and conventions of :func:`toporoute.backends.reference.route` (``scores[b, j, i]`` provider j's offer
    against recipient i's need, ``adjacency[b, src, dst]``, ``inbox`` ``(B, N, K)`` padded with -1).

    Vectorised over the batch in float32: norms, one batched product ``k @ q^T``, threshold, no self-edges,
    then ``argpartition`` for each recipient's ``k_in`` best providers (all when ``k_in <= 0``), sorted by
    score. Matches the reference on inputs without exact score ties and without zero rows."""
    B, N, _ = q.shape
    K = k_in if k_in > 0 else N - 1
    width = min(K, N)
    kn = np.sqrt(np.einsum("bnd,bnd->bn", k, k))
    qn = np.sqrt(np.einsum("bnd,bnd->bn", q, q))
    scores = np.matmul(k, q.transpose(0, 2, 1))  # [b, j, i]
    scores /= kn[:, :, None] * qn[:, None, :]
    np.clip(scores, -1.0, 1.0, out=scores)
    cand = scores > np.float32(tau)
    cand &= ~np.eye(N, dtype=bool)
    ranked = np.where(cand, scores, np.float32(-np.inf))  # [b, j, i]
    if width < N:  # the best `width` providers per recipient, unordered, then ordered
        top = np.argpartition(-ranked, width - 1, axis=1)[:, :width, :]
        order = np.argsort(-np.take_along_axis(ranked, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
    else:
        top = np.argsort(-ranked, axis=1, kind="stable")  # [b, rank, i]
    kept = np.take_along_axis(ranked, top, axis=1) > -np.inf
    adjacency = np.zeros((B, N, N), dtype=bool)
    np.put_along_axis(adjacency, top, kept, axis=1)
    inbox = np.full((B, N, K), -1, dtype=np.int32)
    inbox[:, :, :width] = np.where(kept, top, -1).transpose(0, 2, 1)
    return scores, adjacency, inbox, kept.sum(axis=1, dtype=np.int32)
