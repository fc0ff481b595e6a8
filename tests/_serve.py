"""A real ``toporoute serve`` app on a loopback port for tests and benchmarks: uvicorn in a thread of this
process (the same ASGI stack ``toporoute serve`` runs), started on a free port and stopped through uvicorn's
own graceful shutdown."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from toporoute.serve import ServeConfig, create_app

__all__ = ["live_server"]


@contextmanager
def live_server(config: ServeConfig | None = None, startup_timeout: float = 60.0) -> Iterator[str]:
    """Serves ``create_app(config)`` on ``127.0.0.1`` (a free port) and yields its base URL."""
    config = config or ServeConfig(port=0)
    app = create_app(config)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, name="toporoute-serve-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
