"""An OS file lock on a run folder, held for a run's life, so two runs never write one folder at once.

The lock is ``fcntl.flock`` on ``<folder>/.toporoute.lock``: the kernel drops it when the holder's file is
closed or its process dies (``kill -9`` included), so a crashed run never leaves a stale lock and the next run
resumes the folder as usual. The file holds the holder's PID, start time and command line, which the refusal
names. It is rewritten in place, never replaced: a rename would swap the locked file for an unlocked one.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .errors import ToporouteError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["LOCK_NAME", "RunFolderBusyError", "RunLock"]

LOCK_NAME = ".toporoute.lock"


class RunFolderBusyError(ToporouteError, RuntimeError):
    """Another live process holds the run folder's lock. ``holder`` is what it wrote (pid, started, argv)."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message, "out")
        self.holder = holder


class RunLock:
    """Holds the lock of ``folder`` (created when missing) from :meth:`acquire` (or ``with``) to :meth:`release`.

    Parameters
    ----------
    folder : path
        The run folder.
    what : str
        What the folder holds, for the refusal ("a run", "a training run").

    A second :meth:`acquire` on the same folder, from another process or from another ``RunLock`` of this
    one, raises :class:`RunFolderBusyError` at once, naming the holder's PID and start time.
    """

    def __init__(self, folder: str | os.PathLike[str], *, what: str = "a run") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.what = what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> Self:
        if self._fd is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            pid = holder.get("pid", "unknown")
            started = holder.get("started", "an unknown time")
            raise RunFolderBusyError(
                f"{self.folder} is in use: {self.what} in process {pid} (started {started}) holds it; wait for "
                "it to finish or stop it, or choose another --out",
                holder,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        holder = {
            "pid": os.getpid(),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv,
        }
        data = json.dumps(holder).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drops the lock (the file stays, naming the last holder)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        value = json.loads(os.pread(fd, 1 << 16, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
