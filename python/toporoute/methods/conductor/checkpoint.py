"""A trained orchestrator's folder (``toporoute train conductor`` writes ``TRAIN_DIR/orchestrator``): a Hugging
Face model folder any engine loads (vLLM in process, or ``vllm serve``), plus :data:`METADATA`, which records the
base model, the training steps and the training task ids, so that ``toporoute run conductor --orchestrator``
never scores the orchestrator on the tasks it was trained on. Reading it needs no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._atomic import write_json_atomic
from ...errors import InvalidArgumentError

__all__ = ["METADATA", "OrchestratorCheckpoint"]

METADATA = "toporoute-orchestrator.json"
"""The file in an orchestrator folder that says what trained it."""


@dataclass(frozen=True)
class OrchestratorCheckpoint:
    """What :data:`METADATA` records.

    Attributes
    ----------
    path : Path
        The model folder.
    checkpoint_id : str
        SHA-256 prefix of the weights file(s) as written.
    base_model : str
        The model training started from (a folder or hub id).
    steps : int
        GRPO steps trained (plus ``sft_steps`` of the SFT warm start).
    task_ids : tuple of str
        The training tasks (``toporoute run conductor`` refuses them).
    info : dict
        Everything else recorded (rewards, adapter, settings).
    """

    path: Path
    checkpoint_id: str
    base_model: str
    steps: int
    task_ids: tuple[str, ...]
    info: dict[str, Any]

    @staticmethod
    def load(path: str | Path) -> OrchestratorCheckpoint | None:
        """The metadata of the orchestrator folder ``path``; None when the folder holds none (an untrained model
        folder, or a hub id). Raises :class:`InvalidArgumentError` for a metadata file that cannot be read."""
        folder = Path(path).expanduser()
        meta = folder / METADATA
        if not meta.is_file():
            return None
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
            ids = data["task_ids"]
            if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
                raise TypeError("task_ids must be a list of strings")
            return OrchestratorCheckpoint(
                folder,
                str(data.get("checkpoint_id", "")),
                str(data.get("base_model", "")),
                int(data.get("steps", 0)),
                tuple(ids),
                {
                    k: v
                    for k, v in data.items()
                    if k not in ("checkpoint_id", "base_model", "steps", "task_ids")
                },
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidArgumentError(f"{meta} cannot be read: {exc}", "orchestrator") from None

    def save(self) -> Path:
        """Writes :data:`METADATA` into ``path`` (atomically); returns its path."""
        out = self.path / METADATA
        write_json_atomic(
            out,
            {
                "checkpoint_id": self.checkpoint_id,
                "base_model": self.base_model,
                "steps": self.steps,
                "task_ids": list(self.task_ids),
                **self.info,
            },
        )
        return out

    def summary(self) -> dict[str, Any]:
        """What run.json records of it."""
        return {
            "path": str(self.path),
            "checkpoint_id": self.checkpoint_id,
            "base_model": self.base_model,
            "steps": self.steps,
            "trained_tasks": len(self.task_ids),
        }
