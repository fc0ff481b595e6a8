"""The server's settings: one frozen dataclass, built by the CLI or by tests."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from .._argtypes import int_at_least
from .._checks import at_least
from .._options import OptionGroup, check_fields, option
from ..errors import InvalidArgumentError, OutOfRangeError

__all__ = ["SERVE_OPTIONS", "ServeConfig"]


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

    host: str = option("127.0.0.1", help="bind address (default 127.0.0.1)")
    port: int = option(8080, help="port (default 8080; 0: any free port)")
    workers: int = option(1, type=int_at_least(1), help="worker processes (default 1)")
    backend: str | None = option(
        None,
        choices=("reference", "cpu", "cuda"),
        help="ops backend (default: $TOPOROUTE_BACKEND, else cpu when the compiled core is built, else reference)",
    )
    qmix_checkpoint: Path | None = option(
        None, type=Path, help="Q-Mix weights for /v1/qmix/act (default: none, the endpoint answers 503)"
    )
    token: str | None = None  # the command reads it from --token-file or $TOPOROUTE_TOKEN
    allow_remote: bool = option(
        False, help="bind a non-loopback host even without a token (default: refused)"
    )
    max_body_bytes: int = option(
        8 * 1024 * 1024, type=int_at_least(1), help="largest request body in bytes (default 8 MiB)"
    )
    max_episodes: int = option(1024, type=int_at_least(1), help="episodes per request (default 1024)")
    max_agents: int = option(256, type=int_at_least(1), help="agents per episode (default 256)")
    max_text_chars: int = option(4096, type=int_at_least(1), help="characters per text (default 4096)")
    max_texts: int = 4096
    encoder_cache_size: int = option(8192, type=int_at_least(0), help="texts cached (default 8192)")
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
        check_fields(self)  # backend among its choices
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


SERVE_OPTIONS = OptionGroup("server", ServeConfig)
"""``toporoute serve``'s flags: one per :class:`ServeConfig` field that declares one (``token`` comes from
``--token-file`` or ``$TOPOROUTE_TOKEN``; ``max_texts`` and ``max_wait`` have no flag)."""
