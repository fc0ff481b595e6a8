"""The server's settings: one frozen dataclass, built by the CLI or by tests."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from .._checks import at_least
from ..errors import InvalidArgumentError, OutOfRangeError

__all__ = ["ServeConfig"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServeConfig:
    """Settings of :func:`toporoute.serve.create_app` and ``toporoute serve``.

    Parameters
    ----------
    host, port : str, int
        Where uvicorn binds. Without a token a non-loopback host is refused unless ``allow_remote``.
    workers : int
        uvicorn worker processes (each has its own Router and encoder; batches are shared within a worker).
    backend : str, optional
        Backend of the ops (``"reference"``, ``"cpu"``, ``"cuda"``; None: the default choice of
        :mod:`toporoute.ops`).
    qmix_checkpoint : Path, optional
        Agent Q-Mix weights (``.safetensors``) for ``/v1/qmix/act``; without them that endpoint answers 503.
    token : str, optional
        Bearer token required on ``/v1/*`` and ``/metrics``; never logged (``repr`` hides it).
    allow_remote : bool
        Bind a non-loopback host without a token.
    max_body_bytes, max_episodes, max_agents, max_text_chars, max_texts : int
        Request limits (413 for the body, 422 naming the field for the others): bytes per body, episodes (or
        graphs, plans) per request, agents per episode, characters per text, texts per ``/v1/embed`` call.
    encoder_cache_size : int
        Texts kept in the encoder's embedding cache.
    max_wait : float
        Seconds the Router waits for concurrent text requests to join a shared batch.
    """

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    backend: str | None = None
    qmix_checkpoint: Path | None = None
    token: str | None = None
    allow_remote: bool = False
    max_body_bytes: int = 8 * 1024 * 1024
    max_episodes: int = 1024
    max_agents: int = 256
    max_text_chars: int = 4096
    max_texts: int = 4096
    encoder_cache_size: int = 8192
    max_wait: float = 0.002

    def __post_init__(self) -> None:
        for name in (
            "workers",
            "max_body_bytes",
            "max_episodes",
            "max_agents",
            "max_text_chars",
            "max_texts",
        ):
            value = getattr(self, name)
            if int(value) < 1:
                raise OutOfRangeError(f"{name} must be >= 1; got {value}", name)
        if not 0 <= int(self.port) <= 65535:
            raise OutOfRangeError(f"port must be in [0, 65535]; got {self.port}", "port")
        at_least("encoder_cache_size", self.encoder_cache_size, 0, error=OutOfRangeError)
        at_least("max_wait", self.max_wait, 0, error=OutOfRangeError)
        if self.token is not None and not self.token.strip():
            raise InvalidArgumentError("token must not be empty or blank; got a blank string", "token")
        if self.token is None and not self.allow_remote and not _is_loopback(self.host):
            raise InvalidArgumentError(
                f"host {self.host!r} is not a loopback address: without a token the server binds to loopback "
                "only; set a token (--token-file or TOPOROUTE_TOKEN) or pass --allow-remote",
                "host",
            )

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{k}={'***' if k == 'token' and v is not None else repr(v)}" for k, v in self.__dict__.items()
        )
        return f"ServeConfig({fields})"
