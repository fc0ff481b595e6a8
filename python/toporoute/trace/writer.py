"""Appends round records to an episode's trace file as the rounds finish."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from .schema import RoundRecord

__all__ = ["TraceWriter"]


class TraceWriter:
    """One episode's ``traces/<episode>.jsonl``: one JSON line per round, flushed and fsynced per line.

    Opening truncates the file, so a rerun of an interrupted episode starts its trace afresh; a crash leaves
    every finished round on disk (a torn last line at worst, which readers skip).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.rounds = 0

    def write(self, record: RoundRecord) -> None:
        """Appends one round (flushed and fsynced before returning)."""
        if self._file is None:
            raise ValueError(f"trace {self.path} is closed")
        line = json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":"))
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.rounds += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> TraceWriter:  # noqa: PYI034 - Self needs Python 3.11
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
