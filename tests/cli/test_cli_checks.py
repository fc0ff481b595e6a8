"""The ``toporoute`` command checks everything that needs no model before its engine starts, and speaks in its
own flags (issue 31): a run folder of other settings names the keys that differ, a missing ``--checkpoint`` and
bad numbers fail at once, abbreviations are off, an option of another method names that method; ``--version``;
every flag has help text stating its default; the environment variables are documented; a broken pipe exits
quietly."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from toporoute import cli, ops
from toporoute._info import package_version
from toporoute.llm.vllm_engine import ready_line
from toporoute.methods.registry import REGISTRY


class EngineStarted(AssertionError):
    pass


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test when the command starts its vLLM engine."""

    class Refuse:
        @staticmethod
        async def open(*args: object, **kwargs: object) -> None:
            raise EngineStarted("the command started vLLM before refusing")

    monkeypatch.setattr("toporoute.llm.VLLMEngine", Refuse)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        status = cli.main(list(args))
    except SystemExit as exc:  # argparse
        status = int(exc.code or 0)
    return status, capsys.readouterr().err


def test_a_folder_of_other_settings_is_refused_before_the_engine_naming_the_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_engine: None
) -> None:
    from toporoute.llm.vllm_engine import engine_name
    from toporoute.methods import make_method
    from toporoute.methods.harness import run_config
    from toporoute.tasks import load_tasks

    out = tmp_path / "run"
    tasks = load_tasks("math-demo", limit=1)
    old = run_config(
        make_method("parallel", k_in=2), tasks, engine_name(None), "vllm", {"tasks": "math-demo"}
    )
    (out / "parallel").mkdir(parents=True)
    (out / "parallel" / "run.json").write_text(json.dumps(old))
    status, err = run_cli(
        capsys, "run", "parallel", "--k-in", "3", "--tasks", "math-demo", "--limit", "1", "--out", str(out)
    )
    assert status == 2, err
    assert "params.k_in: 2 → 3" in err and "choose another --out" in err
    assert "params.max_rounds" not in err  # only what differs


def test_a_missing_checkpoint_fails_before_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_engine: None
) -> None:
    missing = tmp_path / "nope.safetensors"
    status, err = run_cli(
        capsys,
        "run",
        "qmix",
        "--checkpoint",
        str(missing),
        "--tasks",
        "math-demo",
        "--out",
        str(tmp_path / "r"),
    )
    assert status == 2 and f"--checkpoint {missing}: no such file" in err, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-tokens", "-5"], "argument --max-tokens: must be an integer >= 1; got '-5'"),
        (["--limit", "0"], "argument --limit: must be an integer >= 1; got '0'"),
        (["--offset", "-1"], "argument --offset: must be an integer >= 0; got '-1'"),
        (["--temperature", "nan"], "argument --temperature: must be a number >= 0; got 'nan'"),
        (["--eval-timeout", "0"], "argument --eval-timeout: must be a number > 0; got '0'"),
        (["--concurrency", "0"], "argument --concurrency: must be an integer >= 1; got '0'"),
        (["--k", "2"], "--k is an option of tacomas, which this command does not run; did you mean --k-in?"),
        (["--iter", "2"], "unrecognized option --iter; did you mean --iterations (an option of hiva"),
        (["--max-token", "5"], "unrecognized option --max-token; did you mean --max-tokens or --role-max"),
        (["--tasks", "nofile.jsonl"], "--tasks nofile.jsonl: task file 'nofile.jsonl' not found"),
        (
            ["--tasks", "math-demo", "--offset", "500"],
            "--offset 500: offset 500 skips every task of 'math-demo'",
        ),
    ],
)
def test_bad_arguments_fail_at_once_in_the_commands_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_engine: None, args: list[str], message: str
) -> None:
    status, err = run_cli(capsys, "run", "dytopo", "--out", str(tmp_path / "r"), *args)
    assert status == 2 and message in err, err
    assert not (tmp_path / "r").exists()  # refused before anything is written


def test_no_abbreviations() -> None:
    with pytest.raises(SystemExit):
        cli._parse(["run", "dytopo", "--k", "2", "--out", "x"])  # not --k-in
    with pytest.raises(SystemExit):
        cli._parse(["train", "qmix", "--episode", "3", "--out", "x"])  # not --episodes
    with pytest.raises(SystemExit):
        cli._parse(["bench", "--repeat", "3"])  # not --repeats
    assert cli._parse(["run", "dytopo", "--k-in", "2", "--out", "x"]).k_in == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    version = package_version("toporoute")
    assert exit_.value.code == 0 and version is not None
    assert capsys.readouterr().out.strip() == f"toporoute {version}"


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    p = cli._parser(list(REGISTRY))
    yield "toporoute", p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def test_every_flag_has_help_stating_its_default_and_no_markup() -> None:
    missing, markup = [], []
    for name, parser in parsers():
        texts = [parser.description or "", parser.epilog or ""]
        for a in parser._actions:
            if isinstance(a, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            texts.append(a.help or "")
            flag = f"{name} {'/'.join(a.option_strings) or a.dest}"
            if not a.help:
                missing.append(f"{flag}: no help")
            elif (
                a.option_strings
                and not a.required
                and a.default not in (None, False, [], argparse.SUPPRESS)
                and "default" not in a.help
            ):
                missing.append(f"{flag}: default {a.default!r} not stated")
        markup += [f"{name}: {t[:60]!r}" for t in texts if "`" in t or ":class:" in t or ":func:" in t]
    assert not missing, missing
    assert not markup, markup


def test_engine_options_have_their_own_group_and_the_environment_is_documented() -> None:
    run = dict(parsers())["run"]
    groups = {g.title: [a.dest for a in g._group_actions] for g in run._action_groups}
    assert {"engine", "model", "base_url", "replay", "record"} <= set(groups["engine options"])
    assert "engine" not in groups["options"]
    for name in ("toporoute", "run", "train"):
        epilog = dict(parsers())[name].epilog or ""
        assert "TOPOROUTE_LOG" in epilog and "TOPOROUTE_CACHE" in epilog


def test_a_bad_log_level_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setenv("TOPOROUTE_LOG", "loud")
    status, err = run_cli(capsys, "info")
    assert status == 2 and "TOPOROUTE_LOG must be one of DEBUG, INFO" in err and "'loud'" in err


def test_a_broken_pipe_exits_quietly(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (toporoute info --json | head, early exit)
    p = subprocess.run(
        [sys.executable, "-m", "toporoute", "info", "--json"],
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )
    os.close(write)
    assert p.returncode == 141 and p.stderr == "", p.stderr


def test_the_ready_line_names_the_dtype_once() -> None:
    line = ready_line(26.2, "bfloat16", "bfloat16: this CPU has native bf16 (avx512_bf16)")
    assert line == "vLLM ready in 26 s (bfloat16: this CPU has native bf16 (avx512_bf16))"
    gpu = ready_line(40.0, "bfloat16", "auto: on GPU vLLM takes the model's own dtype")
    assert gpu == "vLLM ready in 40 s (bfloat16; auto: on GPU vLLM takes the model's own dtype)"


def test_shape_messages_read_as_sentences() -> None:
    q = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"^k must have the shape of q, \(2, 3, 4\); got \(2, 3, 5\)$"):
        ops.route(q, np.zeros((2, 3, 5), np.float32))
