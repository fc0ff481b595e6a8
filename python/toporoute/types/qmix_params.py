"""Weights of the Agent Q-Mix networks for :func:`toporoute.ops.qmix_forward` / :func:`toporoute.ops.qmix_mix`.

A checkpoint is a safetensors file whose tensor names are the PyTorch ``state_dict`` keys of the training
model (:mod:`toporoute.methods.qmix.model`) and whose metadata holds ``format = "toporoute.qmix"``, the
network shapes (``config``, JSON) and anything the trainer adds (features, training settings). Loading needs
numpy only. Shapes (H = hidden, A = n_actions, S = state_dim, M = mix_hidden, Hh = hyper_hidden; torch
``Linear`` weights are ``(out, in)``)::

    agent.input.weight (H, obs_dim)         agent.input.bias (H,)
    agent.gnn.{l}.message.weight (H, H)     agent.gnn.{l}.message.bias (H,)          l < gnn_layers
    agent.gnn.{l}.update.weight_ih (3H, H)  agent.gnn.{l}.update.weight_hh (3H, H)   (GRUCell, gates r, z, n)
    agent.gnn.{l}.update.bias_ih (3H,)      agent.gnn.{l}.update.bias_hh (3H,)
    agent.norm.weight (H,)                  agent.norm.bias (H,)                     (one LayerNorm, shared)
    agent.rnn.weight_ih (3H, H)             agent.rnn.weight_hh (3H, H)   agent.rnn.bias_ih / bias_hh (3H,)
    agent.head.0.weight (Hq, H)             agent.head.0.bias (Hq,)                  Hq = head_hidden
    agent.head.2.weight (A, Hq)             agent.head.2.bias (A,)
    mixer.hyper_w1.0.weight (Hh, S)  .bias  mixer.hyper_w1.2.weight (n_agents * M, Hh)  .bias
    mixer.hyper_b1.weight (M, S)     .bias  (b1_hidden: mixer.hyper_b1.0 (Hh, S), mixer.hyper_b1.2 (M, Hh))
    mixer.hyper_w2.0.weight (Hh, S)  .bias  mixer.hyper_w2.2.weight (M, Hh)  .bias
    mixer.hyper_b2.0.weight (Hh, S)  .bias  mixer.hyper_b2.2.weight (1, Hh)  .bias

The mixer is optional (inference needs the agent network only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ._safetensors import read_safetensors, write_safetensors

__all__ = ["ADJ_MODES", "FORMAT", "QMixConfig", "QMixParams", "agent_keys", "mixer_keys"]

FORMAT = "toporoute.qmix"
FORMAT_VERSION = "1"
ADJ_MODES = ("in", "out_rows", "sym")


@dataclass(frozen=True)
class QMixConfig:
    """Shapes and semantics of the Agent Q-Mix networks (spec §4; defaults are the paper's n = 3 team with the
    spec's fixes; :meth:`original` gives the original repository's network).

    Parameters
    ----------
    obs_dim : int
        Per-agent observation width (51: 32 task hash + 16 identity + 3 graph/usage features).
    hidden : int
        H, the GNN, GRU and projection width (128).
    n_actions : int
        Communication actions (6).
    head_hidden : int
        Q-head hidden width (64).
    gnn_layers : int
        Message-passing layers (2), each a message Linear + ReLU, a masked mean and a GRUCell update, then
        the shared LayerNorm.
    adj_mode : {"in", "out_rows", "sym"}
        Whose messages node i averages: ``in`` its in-neighbours (``adj[j, i]``, where information flows
        from), ``out_rows`` the rows of A (its out-neighbours; the original code), ``sym`` both.
    self_loops : bool
        Node i also averages its own message (the paper's A0 = I). The diagonal of ``adj`` counts either way.
    n_agents : int
        Team size the mixer was built for (its hypernetwork emits ``n_agents * mix_hidden`` weights).
    state_dim : int
        Global-state width; 0 means ``n_agents * obs_dim + 3``.
    mix_hidden, hyper_hidden : int
        Mixing width M (64) and hypernetwork hidden width (64).
    b1_hidden : bool
        ``hyper_b1`` has a hidden layer (the paper) instead of a single Linear (the original code).
    ln_eps : float
        LayerNorm epsilon.
    """

    obs_dim: int = 51
    hidden: int = 128
    n_actions: int = 6
    head_hidden: int = 64
    gnn_layers: int = 2
    adj_mode: str = "in"
    self_loops: bool = True
    n_agents: int = 3
    state_dim: int = 0
    mix_hidden: int = 64
    hyper_hidden: int = 64
    b1_hidden: bool = False
    ln_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in (
            "obs_dim",
            "hidden",
            "n_actions",
            "head_hidden",
            "n_agents",
            "mix_hidden",
            "hyper_hidden",
        ):
            if int(getattr(self, name)) < 1:
                raise InvalidArgumentError(f"{name} must be >= 1; got {getattr(self, name)}", name)
        if self.gnn_layers < 0:
            raise InvalidArgumentError(f"gnn_layers must be >= 0; got {self.gnn_layers}", "gnn_layers")
        if self.adj_mode not in ADJ_MODES:
            raise InvalidArgumentError(
                f"adj_mode must be one of {ADJ_MODES}; got {self.adj_mode!r}", "adj_mode"
            )
        if self.state_dim < 0:
            raise InvalidArgumentError(f"state_dim must be >= 0; got {self.state_dim}", "state_dim")
        if self.state_dim == 0:
            object.__setattr__(self, "state_dim", self.n_agents * self.obs_dim + 3)
        if not self.ln_eps > 0:
            raise InvalidArgumentError(f"ln_eps must be > 0; got {self.ln_eps}", "ln_eps")

    @classmethod
    def original(cls, *, n_agents: int = 3, obs_dim: int = 51) -> QMixConfig:
        """The original repository's network (spec §4, its "code" column), field by field.

        The GNN averages the rows of A (``adj_mode="out_rows"``: each node its out-neighbours) with no self-loops
        (``A @ m / max(rowsum(A), 1)``), and ``hyper_b1`` is a single Linear (``b1_hidden=False``); every width
        is the original's (H 128, Q-head 64, 2 GNN layers, 6 actions, mixing and hypernetwork width 64,
        LayerNorm eps 1e-5). ``n_agents`` and ``obs_dim`` follow the team and the observation. The training
        dropout (0.1) is a training setting (``TrainConfig.dropout``), not part of this config.
        """
        return cls(
            obs_dim=obs_dim,
            hidden=128,
            n_actions=6,
            head_hidden=64,
            gnn_layers=2,
            adj_mode="out_rows",
            self_loops=False,
            n_agents=n_agents,
            state_dim=0,
            mix_hidden=64,
            hyper_hidden=64,
            b1_hidden=False,
            ln_eps=1e-5,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> QMixConfig:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"qmix config is not JSON: {exc}", "checkpoint") from None
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidArgumentError(f"qmix config has unknown fields {unknown}", "checkpoint")
        return cls(**raw)


def agent_keys(config: QMixConfig) -> list[tuple[str, tuple[int, ...]]]:
    """The agent network's tensors in a fixed order, with their shapes."""
    H, A, Hq = config.hidden, config.n_actions, config.head_hidden
    keys = [("agent.input.weight", (H, config.obs_dim)), ("agent.input.bias", (H,))]
    for layer in range(config.gnn_layers):
        p = f"agent.gnn.{layer}"
        keys += [(f"{p}.message.weight", (H, H)), (f"{p}.message.bias", (H,))]
        keys += _gru_keys(f"{p}.update", H)
    keys += [("agent.norm.weight", (H,)), ("agent.norm.bias", (H,))]
    keys += _gru_keys("agent.rnn", H)
    keys += [
        ("agent.head.0.weight", (Hq, H)),
        ("agent.head.0.bias", (Hq,)),
        ("agent.head.2.weight", (A, Hq)),
        ("agent.head.2.bias", (A,)),
    ]
    return keys


