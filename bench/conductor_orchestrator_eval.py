"""Before and after for a trained AgentConductor orchestrator: the valid-plan rate and the mean reward of
``toporoute run conductor`` runs on the same tasks (e.g. the untrained model, then ``--orchestrator
TRAIN_DIR/orchestrator``, both with ``--no-guided``, the paper's setting), one row per run, from their traces
(:func:`toporoute.methods.conductor.training.plan_summary`).

Run: ``python bench/conductor_orchestrator_eval.py RUN_DIR/conductor [RUN_DIR2/conductor ...]``; ``--json`` prints
the rows as JSON.
"""

from __future__ import annotations

import argparse
import json

from toporoute.methods.conductor.training import plan_summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="conductor method folders (RUN_DIR/conductor)")
    p.add_argument("--json", action="store_true", help="print JSON rows")
    args = p.parse_args()
    rows = [{"run": r, **plan_summary(r)} for r in args.runs]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    head = (
        "run",
        "episodes",
        "valid 1st turn",
        "valid turns",
        "over cap",
        "mean return",
        "mean r turn 1",
        "passed",
    )
    print(" | ".join(head))
    for r in rows:
        print(
            f"{r['run']} | {r['episodes']} | {r['valid_first']:.0%} | {r['valid_turns']:.0%} | {r['over_cap']:.0%} "
            f"| {r['mean_return']:+.3f} | {r['mean_first_reward']:+.3f} | {r['passed']:.0%}"
        )


if __name__ == "__main__":
    main()
