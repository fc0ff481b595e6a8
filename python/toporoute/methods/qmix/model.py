"""The Agent Q-Mix networks in PyTorch, for training (spec §4). Inference uses the compiled core
(:func:`toporoute.ops.qmix_forward`) on the same weights: ``state_dict`` keys are the checkpoint's tensor names
(:mod:`toporoute.types.qmix_params`), and the two are tested for parity.

Importing this module imports torch; nothing on the inference path does.
"""

from __future__ import annotations

import torch
from torch import nn

from ...types.qmix_params import QMixConfig, QMixParams

__all__ = ["QMixAgentNet", "QMixMixer", "QMixNets"]


def _mlp(n_in: int, n_hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, n_hidden), nn.ReLU(), nn.Linear(n_hidden, n_out))


class _GNNLayer(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.message = nn.Linear(hidden, hidden)
        self.update = nn.GRUCell(hidden, hidden)


class QMixAgentNet(nn.Module):
    """Input projection + ReLU -> ``gnn_layers`` x (message, neighbour mean, GRUCell, dropout, shared LayerNorm)
    -> GRUCell memory -> Q-head. Shared by all agents (identity is in the observation)."""

    def __init__(self, config: QMixConfig, dropout: float = 0.1) -> None:
        super().__init__()
        self.config = config
        H = config.hidden
        self.input = nn.Linear(config.obs_dim, H)
        self.gnn = nn.ModuleList(_GNNLayer(H) for _ in range(config.gnn_layers))
        self.norm = nn.LayerNorm(H, eps=config.ln_eps)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRUCell(H, H)
        self.head = _mlp(H, config.head_hidden, config.n_actions)

    def neighbours(self, adj: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """(B, N, N) float: ``E[b, i, j] = 1`` iff node i averages node j's message."""
        a = adj.bool()
        mode = self.config.adj_mode
        e = a.transpose(1, 2) if mode == "in" else a if mode == "out_rows" else a | a.transpose(1, 2)
        if self.config.self_loops:
            e = e | torch.eye(a.shape[-1], dtype=torch.bool, device=a.device)
        e = e & active[:, :, None] & active[:, None, :]
        return e.to(torch.float32)

    def forward(
        self,
        obs: torch.Tensor,
        adj: torch.Tensor,
        hidden: torch.Tensor | None = None,
        active: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs (B, N, obs_dim)``, ``adj (B, N, N)``, ``hidden (B, N, H)`` -> ``q (B, N, A)``, ``hidden``."""
        B, N, _ = obs.shape
        H = self.config.hidden
        act = torch.ones(B, N, dtype=torch.bool, device=obs.device) if active is None else active.bool()
        e = self.neighbours(adj, act)
        deg = e.sum(-1, keepdim=True).clamp(min=1.0)
        h = torch.relu(self.input(obs))
        layers: list[_GNNLayer] = list(self.gnn)  # type: ignore[arg-type]  # ModuleList holds modules
        for layer in layers:
            m = torch.relu(layer.message(h))
            agg = torch.bmm(e, m) / deg
            h = layer.update(agg.reshape(B * N, H), h.reshape(B * N, H)).reshape(B, N, H)
            h = self.norm(self.dropout(h))
        z = torch.zeros(B, N, H, device=obs.device) if hidden is None else hidden
        z = self.rnn(h.reshape(B * N, H), z.reshape(B * N, H)).reshape(B, N, H)
        q = self.head(z)
        keep = act[..., None].to(q.dtype)
        return q * keep, z * keep


class QMixMixer(nn.Module):
    """Monotonic mixing network with hypernetworks on the global state (abs() on the mixing weights)."""

    def __init__(self, config: QMixConfig) -> None:
        super().__init__()
        self.config = config
        S, M, Hh = config.state_dim, config.mix_hidden, config.hyper_hidden
        self.hyper_w1 = _mlp(S, Hh, config.n_agents * M)
        self.hyper_b1: nn.Module = _mlp(S, Hh, M) if config.b1_hidden else nn.Linear(S, M)
        self.hyper_w2 = _mlp(S, Hh, M)
        self.hyper_b2 = _mlp(S, Hh, 1)

    def forward(self, q_taken: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``q_taken (B, n_agents)``, ``state (B, S)`` -> ``q_tot (B,)``."""
        B = q_taken.shape[0]
        c = self.config
        w1 = self.hyper_w1(state).abs().view(B, c.n_agents, c.mix_hidden)
        b1 = self.hyper_b1(state).view(B, 1, c.mix_hidden)
        hid = torch.nn.functional.elu(torch.bmm(q_taken.view(B, 1, c.n_agents), w1) + b1)
        w2 = self.hyper_w2(state).abs().view(B, c.mix_hidden, 1)
        b2 = self.hyper_b2(state).view(B, 1, 1)
        q_tot: torch.Tensor = (torch.bmm(hid, w2) + b2).view(B)
        return q_tot


class QMixNets(nn.Module):
    """The agent network and the mixer under the checkpoint's names (``agent.*``, ``mixer.*``)."""

    def __init__(self, config: QMixConfig, dropout: float = 0.1) -> None:
        super().__init__()
        self.config = config
        self.agent = QMixAgentNet(config, dropout)
        self.mixer = QMixMixer(config)

    def to_params(self, metadata: dict[str, str] | None = None) -> QMixParams:
        """The weights as numpy :class:`QMixParams` (for the compiled forward or a checkpoint)."""
        tensors = {k: v.detach().cpu().numpy() for k, v in self.state_dict().items()}
        return QMixParams.from_tensors(self.config, tensors, metadata, source="torch model")

    def load_params(self, params: QMixParams) -> None:
        """Loads weights from :class:`QMixParams` (agent network, and the mixer when present)."""
        state = {k: torch.from_numpy(v.copy()) for k, v in params.tensors.items()}
        missing, unexpected = self.load_state_dict(state, strict=False)
        needed = [k for k in missing if k.startswith("agent.") or params.has_mixer]
        if needed or unexpected:
            raise ValueError(f"checkpoint does not fit the model: missing {needed}, unexpected {unexpected}")
