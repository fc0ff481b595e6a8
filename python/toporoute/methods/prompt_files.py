"""The methods' prompt data files (``toporoute/methods/prompts/<method>/...``), read once per process."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["read_json", "read_text"]


@cache
def read_text(method: str, name: str) -> str:
    """The text of ``prompts/<method>/<name>``."""
    return (resources.files(__package__) / "prompts" / method / name).read_text(encoding="utf-8")


@cache
def read_json(method: str, name: str) -> Any:
    """The parsed JSON file ``prompts/<method>/<name>`` (do not modify the value: it is shared)."""
    return json.loads(read_text(method, name))
