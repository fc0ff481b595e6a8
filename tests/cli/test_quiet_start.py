"""A quiet start of the vLLM engine (issue 17): vLLM's and PyTorch's start-up logs and warnings at errors only
by default, everything back with ``--verbose`` / ``TOPOROUTE_VERBOSE=1``, and the one line the engine logs
before it starts. Checked on the configuration itself, without starting vLLM."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import multiprocessing
import warnings
from typing import Any

import pytest

from toporoute import cli
from toporoute._engine_child import QUIET_ENV, is_spawned_child
from toporoute.llm import vllm_engine
from toporoute.llm.models import EMBEDDED_MODEL_NAME
from toporoute.llm.vllm_engine import engine_environment, start_line, verbose_from_env


def test_quiet_by_default_the_engine_processes_log_errors_only() -> None:
    env = engine_environment(verbose=False)
    assert env["VLLM_LOGGING_LEVEL"] == "ERROR"  # vLLM's logger here and in EngineCore and its worker
    assert env["TORCH_CPP_LOG_LEVEL"] == "ERROR"  # PyTorch's C++ warnings (NUMA binding) in the worker
    assert env["PYTHONWARNINGS"] == "ignore"  # Python warnings of the child processes
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env[QUIET_ENV] == "1"  # vLLM's import-time warnings in its spawned children


def test_verbose_brings_back_vllm_info_and_the_warnings() -> None:
    env = engine_environment(verbose=True)
    assert env["VLLM_LOGGING_LEVEL"] == "INFO"
    assert "TORCH_CPP_LOG_LEVEL" not in env and "PYTHONWARNINGS" not in env and QUIET_ENV not in env
    assert env["VLLM_NO_USAGE_STATS"] == "1"


@pytest.mark.parametrize(
    ("value", "verbose"),
    [("1", True), ("true", True), (" Yes ", True), ("on", True), ("0", False), ("", False), ("no", False)],
)
def test_toporoute_verbose_environment_variable(value: str, verbose: bool) -> None:
    assert verbose_from_env({"TOPOROUTE_VERBOSE": value}) is verbose
    assert verbose_from_env({}) is False


def test_in_process_quiet_is_scoped_to_the_start() -> None:
    logger = logging.getLogger("vllm")
    before = logger.level
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with vllm_engine._quiet_in_process(verbose=False):
            assert logger.getEffectiveLevel() == logging.ERROR
            warnings.warn("start-up noise", FutureWarning, stacklevel=1)
        assert logger.level == before
        warnings.warn("after the start", FutureWarning, stacklevel=1)
        with vllm_engine._quiet_in_process(verbose=True):
            assert logger.level == before
            warnings.warn("verbose start", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["after the start", "verbose start"]


def test_start_line_names_device_model_and_dtype() -> None:
    line = start_line("CPU", EMBEDDED_MODEL_NAME, True, {"dtype": "bfloat16"})
    assert (
        line == "starting vLLM (CPU) with HuggingFaceTB/SmolLM2-135M-Instruct (embedded, dtype bfloat16) ..."
    )
    assert (
        start_line("cuda", "org/model", False, {}) == "starting vLLM (cuda) with org/model (dtype auto) ..."
    )


@pytest.mark.parametrize("command", [["run", "dytopo"], ["train", "qmix"]])
def test_verbose_flag_reaches_the_engine(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[dict[str, Any]] = []

    class FakeEngine:
        name = "fake"
        supports_guided_json = supports_guided_regex = False

        @classmethod
        async def open(cls, model: Any = None, **kwargs: Any) -> FakeEngine:
            opened.append(kwargs)
            return cls()

    monkeypatch.setattr(vllm_engine, "VLLMEngine", FakeEngine)
    for extra in ([], ["--verbose"]):
        args: argparse.Namespace = cli._parse([*command, "--out", "x", *extra])
        asyncio.run(cli._engine(args))
    # no flag: the engine reads TOPOROUTE_VERBOSE itself
    assert [o.get("verbose") for o in opened] == [None, True] and "verbose" not in opened[0]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_takes_the_quiet_engine_arguments() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    assert AsyncEngineArgs(model="x", use_tqdm_on_load=False).use_tqdm_on_load is False


def _vllm_logger_level() -> int:
    return logging.getLogger("vllm").level


@pytest.mark.parametrize(("quiet", "level"), [("1", logging.ERROR), (None, logging.NOTSET)])
def test_a_spawned_child_of_a_quiet_start_imports_toporoute_with_vllm_at_errors(
    quiet: str | None, level: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's engine core and worker are spawned; they import this module (and so toporoute) before vLLM,
    whose import-time warnings must then find the ``vllm`` logger at errors. Here a spawned child does the
    same with and without the variable a quiet start sets."""
    if quiet is None:
        monkeypatch.delenv(QUIET_ENV, raising=False)
    else:
        monkeypatch.setenv(QUIET_ENV, quiet)
    assert not is_spawned_child()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_vllm_logger_level) == level


def test_python_dash_m_toporoute_lets_spawned_children_import_it_by_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``python -m toporoute`` a spawned child skips a package's ``__main__`` named as a module, so the
    command clears the spec and the child runs ``toporoute/__main__.py`` by path as ``__mp_main__``: that must
    import toporoute (and so quiet the child) without running the command."""
    import runpy

    import toporoute
    import toporoute.cli

    def must_not_run(*args: object) -> int:
        raise AssertionError("the command ran in a spawned child")

    monkeypatch.setattr(toporoute.cli, "main", must_not_run)
    path = importlib.util.find_spec("toporoute.__main__").origin  # type: ignore[union-attr]
    namespace = runpy.run_path(str(path), run_name="__mp_main__")
    assert namespace["main"] is must_not_run and "toporoute" in str(toporoute.__file__)
