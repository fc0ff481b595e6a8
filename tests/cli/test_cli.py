"""The ``toporoute`` command end to end without a model: ``run`` on a replayed transcript (recorded here from the
scripted engine), the per-method table, resume, ``report``, and clear errors for bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from _procs import replay_args
from _procs import run_toporoute as toporoute
from test_methods import MATH, TASK, team_engine

from toporoute.llm import ReplayEngine, Structured
from toporoute.methods import make_method
from toporoute.methods.baselines import dytopo_edge_counts
from toporoute.methods.harness import run_method
from toporoute.tasks import load_tasks, write_tasks_jsonl


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A task file and a transcript of dytopo + single + random on it, recorded from the scripted engine with
    the settings the CLI uses by default (so a replayed CLI run sends exactly the recorded requests)."""
    root = tmp_path_factory.mktemp("cli")
    tasks_file, transcript = root / "tasks.jsonl", root / "transcript.jsonl"
    write_tasks_jsonl([TASK, MATH], tasks_file)
    tasks = load_tasks(str(tasks_file))

    async def record() -> None:
        engine = Structured(ReplayEngine(transcript, team_engine(done_at=2)))
        scratch = root / "scratch"
        for name in ("dytopo", "single", "random"):
            extra = {"edge_counts": dytopo_edge_counts(scratch / "dytopo")} if name == "random" else {}
            method = make_method(name, **extra)
            await run_method(method, tasks, engine, scratch / name, progress=False)
        await engine.aclose()

    asyncio.run(record())
    return tasks_file, transcript


