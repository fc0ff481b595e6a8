"""``ast.parse`` for code that may run in several threads at once (tools and answers are checked in worker
threads). CPython 3.11 shares the AST constructor's recursion-depth count between threads, so two threads
building AST objects together can fail with ``SystemError: AST constructor recursion depth mismatch`` (seen in
HiVA's aggregator, which checks each contributor's tool in its own thread); one lock serialises the parses. The
lock guards the interpreter, not any toporoute state."""

from __future__ import annotations

import ast
import threading

__all__ = ["parse", "parse_expression"]

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename)


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``, one thread at a time."""
    with _LOCK:
        return ast.parse(source, mode="eval")
