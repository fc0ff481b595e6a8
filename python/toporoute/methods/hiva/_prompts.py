"""HiVA's prompt texts and built-in tools (data files in ``methods/prompts/hiva``), filled with
:class:`string.Template` (``$name``), so that code and braces in the values need no escaping."""

from __future__ import annotations

import string

from ..prompt_files import read_text

__all__ = ["default_tool_source", "fill", "text"]


def text(name: str) -> str:
    """The prompt file ``name`` (``.txt`` added), stripped."""
    return read_text("hiva", f"{name}.txt").strip()


def fill(name: str, **values: object) -> str:
    """The prompt file ``name`` with its ``$fields`` filled (a missing field is an error)."""
    return string.Template(text(name)).substitute({k: str(v) for k, v in values.items()})


def default_tool_source(domain: str) -> str:
    """The built-in tool of a domain: ``code`` (runs the code in its input on the visible examples) or ``math``
    (computes the arithmetic in its input)."""
    return read_text("hiva", f"tools/default-{domain}-tool.py")
