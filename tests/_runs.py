"""Fabricates run directories in the format documented in :mod:`toporoute.trace`, for the report tests.

:func:`make_run` writes three methods over the same tasks:

* ``dytopo``: four workers, scored routes, a cycle with a removed back edge, a round with no edges, an episode
  that errored (its trace ends in a torn line), an episode still in flight (a trace, no record) and a
  half-written episode file; no ``summary.json`` (the run did not finish).
* ``chain``: the same workers on a fixed chain, ``scores`` null, with a ``summary.json``.
* ``single``: one worker, one call, no edges, no manager.

Model text carries HTML/script payloads (``PAYLOADS``); the report must show them as text only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WORKERS = ["Developer", "Researcher", "Tester", "Designer"]
ROLES = ["Code Developer", "Research Analyst", "Test Engineer", "Algorithm Designer"]

# Each payload would run script or add an element if it reached the page as markup; what runs marks <html>
# with data-pwned (visible in a DOM dump) and sets window.__pwned.
_MARK = "window.__pwned=1;document.documentElement.setAttribute('data-pwned','1')"
XSS_SCRIPT = f"<script>alert(1)</script><script>{_MARK}</script>"
XSS_CLOSE = f"</script><script>{_MARK}</script><b id=pwned-b>bold</b>"
XSS_IMG = f'<img id=pwned-img src=x onerror="{_MARK}">'
PAYLOADS = (XSS_SCRIPT, XSS_CLOSE, XSS_IMG)

# (episode, round) -> (edges as (src, dst, score), removed back edges as (src, dst))
DYTOPO_ROUNDS: dict[str, list[tuple[list[tuple[str, str, float]], list[tuple[str, str]]]]] = {
    "HumanEval-0": [
        (
            [("Developer", "Tester", 0.77), ("Researcher", "Developer", 0.61), ("Tester", "Developer", 0.55)],
            [("Tester", "Developer")],
        ),
        ([], []),
        ([("Designer", "Developer", 0.70), ("Researcher", "Tester", 0.66)], []),
    ],
    "HumanEval-1": [
        ([("Developer", "Tester", 0.80)], []),
        (
            [("Tester", "Developer", 0.50), ("Developer", "Tester", 0.52), ("Designer", "Tester", 0.41)],
            [("Tester", "Developer")],
        ),
    ],
    "HumanEval-10": [
        ([("Researcher", "Developer", 0.90)], []),
        ([("Developer", "Designer", 0.45), ("Designer", "Researcher", 0.44)], []),
    ],
    "HumanEval-2": [([("Developer", "Researcher", 0.58)], [])],  # errored; its round 1 is torn
    "HumanEval-3": [([("Tester", "Designer", 0.62)], [])],  # in flight: no episode record yet
}
CHAIN_EDGES = [("Developer", "Researcher"), ("Researcher", "Tester"), ("Tester", "Designer")]

# episode -> (passed, status, rounds, halted, prompt, completion, calls, wall_s, llm_s, routing_s)
DYTOPO_EPISODES = {
    "HumanEval-0": (True, "passed", 3, True, 1200, 300, 12, 10.0, 8.0, 0.5),
    "HumanEval-1": (False, "failed", 2, False, 800, 200, 8, 6.0, 5.0, 0.25),
    "HumanEval-10": (True, "passed", 2, True, 1000, 100, 9, 4.0, 3.0, 0.25),
}
CHAIN_EPISODES = {
    "HumanEval-0": (True, "passed", 2, True, 900, 100, 8, 5.0, 4.5, 0.0),
    "HumanEval-1": (False, "failed", 2, False, 700, 300, 8, 7.0, 6.0, 0.0),
}
SINGLE_EPISODES = {
    "HumanEval-0": (True, "passed", 1, True, 300, 100, 1, 2.0, 1.9, 0.0),
    "HumanEval-1": (True, "passed", 1, True, 300, 100, 1, 3.0, 2.8, 0.0),
}
TASKS = {
    "HumanEval-0": "HumanEval/0",
    "HumanEval-1": "HumanEval/1",
    "HumanEval-2": "HumanEval/2",
    "HumanEval-3": "HumanEval/3",
    "HumanEval-10": "HumanEval/10",
}


def make_run(root: Path) -> Path:
    """Writes the three-method run directory under ``root`` and returns it."""
    root.mkdir(parents=True, exist_ok=True)
    _dytopo(root / "dytopo")
    _chain(root / "chain")
    _single(root / "single")
    return root


def _config(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": method,
        "params": params,
        "tasks": "humaneval",
        "engine": "vllm",
        "model": "HuggingFaceTB/SmolLM2-360M-Instruct",
        "seed": 0,
        "versions": {"toporoute": "0.1.0", "vllm": "0.32.0", "python": "3.11.2"},
        "started": "2025-03-01T12:00:00+00:00",
    }


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1), encoding="utf-8")


def _episode(method: str, episode: str, kind: str, spec: tuple) -> dict[str, Any]:
    passed, status, rounds, halted, prompt, completion, calls, wall, llm, routing = spec
    return {
        "episode": episode,
        "status": "ok",
        "error": None,
        "wall_s": wall,
        "record": {
            "method": method,
            "task": TASKS[episode],
            "kind": kind,
            "rounds": rounds,
            "halted": halted,
            "answer": "def f(x):\n    return x < 1 and '<script>alert(1)</script>'",
            "score": {
                "passed": passed,
                "status": status,
                "detail": "2/2 tests" if passed else "AssertionError",
            },
            "llm_s": llm,
            "routing_s": routing,
            "eval_s": 0.1,
        },
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "calls": calls,
            "failed_calls": 0,
            "reprompts": 0,
            "llm_latency_s": llm,
            "messages_routed": 3,
            "tokens_routed": 120,
        },
        "ledger": {"calls": [], "edges": []},
    }


def _round(
    method: str,
    episode: str,
    r: int,
    agents: list[str],
    roles: list[str],
    edges: list[tuple[str, str, float | None]],
    removed: list[tuple[str, str]],
    *,
    scored: bool,
    manager: bool,
    prev: set[tuple[str, str]] | None,
) -> dict[str, Any]:
    n = len(agents)
    idx = {a: i for i, a in enumerate(agents)}
    scores = None
    if scored:
        scores = [[0.0 if i == j else round(0.1 + 0.01 * (i + j), 3) for j in range(n)] for i in range(n)]
        for s, d, score in edges:
            scores[idx[s]][idx[d]] = score
    pairs = {(s, d) for s, d, _ in edges}
    kept = pairs - set(removed)
    # longest-path levels over the kept edges, then sigma by (level, index)
    levels = [0] * n
    for _ in range(n):
        for s, d in kept:
            levels[idx[d]] = max(levels[idx[d]], levels[idx[s]] + 1)
    order = sorted(agents, key=lambda a: (levels[idx[a]], idx[a]))
    inbox: dict[str, list[str]] = {}
    for s, d, _ in sorted(edges, key=lambda e: -(e[2] or 0.0)):
        inbox.setdefault(d, []).append(s)
    messages = {}
    for i, a in enumerate(agents):
        public = f"{a} reports progress on round {r}: the helper handles x < 0 && x > 10."
        if (episode, r, a) == ("HumanEval-0", 0, "Developer"):
            public = f"Here is my code. {XSS_SCRIPT} done"
        private = f"private notes of {a} " + "lorem ipsum " * (300 if (r, i) == (0, 1) else 3)
        messages[a] = {
            "public": public,
            "private": private,
            "answer": "return x" if i == 0 else None,
            "parse_error": "missing field 'answer'" if (r, i) == (1, 2) else None,
        }
    usage_agents = {
        a: {
            "prompt_tokens": 100 + 10 * i,
            "completion_tokens": 20 + i,
            "latency_s": 0.5 + 0.1 * i,
            "attempts": 1,
            "ok": True,
        }
        for i, a in enumerate(agents)
    }
    if manager:
        usage_agents["Manager"] = {
            "prompt_tokens": 150,
            "completion_tokens": 30,
            "latency_s": 0.4,
            "attempts": 1,
            "ok": True,
        }
    reciprocal = sum((d, s) in pairs for s, d in pairs)
    jaccard = None
    if prev is not None:
        union = pairs | prev
        jaccard = len(pairs & prev) / len(union) if union else 1.0
    return {
        "v": 1,
        "method": method,
        "episode": episode,
        "task": TASKS[episode],
        "round": r,
        "goal": f"Round {r}: write and test the function" + (f" {XSS_CLOSE}" if r == 0 else ""),
        "agents": agents,
        "roles": roles,
        "descriptors": {
            "query": [
                f"{a} needs a review of the edge cases" + (f" {XSS_IMG}" if a == "Tester" else "")
                for a in agents
            ],
            "key": [f"{a} offers a tested draft" for a in agents],
        },
        "scores": scores,
        "edges": [{"src": s, "dst": d, "score": score} for s, d, score in edges],
        "order": order,
        "levels": levels,
        "removed": [{"src": s, "dst": d} for s, d in removed],
        "is_dag": not removed,
        "inbox": inbox,
        "messages": messages,
        "usage": {"agents": usage_agents, "edges": [{"src": s, "dst": d, "tokens": 40} for s, d, _ in edges]},
        "manager": {
            "is_complete": r >= 1,
            "next_goal": f"Next: fix the failing test </script> {XSS_SCRIPT}",
            "public": "The team is converging.",
            "parse_error": None,
        }
        if manager
        else None,
        "stats": {
            "edges": len(pairs),
            "density": len(pairs) / (n * (n - 1)) if n > 1 else 0.0,
            "reciprocity": reciprocal / len(pairs) if pairs else 0.0,
            "jaccard_similarity_prev": jaccard,
        },
        "timing": {"round_s": 1.0 + r, "llm_s": 0.8 + r, "routing_s": 0.05},
    }


def _trace(path: Path, rounds: list[dict[str, Any]], torn: dict[str, Any] | None = None) -> None:
    text = "".join(json.dumps(rec) + "\n" for rec in rounds)
    if torn is not None:  # a crash halfway through appending the next round
        line = json.dumps(torn)
        text += line[: len(line) // 2]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _dytopo(folder: Path) -> None:
    _write(folder / "run.json", _config("dytopo", {"tau": 0.3, "k_in": 2, "max_rounds": 3}))
    for episode, spec in DYTOPO_EPISODES.items():
        _write(folder / "episodes" / f"{episode}.json", _episode("dytopo", episode, "code", spec))
    _write(
        folder / "episodes" / "HumanEval-2.json",
        {
            "episode": "HumanEval-2",
            "status": "error",
            "error": f"Traceback (most recent call last):\n  ...\nRuntimeError: engine died {XSS_CLOSE}",
            "wall_s": 1.0,
            "record": None,
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "calls": 2,
                "failed_calls": 1,
                "reprompts": 0,
                "llm_latency_s": 0.9,
                "messages_routed": 0,
                "tokens_routed": 0,
            },
            "ledger": {"calls": [], "edges": []},
        },
    )
    # a record cut short (not the runtime's atomic write): reported and skipped
    (folder / "episodes" / "HumanEval-99.json").write_text(
        '{"episode": "HumanEval-99", "stat', encoding="utf-8"
    )
    for episode, rounds in DYTOPO_ROUNDS.items():
        recs, prev = [], None
        for r, (edges, removed) in enumerate(rounds):
            recs.append(
                _round(
                    "dytopo", episode, r, WORKERS, ROLES, edges, removed, scored=True, manager=True, prev=prev
                )
            )
            prev = {(s, d) for s, d, _ in edges}
        torn = None
        if episode == "HumanEval-2":
            torn = _round("dytopo", episode, 1, WORKERS, ROLES, [], [], scored=True, manager=True, prev=prev)
        _trace(folder / "traces" / f"{episode}.jsonl", recs, torn)


def _chain(folder: Path) -> None:
    _write(folder / "run.json", _config("chain", {"max_rounds": 2}))
    for episode, spec in CHAIN_EPISODES.items():
        _write(folder / "episodes" / f"{episode}.json", _episode("chain", episode, "code", spec))
        edges = [(s, d, None) for s, d in CHAIN_EDGES]
        recs = [
            _round(
                "chain",
                episode,
                r,
                WORKERS,
                ROLES,
                edges,
                [],
                scored=False,
                manager=True,
                prev=None if r == 0 else {(s, d) for s, d in CHAIN_EDGES},
            )
            for r in range(2)
        ]
        _trace(folder / "traces" / f"{episode}.jsonl", recs)
    summary = {
        "method": "chain",
        "tasks": "humaneval",
        "model": "HuggingFaceTB/SmolLM2-360M-Instruct",
        "episodes": 2,
        "ok": 2,
        "errors": 0,
        "passed": 1,
        "accuracy": 0.5,
        "wall_s": 12.5,
    }
    _write(folder / "summary.json", summary)


def _single(folder: Path) -> None:
    _write(folder / "run.json", _config("single", {}))
    for episode, spec in SINGLE_EPISODES.items():
        _write(folder / "episodes" / f"{episode}.json", _episode("single", episode, "code", spec))
        rec = _round(
            "single", episode, 0, ["Solver"], ["Solver"], [], [], scored=False, manager=False, prev=None
        )
        _trace(folder / "traces" / f"{episode}.jsonl", [rec])
