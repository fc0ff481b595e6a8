"""Training an Agent Q-Mix policy with QMIX (spec §5), on any engine.

Each episode runs the real method loop (:class:`~toporoute.methods.qmix.method.QMix`, acting with the compiled
forward in eval mode and epsilon-greedy exploration), is scored like a benchmark run, and becomes one replay
entry: per round the observations, the graph the GNN read, the joint action and the global state, plus the
episode reward ``R = w_acc * acc - w_tok * min(tokens / 10000, 1)`` with the engine's token counts. After every
episode (once the buffer holds ``batch_size`` episodes) one gradient step on the TD loss: both networks are
unrolled over the stored rounds, the target is ``y_t = r_t + gamma (1 - done_t) max Q_tot^-(t + 1)``, with the
reward at the last round only (``legacy_reward_broadcast``: R at every round and no loss on the last round,
as the original code), Adam, gradient-norm clipping, then a soft (or periodic hard) target update.

Output folder::

    OUT/train.json             settings (a resumed run must use the same ones)
    OUT/policy.safetensors     the latest policy (toporoute.qmix checkpoint: loads without torch; its metadata
                               lists the training task ids, which ``toporoute run qmix`` will not evaluate on)
    OUT/best.safetensors       the policy after the episode with the best reward so far
    OUT/state.pt               everything needed to resume: networks, optimizer, replay, RNG states, log
    OUT/log.jsonl              one line per episode: reward, accuracy, tokens, epsilon, actions, loss
    OUT/episodes/, traces/     the episodes' records and round traces (as in a benchmark run)
    OUT/figures/*.png          reward, epsilon and loss curves

Everything is written atomically after each episode, so an interrupted run resumes where it stopped and loses
at most the episodes in flight.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..._atomic import write_bytes_atomic, write_json_atomic
from ..._runlock import RunLock
from ...errors import InvalidArgumentError, ToporouteError
from ...llm.base import Engine
from ...runtime import Runtime
from ...tasks import Task
from ...types.qmix_params import QMixConfig, QMixParams
from ..harness import check_resume, episode_fn, versions
from ._features import Features
from .method import QMix, QMixPolicy
from .model import QMixNets
from .settings import QMixSettings
from .train_config import TrainConfig

__all__ = ["TrainConfig", "Trainer", "epsilon_at"]

_KEEP = ("tasks", "task_ids", "net", "features", "settings", "train", "engine", "model")


def epsilon_at(config: TrainConfig, episode: int) -> float:
    """Linear decay per episode from ``eps_start`` by ``(eps_start - eps_end) / episodes``, floored."""
    step = (config.eps_start - config.eps_end) / config.episodes
    return max(config.eps_end, config.eps_start - step * episode)


class Trainer:
    """Trains a Q-Mix policy into ``out_dir`` (resuming what is there).

    Parameters
    ----------
    tasks : sequence of Task
        The training set (one domain for a per-domain policy, or mixed kinds for a unified one).
    engine : Engine
    out_dir : path
    net : QMixConfig, optional
        Network shapes and semantics (default ``QMixConfig()``; ``QMixConfig.original()`` is the original
        repository's network); ``obs_dim`` / ``state_dim`` are set from ``features``. Recorded in the checkpoint.
    features : Features, optional
    settings : QMixSettings, optional
        The episode loop (rounds, flags, sampling); ``epsilon`` is set by the schedule.
    train : TrainConfig, optional
    info : dict, optional
        Recorded in train.json (``tasks`` spec, ``engine``, ``model``).
    encoder_dim : int
        Width of the encoder's embedding (``features.task_feature == "encoder"``).
    eval_timeout_s : float
        Sandbox time limit per code answer.
    progress : bool
        One line per episode on stderr.
    lock : RunLock, optional
        The folder's lock (:class:`toporoute._runlock.RunLock`), when the caller took it already; :meth:`run`
        holds it (default: a new one on ``out_dir``), so a second training on the folder is refused at once.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        engine: Engine,
        out_dir: str | Path,
        *,
        net: QMixConfig | None = None,
        features: Features | None = None,
        settings: QMixSettings | None = None,
        train: TrainConfig | None = None,
        info: dict[str, Any] | None = None,
        encoder_dim: int = 384,
        eval_timeout_s: float = 10.0,
        progress: bool = True,
        lock: RunLock | None = None,
    ) -> None:
        if not tasks:
            raise InvalidArgumentError("training needs at least one task", "tasks")
        # the folder's lock for run(): the caller's when it took it already (the CLI, before the engine starts)
        self.lock = lock or RunLock(out_dir, what="a training run")
        self.tasks = list(tasks)
        self.engine = engine
        self.out = Path(out_dir)
        self.features = features or Features()
        self.settings = settings or QMixSettings()
        self.train_config = train or TrainConfig()
        base = net or QMixConfig()
        self.net_config = replace(base, obs_dim=self.features.obs_dim(encoder_dim), state_dim=0)
        self.info = dict(info or {})
        self.progress = progress
        self.eval_timeout_s = eval_timeout_s
        torch.manual_seed(self.train_config.seed)
        self.nets = QMixNets(self.net_config, dropout=self.train_config.dropout)
        self.target = QMixNets(self.net_config, dropout=0.0)
        self.target.load_state_dict(self.nets.state_dict())
        self.target.eval()
        self.optimizer = torch.optim.Adam(self.nets.parameters(), lr=self.train_config.lr)
        self.rng = np.random.default_rng(self.train_config.seed)
        self.buffer: list[dict[str, Any]] = []
        self.episode = 0
        self.grad_steps = 0
        self.best_reward: float | None = None
        self.log: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ files

    def _config(self) -> dict[str, Any]:
        return {
            "v": 1,
            "tasks": self.info.get("tasks"),
            "task_ids": [t.id for t in self.tasks],
            "net": asdict(self.net_config),
            "features": asdict(self.features),
            "settings": asdict(self.settings),
            # more episodes may be asked for when resuming; every other setting must match
            "train": {k: v for k, v in asdict(self.train_config).items() if k != "episodes"},
            "episodes": self.train_config.episodes,
            "engine": self.info.get("engine"),
            "model": self.info.get("model", getattr(self.engine, "name", None)),
            # what the engine ran in and why (vLLM's dtype choice); recorded, not a resume key
            **{k: self.info[k] for k in ("dtype", "dtype_reason") if k in self.info},
        }

    def _save_state(self) -> None:
        state = {
            "episode": self.episode,
            "grad_steps": self.grad_steps,
            "best_reward": self.best_reward,
            "online": self.nets.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "buffer": [{k: torch.as_tensor(v) for k, v in e.items()} for e in self.buffer],
            "rng": json.dumps(self.rng.bit_generator.state),
            "torch_rng": torch.get_rng_state(),
            "log": json.dumps(self.log),
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        write_bytes_atomic(self.out / "state.pt", buf.getvalue())

    def _load_state(self) -> bool:
        path = self.out / "state.pt"
        if not path.is_file():
            return False
        try:
            state = torch.load(path, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable state is reported the same way
            raise ToporouteError(f"{path} cannot be read ({exc}); remove it to restart training") from None
        self.nets.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer = [{k: v.numpy() for k, v in e.items()} for e in state["buffer"]]
        self.rng.bit_generator.state = json.loads(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        self.episode = int(state["episode"])
        self.grad_steps = int(state["grad_steps"])
        self.best_reward = state["best_reward"]
        self.log = json.loads(state["log"])
        return True

    def _metadata(self) -> dict[str, str]:
        kinds = sorted({t.kind for t in self.tasks})
        digest = hashlib.sha256()
        for k, v in sorted(self.nets.state_dict().items()):
            digest.update(k.encode())
            digest.update(v.detach().cpu().numpy().tobytes())
        return {
            "features": self.features.to_json(),
            "settings": json.dumps(asdict(self.settings), sort_keys=True),
            "train": json.dumps(asdict(self.train_config), sort_keys=True),
            "domains": ",".join(kinds),
            "episodes": str(self.episode),
            "grad_steps": str(self.grad_steps),
            "checkpoint_id": digest.hexdigest()[:16],
            # the training set, so that an evaluation can leave it out (QMix.select_tasks)
            "task_ids": json.dumps([t.id for t in self.tasks]),
        }

    def policy_params(self) -> QMixParams:
        """The online network's current weights as a checkpoint (agent network + mixer)."""
        return self.nets.to_params(self._metadata())

    # ------------------------------------------------------------------ learning

    def push(self, steps: Sequence[dict[str, Any]], reward: float) -> None:
        """Adds one finished episode (its per-round ``obs``, ``adj``, ``actions``, ``state``) to the replay."""
        entry = {
            "obs": np.asarray([s["obs"] for s in steps], np.float32),
            "adj": np.asarray([s["adj"] for s in steps], np.float32),
            "actions": np.asarray([s["actions"] for s in steps], np.int64),
            "state": np.asarray([s["state"] for s in steps], np.float32),
            "reward": np.float32(reward),
        }
        n = self.net_config.n_agents
        if entry["obs"].shape[1:] != (n, self.net_config.obs_dim):
            raise InvalidArgumentError(
                f"episode observations have shape {entry['obs'].shape[1:]}; the network needs "
                f"({n}, {self.net_config.obs_dim})",
                "steps",
            )
        self.buffer.append(entry)
        if len(self.buffer) > self.train_config.buffer_size:
            self.buffer.pop(0)

    def _batch(self) -> dict[str, torch.Tensor]:
        c = self.train_config
        idx = self.rng.choice(len(self.buffer), size=min(c.batch_size, len(self.buffer)), replace=False)
        eps = [self.buffer[i] for i in idx]
        B, T = len(eps), max(len(e["actions"]) for e in eps)
        n, d, S = self.net_config.n_agents, self.net_config.obs_dim, self.net_config.state_dim
        obs = np.zeros((B, T, n, d), np.float32)
        adj = np.zeros((B, T, n, n), np.float32)
        act = np.zeros((B, T, n), np.int64)
        state = np.zeros((B, T, S), np.float32)
        reward = np.zeros((B, T), np.float32)
        done = np.zeros((B, T), np.float32)
        mask = np.zeros((B, T), np.float32)
        for b, e in enumerate(eps):
            L = len(e["actions"])
            obs[b, :L], adj[b, :L], act[b, :L], state[b, :L] = e["obs"], e["adj"], e["actions"], e["state"]
            done[b, L - 1] = 1.0
            if c.legacy_reward_broadcast:
                reward[b, :L] = e["reward"]
                mask[b, : L - 1] = 1.0
            else:
                reward[b, L - 1] = e["reward"]
                mask[b, :L] = 1.0
        arrays = {
            "obs": obs,
            "adj": adj,
            "actions": act,
            "state": state,
            "reward": reward,
            "done": done,
            "mask": mask,
        }
        return {k: torch.from_numpy(v) for k, v in arrays.items()}

    @staticmethod
    def _unroll(nets: QMixNets, obs: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        """Per-round Q-values (B, T, n, A) from z0 = 0."""
        qs, z = [], None
        for t in range(obs.shape[1]):
            q, z = nets.agent(obs[:, t], adj[:, t], z)
            qs.append(q)
        return torch.stack(qs, dim=1)

    def update(self) -> float | None:
        """One TD step on a sampled batch; None when the batch has no step to train on."""
        c = self.train_config
        b = self._batch()
        if float(b["mask"].sum()) == 0.0:
            return None
        B, T, n = b["actions"].shape
        S = self.net_config.state_dim
        self.nets.train()
        q = self._unroll(self.nets, b["obs"], b["adj"])
        q_taken = q.gather(-1, b["actions"][..., None]).squeeze(-1)
        q_tot = self.nets.mixer(q_taken.reshape(B * T, n), b["state"].reshape(B * T, S)).view(B, T)
        with torch.no_grad():
            tq = self._unroll(self.target, b["obs"], b["adj"]).max(dim=-1).values
            t_tot = self.target.mixer(tq.reshape(B * T, n), b["state"].reshape(B * T, S)).view(B, T)
            nxt = torch.cat([t_tot[:, 1:], torch.zeros(B, 1)], dim=1)
            y = b["reward"] + c.gamma * (1.0 - b["done"]) * nxt
        loss = (((q_tot - y) ** 2) * b["mask"]).sum() / b["mask"].sum()
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.nets.parameters(), c.grad_clip)
        self.optimizer.step()
        self.grad_steps += 1
        with torch.no_grad():
            if c.target_update == "soft":
                for tp, p in zip(self.target.parameters(), self.nets.parameters()):
                    tp.mul_(1.0 - c.target_tau).add_(p, alpha=c.target_tau)
            elif self.grad_steps % c.target_interval == 0:
                self.target.load_state_dict(self.nets.state_dict())
        return float(loss.item())

    # ------------------------------------------------------------------ the loop

    async def run(self) -> dict[str, Any]:
        """Trains until ``train.episodes`` episodes are done; returns the last log entry plus totals."""
        with self.lock:
            return await self._run()

    async def _run(self) -> dict[str, Any]:
        c = self.train_config
        config = self._config()
        check_resume(self.out / "train.json", config, _KEEP, what="a training run")
        resumed = self._load_state()
        if not resumed:
            config.update(
                started=datetime.now(timezone.utc).isoformat(timespec="seconds"), versions=versions()
            )
            write_json_atomic(self.out / "train.json", config)
        elif self.progress:
            print(f"resuming at episode {self.episode} of {c.episodes}", file=sys.stderr, flush=True)
        eval_gate = asyncio.Semaphore(2)
        while self.episode < c.episodes:
            group = list(range(self.episode, min(self.episode + c.concurrency, c.episodes)))
            policy = QMixPolicy(self.nets.to_params(), self.features)
            fns = []
            for k in group:
                task = self.tasks[k % len(self.tasks)]
                method = QMix(policy, replace(self.settings, epsilon=epsilon_at(c, k)), name="qmix-train")
                fns.append(
                    (
                        _episode_id(k, task),
                        episode_fn(method, task, self.out, eval_gate, timeout_s=self.eval_timeout_s),
                    )
                )
            t0 = time.perf_counter()
            summary = await Runtime(
                self.engine, concurrency=len(group), out_dir=self.out, progress=False
            ).run(fns)
            wall = time.perf_counter() - t0
            for k, outcome in zip(group, summary.outcomes):
                if outcome.status == "error" or outcome.record is None:
                    raise ToporouteError(
                        f"training episode {outcome.episode} failed: {(outcome.error or '').strip()[-400:]}\n"
                        f"(its record is in {self.out / 'episodes'}); rerun the same command to resume"
                    )
                self._learn(k, outcome.record, outcome.usage or {}, wall / len(group))
        self._save_state()
        try:
            from ._report import write_training_figures

            write_training_figures(self.out, self.log)
        except ImportError:
            print("matplotlib is not installed: no training figures", file=sys.stderr)
        return {**(self.log[-1] if self.log else {}), "grad_steps": self.grad_steps, "out": str(self.out)}

    def _learn(self, k: int, record: dict[str, Any], usage: dict[str, Any], wall_s: float) -> None:
        c = self.train_config
        accuracy = 1.0 if (record.get("score") or {}).get("passed") else 0.0
        tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        reward = c.reward(accuracy, tokens)
        steps = (record.get("qmix") or {}).get("steps") or []
        self.push(steps, reward)
        loss = self.update() if len(self.buffer) >= c.batch_size else None
        self.episode = k + 1
        entry = {
            "episode": k,
            "task": record.get("task"),
            "reward": round(reward, 6),
            "accuracy": accuracy,
            "tokens": tokens,
            "epsilon": round(epsilon_at(c, k), 6),
            "actions": [s["actions"] for s in steps],
            "loss": None if loss is None else round(loss, 6),
            "grad_steps": self.grad_steps,
            "wall_s": round(wall_s, 3),
        }
        self.log.append(entry)
        params = self.policy_params()
        params.save(self.out / "policy.safetensors")
        if self.best_reward is None or reward > self.best_reward:
            self.best_reward = reward
            params.save(self.out / "best.safetensors")
        write_bytes_atomic(
            self.out / "log.jsonl", "".join(json.dumps(e) + "\n" for e in self.log).encode("utf-8")
        )
        self._save_state()
        if self.progress:
            print(
                f"episode {k + 1}/{c.episodes} {record.get('task')}: reward {reward:+.3f} "
                f"(acc {accuracy:.0f}, {tokens} tokens), eps {entry['epsilon']:.3f}, "
                f"actions {entry['actions']}, loss {'-' if loss is None else f'{loss:.4f}'}",
                file=sys.stderr,
                flush=True,
            )


def _episode_id(k: int, task: Task) -> str:
    return f"e{k:05d}-{task.episode_id}"
