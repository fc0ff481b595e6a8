"""The programs that run an answer in the sandbox, kept as Python files in ``runners/`` (package data, not
modules: their names are not identifiers). Each file defines ``main``; :func:`runner_program` appends the call
with the arguments written as literals, so the sandbox gets one self-contained ``main.py``."""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["runner_program"]


def runner_program(name: str, *args: object) -> str:
    """The source of ``runners/<name>.py`` followed by ``main(*args)``, each argument as its ``repr``.

    Parameters
    ----------
    name : str
        ``"check-program"``, ``"public-tests"`` or ``"hidden-tests"``.
    *args
        ``main``'s arguments: str, int, or lists and tuples of them (values whose ``repr`` is a literal).

    Returns
    -------
    str
        A program for :func:`~toporoute.tasks.sandbox.run_python`.
    """
    return _source(name) + f"\n\nmain({', '.join(map(repr, args))})\n"


@functools.cache
def _source(name: str) -> str:
    return (resources.files(__package__) / "runners" / f"{name}.py").read_text(encoding="utf-8")