def mixer_keys(config: QMixConfig) -> list[tuple[str, tuple[int, ...]]]:
    """The mixer's tensors in a fixed order, with their shapes."""
    S, M, Hh = config.state_dim, config.mix_hidden, config.hyper_hidden
    keys = _mlp_keys("mixer.hyper_w1", S, Hh, config.n_agents * M)
    if config.b1_hidden:
        keys += _mlp_keys("mixer.hyper_b1", S, Hh, M)
    else:
        keys += [("mixer.hyper_b1.weight", (M, S)), ("mixer.hyper_b1.bias", (M,))]
    keys += _mlp_keys("mixer.hyper_w2", S, Hh, M)
    keys += _mlp_keys("mixer.hyper_b2", S, Hh, 1)
    return keys


def _gru_keys(prefix: str, H: int) -> list[tuple[str, tuple[int, ...]]]:
    return [
        (f"{prefix}.weight_ih", (3 * H, H)),
        (f"{prefix}.weight_hh", (3 * H, H)),
        (f"{prefix}.bias_ih", (3 * H,)),
        (f"{prefix}.bias_hh", (3 * H,)),
    ]


def _mlp_keys(prefix: str, n_in: int, n_hidden: int, n_out: int) -> list[tuple[str, tuple[int, ...]]]:
    return [
        (f"{prefix}.0.weight", (n_hidden, n_in)),
        (f"{prefix}.0.bias", (n_hidden,)),
        (f"{prefix}.2.weight", (n_out, n_hidden)),
        (f"{prefix}.2.bias", (n_out,)),
    ]


