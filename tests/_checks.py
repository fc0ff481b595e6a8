"""Assertions shared by the error-handling tests."""

from __future__ import annotations

import re

import pytest

from toporoute import errors


def check(excinfo: pytest.ExceptionInfo, cls: type, arg: str, *fragments: str) -> None:
    """The exception is ``cls`` (a ValueError and ToporouteError), names ``arg`` and contains ``fragments``."""
    exc = excinfo.value
    assert isinstance(exc, cls), f"{type(exc).__name__} is not {cls.__name__}: {exc}"
    assert isinstance(exc, ValueError) and isinstance(exc, errors.ToporouteError)
    assert exc.arg == arg, f"arg={exc.arg!r}, expected {arg!r}: {exc}"
    msg = str(exc)
    assert re.search(rf"(?<![\w.]){re.escape(arg)}(?!\w)", msg), f"message does not name {arg!r}: {msg}"
    for f in fragments:
        assert f.lower() in msg.lower(), f"message lacks {f!r}: {msg}"
