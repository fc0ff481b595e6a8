"""Agent Q-Mix as ``toporoute run qmix`` and ``toporoute train qmix``: its spec, its episode loop's option group
(the flags are declared on :class:`~toporoute.methods.qmix.QMixSettings`' fields; ``run`` adds
``--checkpoint`` and ``--drop-trained-tasks``), and the network options of ``train``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgumentError
from ...types.qmix_params import ADJ_MODES, QMixConfig
from ..options import MethodSpec, OptionGroup, add_drop_trained_tasks, read_drop_trained_tasks, settings_of
from .settings import QMixSettings

if TYPE_CHECKING:
    from ...embed import Encoder
    from ..episode import Method

__all__ = [
    "LOOP_OPTIONS",
    "SPEC",
    "QMixNetworkChoice",
    "add_qmix_network_options",
    "read_qmix_network_options",
]

# the original's GNN dropout, also the default (TrainConfig.dropout; the trainer's module imports torch)
_DROPOUT = 0.1

LOOP_OPTIONS = OptionGroup("qmix (Agent Q-Mix)", QMixSettings)
"""The episode loop's options (``train``; ``run`` adds ``--checkpoint`` and ``--drop-trained-tasks``)."""


def _add_checkpoint(g: argparse._ActionsContainer) -> None:
    g.add_argument(
        "--checkpoint", type=Path, default=None, help="the policy (required; toporoute train qmix writes it)"
    )
    add_drop_trained_tasks(g)


def _read_checkpoint(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    if args.checkpoint is None:
        raise InvalidArgumentError(
            "method qmix needs --checkpoint (a policy from 'toporoute train qmix')", "checkpoint"
        )
    if not args.checkpoint.is_file():
        raise InvalidArgumentError(
            f"--checkpoint {args.checkpoint}: no such file (a policy from 'toporoute train qmix', e.g. "
            "TRAIN_DIR/policy.safetensors)",
            "checkpoint",
        )
    return {"checkpoint": args.checkpoint, "drop_trained_tasks": read_drop_trained_tasks(args)}


def _build(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
    from .method import QMix, QMixPolicy

    checkpoint = settings.pop("checkpoint", None)
    if checkpoint is None:
        raise InvalidArgumentError(
            "method qmix needs a checkpoint (toporoute train qmix writes one)", "checkpoint"
        )
    drop = bool(settings.pop("drop_trained_tasks", False))
    settings["rounds"] = rounds
    return QMix(
        QMixPolicy.load(checkpoint, encoder=encoder),
        settings_of(QMixSettings, settings, "qmix"),
        drop_trained_tasks=drop,
    )


SPEC = MethodSpec(
    "qmix",
    "Agent Q-Mix: per-agent communication actions from a trained QMIX policy (--checkpoint)",
    _build,
    OptionGroup(LOOP_OPTIONS.title, QMixSettings, _add_checkpoint, _read_checkpoint),
    kinds=("code", "math", "choice"),
)


@dataclass(frozen=True)
class QMixNetworkChoice:
    """The network ``toporoute train qmix`` builds: its config and its training dropout.

    Attributes
    ----------
    config : QMixConfig
        Shapes and semantics (``obs_dim`` / ``state_dim`` are set by the trainer from the features).
    dropout : float
        GNN dropout while training (:class:`~toporoute.methods.qmix.train.TrainConfig` ``dropout``).
    """

    config: QMixConfig
    dropout: float


def add_qmix_network_options(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """The Q-Mix network's options (``train``): ``--legacy-network`` and one flag per setting it changes."""
    g.add_argument("--agents", type=int, default=3, help="team size (default 3: 2 writers + analyzer)")
    g.add_argument(
        "--legacy-network",
        action="store_true",
        help="the original repository's network: --adj-mode out_rows --no-self-loops --no-b1-hidden "
        "--dropout 0.1 (each flag given as well overrides it)",
    )
    g.add_argument(
        "--adj-mode",
        choices=ADJ_MODES,
        default=None,
        help="whose messages a node averages: in-neighbours (default), out_rows (the rows of A: the original), "
        "sym (both)",
    )
    g.add_argument(
        "--self-loops",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a node also averages its own message (default on; the original: off)",
    )
    g.add_argument(
        "--b1-hidden",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the mixer's first bias hypernetwork (hyper_b1) has a hidden layer, as the paper says "
        "(default off, as the original code)",
    )
    g.add_argument("--dropout", type=float, default=None, help="GNN dropout while training (default 0.1)")


def read_qmix_network_options(args: argparse.Namespace) -> QMixNetworkChoice:
    """The network of :func:`add_qmix_network_options`' options: :meth:`QMixConfig.original` under
    ``--legacy-network``, else the defaults (in-neighbours with self-loops); each flag given overrides its
    field."""
    base = (
        QMixConfig.original(n_agents=args.agents) if args.legacy_network else QMixConfig(n_agents=args.agents)
    )
    changes = {
        k: v
        for k, v in (
            ("adj_mode", args.adj_mode),
            ("self_loops", args.self_loops),
            ("b1_hidden", args.b1_hidden),
        )
        if v is not None
    }
    return QMixNetworkChoice(replace(base, **changes), _DROPOUT if args.dropout is None else args.dropout)
