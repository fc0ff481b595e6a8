"""The sandboxed tool runner (toporoute.tasks.tools): the static check, and real runs in the real sandbox."""

from __future__ import annotations

import builtins

import pytest

from toporoute.errors import InvalidArgumentError
from toporoute.tasks import tools
from toporoute.tasks.tools import DENY_LIST, check_tool_source, run_tool

ECHO = "def tool_function(input_data, **kwargs):\n    return input_data.upper() + repr(sorted(kwargs))\n"


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("", "empty source"),
        ("def tool_function(:\n", "syntax error"),
        ("def helper(x):\n    return x\n", "no tool_function"),
        ("def tool_function():\n    return ''\n", "no tool_function"),
        ("class A:\n    def tool_function(self, x):\n        return x\n", "no tool_function"),
    ],
)
def test_check_refuses_malformed_sources(source: str, why: str) -> None:
    problem = check_tool_source(source)
    assert problem is not None and why in problem


@pytest.mark.parametrize("name", DENY_LIST)
def test_check_refuses_every_deny_listed_name(name: str) -> None:
    source = f"def tool_function(input_data):\n    x = 1\n    y = {name}\n    return ''\n"
    assert check_tool_source(source) == f"deny-list: {name} (line 3)"


def test_check_matches_whole_words_only() -> None:
    source = (
        "import ast\n\ndef tool_function(input_data, osmosis=0, reopen=False):\n"
        "    return str(ast.literal_eval(input_data)) + ' evaluated, systems opened'\n"
    )
    assert check_tool_source(source) is None


def test_run_returns_the_result_and_filters_unknown_kwargs() -> None:
    run = run_tool(ECHO, "abc", kwargs={"examples": [["f(1)", "2"]]}, retries=0)
    assert run.ok and run.error is None and run.attempts == 1
    assert run.output == "ABC['examples']"
    assert "audit-hook" in run.isolation
    # a tool that takes no keyword arguments is called without them
    plain = run_tool("def tool_function(text):\n    return text[::-1]\n", "abc", kwargs={"x": 1}, retries=0)
    assert plain.ok and plain.output == "cba"


def test_a_failing_tool_is_a_recorded_error_not_an_exception() -> None:
    run = run_tool("def tool_function(input_data):\n    return 1 / 0\n", "x", retries=3)
    assert not run.ok and run.error is not None and run.error.startswith("call: ZeroDivisionError")
    assert run.attempts == 1  # the same input fails the same way: not retried
    loading = run_tool("raise ValueError('at import')\ndef tool_function(x):\n    return x\n", "x", retries=0)
    assert loading.error is not None and loading.error.startswith("load: ValueError: at import")


def test_denied_sources_never_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("a denied tool reached the sandbox")

    monkeypatch.setattr(tools, "run_python", boom)
    run = run_tool("import subprocess\ndef tool_function(x):\n    return x\n", "x")
    assert run.error == "denied: deny-list: subprocess (line 1)" and run.attempts == 0


def test_timeouts_are_retried_then_reported() -> None:
    run = run_tool(
        "def tool_function(x):\n    while True:\n        pass\n", "x", timeout_s=0.5, retries=1, backoff_s=0.0
    )
    assert not run.ok and run.error is not None and run.error.startswith("timeout")
    assert run.attempts == 2


def test_printing_cannot_forge_a_result() -> None:
    source = (
        'def tool_function(x):\n    print(\'deadbeef {"stage": "done", "output": "forged"}\')\n'
        "    return 'real'\n"
    )
    run = run_tool(source, "x", retries=0)
    assert run.ok and run.output == "real"


def test_a_tool_runs_in_another_process() -> None:
    source = (
        "import builtins\n\ndef tool_function(x):\n    builtins.TOPOROUTE_TOOL_MARK = 1\n    return 'set'\n"
    )
    run = run_tool(source, "x", retries=0)
    assert run.ok and run.output == "set"
    assert not hasattr(builtins, "TOPOROUTE_TOOL_MARK")


def test_trusted_skips_only_the_deny_list() -> None:
    trusted = "def tool_function(x):\n    return str(eval(x))\n"
    assert run_tool(trusted, "6*7", trusted=True, retries=0).output == "42"
    assert run_tool(trusted, "6*7", retries=0).error == "denied: deny-list: eval (line 2)"
    broken = run_tool("def tool_function(:\n", "x", trusted=True, retries=0)
    assert broken.error is not None and broken.error.startswith("denied: syntax error")


def test_no_network_inside_a_tool() -> None:
    source = (
        "import socket\n\ndef tool_function(x):\n    s = socket.socket()\n    s.settimeout(1)\n"
        "    s.connect(('1.1.1.1', 80))\n    return 'connected'\n"
    )
    run = run_tool(source, "x", retries=0)
    assert not run.ok and run.error is not None and run.error.startswith("call:")


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"input_data": 3}, "input_data"),
        ({"retries": -1}, "retries"),
        ({"kwargs": {"x": object()}}, "kwargs"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"backoff_s": -1.0}, "backoff_s"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, arg: str) -> None:
    call = {"input_data": "x", **kwargs}
    with pytest.raises(InvalidArgumentError) as err:
        run_tool(ECHO, **call)
    assert err.value.arg == arg
