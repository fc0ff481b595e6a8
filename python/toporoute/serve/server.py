"""Running the app: ``toporoute serve`` (see :func:`serve`) on uvicorn.

Shutdown: on SIGTERM or SIGINT uvicorn closes the listening socket at once (new connections are refused), lets
the requests in flight finish (at most ``graceful_timeout`` seconds, then cancels them), runs the app's
shutdown and returns; the command then exits 0 for SIGTERM (a shutdown that was asked for) and 130 for SIGINT.
With ``--workers N > 1`` uvicorn's supervisor starts N processes, each with its own app built from the
configuration handed over in the environment (:func:`app_from_env`); each worker then coalesces its own
requests. An address that cannot be bound (a port in use) raises :class:`OSError` naming it before uvicorn
starts, so the command prints one ``toporoute: error: ...`` line and exits 2.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import signal
import socket
from pathlib import Path
from types import FrameType
from typing import Any

from ..errors import InvalidArgumentError
from .config import ServeConfig

__all__ = ["CONFIG_ENV", "TOKEN_ENV", "app_from_env", "read_token", "serve"]

log = logging.getLogger("toporoute.serve")

TOKEN_ENV = "TOPOROUTE_TOKEN"
# The configuration of `--workers N` processes (JSON, without the token: that travels in TOKEN_ENV).
CONFIG_ENV = "TOPOROUTE_SERVE_CONFIG"


def read_token(token_file: Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The bearer token: the first line of ``token_file`` (stripped), else ``$TOPOROUTE_TOKEN``, else None.

    Raises
    ------
    InvalidArgumentError
        The file is empty (naming ``--token-file``).
    """
    env = os.environ if environ is None else environ
    if token_file is not None:
        lines = Path(token_file).read_text(encoding="utf-8").splitlines()
        token = lines[0].strip() if lines else ""
        if not token:
            raise InvalidArgumentError(
                f"--token-file {token_file} is empty; expected the token", "--token-file"
            )
        return token
    token = env.get(TOKEN_ENV, "").strip()
    return token or None


def _to_json(config: ServeConfig) -> str:
    raw = dataclasses.asdict(config)
    raw["token"] = None
    raw["qmix_checkpoint"] = str(config.qmix_checkpoint) if config.qmix_checkpoint else None
    return json.dumps(raw)


def app_from_env() -> Any:
    """The app of one ``--workers`` process: the configuration from ``$TOPOROUTE_SERVE_CONFIG``, the token from
    ``$TOPOROUTE_TOKEN`` (uvicorn's ``factory=True`` entry)."""
    from .app import create_app

    raw = json.loads(os.environ[CONFIG_ENV])
    raw["token"] = read_token(None)
    if raw.get("qmix_checkpoint"):
        raw["qmix_checkpoint"] = Path(raw["qmix_checkpoint"])
    return create_app(ServeConfig(**raw))


def check_bindable(host: str, port: int) -> None:
    """Raises :class:`OSError` naming ``host:port`` when it cannot be bound (in use, or not this machine's).

    Bound the way uvicorn binds (``SO_REUSEADDR``) and closed at once; port 0 (any free port) always binds.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            in_use = exc.errno == errno.EADDRINUSE
            hint = " (is another server using it? choose another port with --port)" if in_use else ""
            raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from None


def serve(config: ServeConfig, *, log_level: str = "info", graceful_timeout: float | None = 30.0) -> int:
    """Serves ``config`` until SIGTERM or SIGINT; returns the exit status (0 after SIGTERM).

    Parameters
    ----------
    config : ServeConfig
    log_level : str
        uvicorn's log level (its access log names method, path and status, never headers).
    graceful_timeout : float, optional
        Seconds in-flight requests get after the signal (None: as long as they take).
    """
    import uvicorn

    check_bindable(config.host, config.port)
    timeout = None if graceful_timeout is None else max(1, round(graceful_timeout))
    # the same listener and shutdown in both forms (worker processes or this one)
    listen: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "log_level": log_level,
        "timeout_graceful_shutdown": timeout,
    }
    if config.workers > 1:
        os.environ[CONFIG_ENV] = _to_json(config)
        if config.token is not None:
            os.environ[TOKEN_ENV] = config.token
        uvicorn.run("toporoute.serve.server:app_from_env", factory=True, workers=config.workers, **listen)
        return 0
    from .app import create_app

    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", **listen))
    terminated: list[int] = []

    def _note(sig: int, frame: FrameType | None) -> None:  # uvicorn re-raises the signal after its shutdown
        terminated.append(sig)

    previous = signal.signal(signal.SIGTERM, _note)
    try:
        server.run()
    except SystemExit:
        if server.started:
            raise
        # uvicorn exits 3 when its own bind fails (the port was taken after the check above); its log says why
        raise OSError(f"cannot listen on {config.host}:{config.port} (see the log line above)") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0
