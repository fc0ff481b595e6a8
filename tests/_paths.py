"""Where the tests find the repository's files, from whichever sub-folder of tests/ a test module sits in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""tests/ itself: conftest.py, the shared ``_`` helper modules and data/."""

ROOT = TESTS.parent
"""The repository root (README.md, cpp/, python/)."""

DATA = TESTS / "data"
"""tests/data/: the recorded files the tests read (the v1 run folder, the golden records)."""