@dataclass(frozen=True, eq=False)
class QMixParams:
    """Validated float32 weights of the agent network (and optionally the mixer), read-only.

    Build with :meth:`load` (a checkpoint file), :meth:`random` (tests, benchmarks) or
    :meth:`from_tensors` (e.g. a torch ``state_dict`` converted to numpy).
    """

    config: QMixConfig
    tensors: Mapping[str, np.ndarray]
    metadata: Mapping[str, str] = field(default_factory=dict)
    # Backend-specific packed copies of the weights (e.g. transposed for the CPU kernels), built on first use.
    _packed: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def has_mixer(self) -> bool:
        # mixer_keys(...)[0][0] for every config; a constant because ops checks it on every call
        return "mixer.hyper_w1.0.weight" in self.tensors

    def packed(
        self, key: str, build: Callable[[QMixConfig, list[np.ndarray], list[np.ndarray] | None], Any]
    ) -> Any:
        """A backend's packed copy of the weights under ``key``: ``build(config, agent_arrays, mixer_arrays or
        None)`` on first use, then cached on these params."""
        value = self._packed.get(key)
        if value is None:
            mixer = self.mixer_arrays() if self.has_mixer else None
            value = self._packed.setdefault(key, build(self.config, self.agent_arrays(), mixer))
        return value

    def agent_arrays(self) -> list[np.ndarray]:
        """The agent network's arrays in :func:`agent_keys` order."""
        return [self.tensors[k] for k, _ in agent_keys(self.config)]

    def mixer_arrays(self) -> list[np.ndarray]:
        """The mixer's arrays in :func:`mixer_keys` order; InvalidArgumentError when there is no mixer."""
        if not self.has_mixer:
            raise InvalidArgumentError(
                "these qmix params hold no mixer (an inference-only checkpoint)", "params"
            )
        return [self.tensors[k] for k, _ in mixer_keys(self.config)]

    @classmethod
    def from_tensors(
        cls,
        config: QMixConfig,
        tensors: Mapping[str, Any],
        metadata: Mapping[str, str] | None = None,
        *,
        source: str = "tensors",
    ) -> QMixParams:
        """Checks names, shapes and finiteness; copies every array to a read-only float32 C array.
        Extra tensors are ignored; the mixer is kept only when all its tensors are present."""
        out: dict[str, np.ndarray] = {}
        wanted = agent_keys(config)
        mixer = mixer_keys(config)
        if any(k in tensors for k, _ in mixer):
            wanted = wanted + mixer
        for name, shape in wanted:
            if name not in tensors:
                raise InvalidArgumentError(f"{source}: tensor {name!r} is missing", "params")
            arr = np.array(tensors[name], dtype=np.float32, order="C")
            if arr.shape != shape:
                raise InvalidArgumentError(
                    f"{source}: tensor {name!r} has shape {arr.shape}; the config needs {shape}", "params"
                )
            if not np.isfinite(arr).all():
                raise InvalidArgumentError(f"{source}: tensor {name!r} holds NaN or infinity", "params")
            arr.flags.writeable = False
            out[name] = arr
        return cls(config, out, dict(metadata or {}))

    @classmethod
    def load(cls, path: str | Path) -> QMixParams:
        """Reads a toporoute.qmix safetensors checkpoint (no torch needed)."""
        tensors, meta = read_safetensors(path)
        if meta.get("format") != FORMAT:
            raise InvalidArgumentError(
                f"{path}: not a toporoute Q-Mix checkpoint (metadata format={meta.get('format')!r}, "
                f"expected {FORMAT!r})",
                "checkpoint",
            )
        if "config" not in meta:
            raise InvalidArgumentError(f"{path}: checkpoint metadata lacks 'config'", "checkpoint")
        return cls.from_tensors(QMixConfig.from_json(meta["config"]), tensors, meta, source=str(path))

    def save(self, path: str | Path, metadata: Mapping[str, str] | None = None) -> None:
        """Writes the checkpoint atomically; ``metadata`` entries are added to the stored ones."""
        meta = {**self.metadata, **(metadata or {})}
        meta.update(format=FORMAT, format_version=FORMAT_VERSION, config=self.config.to_json())
        write_safetensors(path, dict(self.tensors), meta)

    @classmethod
    def random(cls, config: QMixConfig | None = None, *, seed: int = 0, mixer: bool = True) -> QMixParams:
        """PyTorch-like uniform init (``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, LayerNorm 1 / 0) from ``seed``."""
        config = config or QMixConfig()
        rng = np.random.default_rng(seed)
        keys = agent_keys(config) + (mixer_keys(config) if mixer else [])
        tensors: dict[str, np.ndarray] = {}
        fan_in = 1
        for name, shape in keys:
            if name == "agent.norm.weight":
                tensors[name] = np.ones(shape, np.float32)
                continue
            if name == "agent.norm.bias":
                tensors[name] = np.zeros(shape, np.float32)
                continue
            if len(shape) == 2:
                fan_in = shape[1]
            bound = 1.0 / np.sqrt(config.hidden if ".weight_" in name or ".bias_" in name else fan_in)
            tensors[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
        return cls.from_tensors(config, tensors, source="random")