def test_run_report_and_resume_from_a_replayed_transcript(recorded, tmp_path: Path) -> None:
    tasks_file, transcript = recorded
    out = tmp_path / "run"
    args = [
        "run",
        "dytopo",
        "single",
        "random",
        *replay_args(tasks_file, transcript, out),
        "--report",
        "--no-progress",
    ]
    p = toporoute(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    table = p.stdout
    for name in ("dytopo", "single", "random"):
        assert name in table
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["episodes"] == 2 and summary["accuracy"] == 1.0, summary
        assert (out / name / "run.json").is_file()
    assert "routing share" in table and "accuracy" in table
    dy = json.loads((out / "dytopo" / "summary.json").read_text())
    assert dy["rounds_per_task"] == 2.0 and 0 < dy["routing_share"] < 1
    # the random baseline drew DyTopo's per-round edge counts (its 5 rounds reuse DyTopo's last count)
    dy_counts = dytopo_edge_counts(out / "dytopo")
    assert dytopo_edge_counts(out / "random") == {e: c + [c[-1]] * (5 - len(c)) for e, c in dy_counts.items()}
    assert (out / "report.html").is_file() and any((out / "figures").glob("*.png"))
    # rerun: every episode is finished and skipped, so no record is rewritten
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/episodes/*.json")}
    again = toporoute(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/episodes/*.json")} == stamps and len(stamps) == 6
    rep = toporoute("report", str(out), cwd=tmp_path)
    assert rep.returncode == 0 and "report.html" in rep.stdout


def test_cli_errors_name_what_is_wrong(tmp_path: Path) -> None:
    p = toporoute("run", "dytopology", "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert p.returncode == 2 and "dytopology" in p.stderr and "dytopo" in p.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"id": "a", "kind": "code", "prompt": "x", "entry_point": "f", '
        '"test": "def check(candidate):\\n    pass"}\n{"id": "b"}\n'
    )
    p = toporoute(
        "run",
        "single",
        *replay_args(bad, bad, tmp_path / "y"),
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "line 2" in p.stderr, p.stderr
    p = toporoute(
        "run",
        "single",
        "--tasks",
        "humaneval",
        "--limit",
        "1",
        "--engine",
        "replay",
        "--out",
        str(tmp_path / "z"),
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "--replay" in p.stderr
    p = toporoute("report", str(tmp_path / "nothing-here"), cwd=tmp_path)
    assert p.returncode == 2 and "nothing-here" in p.stderr
    assert "Traceback" not in p.stderr


def test_run_help_shows_each_methods_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    from toporoute.cli import main

    def help_text(*argv: str) -> str:
        with pytest.raises(SystemExit) as exc:
            main(["run", *argv, "--help"])
        assert exc.value.code == 0
        return capsys.readouterr().out

    plain = help_text()
    assert "toporoute run METHOD --help" in plain and "--tau TAU" not in plain and "--level {" not in plain
    for name in ("dytopo", "qmix", "conductor", "single", "random", "full"):
        assert f"\n  {name} " in plain  # the method list with one line each
    conductor = help_text("conductor")
    assert "options of conductor (AgentConductor)" in conductor and "--feedback-tests" in conductor
    assert "--tau TAU" not in conductor and "--checkpoint CHECKPOINT" not in conductor
    both = help_text("dytopo", "random", "qmix")
    assert both.count("options of dytopo and its worker-loop baselines") == 1  # shared options, one group
    assert "--k-in K_IN" in both and "--checkpoint CHECKPOINT" in both and "--level {" not in both
    assert "--tau TAU" not in help_text("single")


def test_an_option_of_a_method_not_run_names_its_method(tmp_path: Path) -> None:
    p = toporoute("run", "dytopo", "--level", "hard", "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert p.returncode == 2 and "--level is an option of conductor" in p.stderr, p.stderr
    p = toporoute("run", "single", "--tau", "0.5", "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert p.returncode == 2 and "--tau is an option of dytopo" in p.stderr, p.stderr
    p = toporoute("run", "qmix", "--out", str(tmp_path / "x"), cwd=tmp_path)  # before anything starts
    assert p.returncode == 2 and "--checkpoint" in p.stderr and "Traceback" not in p.stderr


def test_each_methods_flags_are_as_before() -> None:
    """The flags, defaults, choices, types and help of every method's option group (and of ``train qmix``), as
    recorded in tests/data/method_flags.json before the methods declared their flags on their settings (their
    order in the help may differ: a group lists its settings' fields in declaration order)."""
    from _method_flags import SNAPSHOT, method_flags

    def by_flag(groups: list[dict]) -> list[tuple[str | None, list[dict]]]:
        return [(g["group"], sorted(g["options"], key=lambda o: o["flags"])) for g in groups]

    now, before = method_flags(), json.loads(SNAPSHOT.read_text())
    assert sorted(now) == sorted(before)
    for key in before:
        assert by_flag(now[key]) == by_flag(before[key]), key


def test_serve_flags_are_the_servers_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``toporoute serve``'s flags come from ServeConfig's fields: no flag gives its defaults, each flag its
    field, the token comes from --token-file; a backend not among the field's choices is refused by the settings
    themselves (the Python API too), naming the field."""
    from toporoute.cli import _parse, _serve_config
    from toporoute.errors import InvalidArgumentError
    from toporoute.serve import ServeConfig

    monkeypatch.delenv("TOPOROUTE_TOKEN", raising=False)
    assert _serve_config(_parse(["serve"])) == ServeConfig()
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    args = _parse(
        ["serve", "--host", "0.0.0.0", "--port", "0", "--workers", "2", "--backend", "reference",
         "--qmix-checkpoint", "w.safetensors", "--token-file", str(token), "--allow-remote",
         "--max-body-bytes", "100", "--max-episodes", "3", "--max-agents", "4", "--max-text-chars", "5",
         "--encoder-cache-size", "0"]
    )  # fmt: skip
    assert _serve_config(args) == ServeConfig(
        host="0.0.0.0",
        port=0,
        workers=2,
        backend="reference",
        qmix_checkpoint=Path("w.safetensors"),
        token="s3cret",
        allow_remote=True,
        max_body_bytes=100,
        max_episodes=3,
        max_agents=4,
        max_text_chars=5,
        encoder_cache_size=0,
    )
    with pytest.raises(InvalidArgumentError, match="backend must be one of") as info:
        ServeConfig(backend="gpu")
    assert info.value.arg == "backend"
