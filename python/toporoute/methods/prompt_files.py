"""The methods' prompt data files (``toporoute/methods/prompts/<method>/...``), read once per process."""

from __future__ import annotations

import json
import string
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["fill", "read_json", "read_text"]


@cache
def read_text(method: str, name: str) -> str:
    """The text of ``prompts/<method>/<name>``."""
    return (resources.files(__package__) / "prompts" / method / name).read_text(encoding="utf-8")


@cache
def read_json(method: str, name: str) -> Any:
    """The parsed JSON file ``prompts/<method>/<name>`` (do not modify the value: it is shared)."""
    return json.loads(read_text(method, name))


def fill(method: str, name: str, **values: object) -> str:
    """The prompt file ``prompts/<method>/<name>``, stripped, with its ``$fields`` filled
    (:class:`string.Template`, so code and braces in the values need no escaping; a missing field is an
    error)."""
    return string.Template(read_text(method, name).strip()).substitute({k: str(v) for k, v in values.items()})
