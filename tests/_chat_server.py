"""A minimal OpenAI-compatible chat server on 127.0.0.1 for the command's and the engines' tests (engine
failures, the run lock, several servers): every ``POST /v1/chat/completions`` gets ``reply`` after ``delay_s``
(``reply`` may be a function of the request's last message, so each request gets its own answer), and ``GET
/v1/models`` lists ``model`` (what the OpenAI engine probes a server with). After ``answers`` replies it stops
listening, so the next connection is refused (a server taken away mid-run); :meth:`ChatServer.kill` takes it
away at once, dropping the connections of the requests in flight (a server that crashed), and so does the
arrival of request number ``kill_at``."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops connections when many requests come at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a connection that kill() dropped under its handler


class ChatServer:
    def __init__(
        self,
        reply: str | Callable[[str], str],
        *,
        delay_s: float = 0.0,
        answers: int | None = None,
        kill_at: int | None = None,
        port: int = 0,
        model: str = "m",
    ) -> None:
        self.served = 0
        self.received = 0
        self.killed = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._open.add(self.connection)
                    if server.killed:  # accepted just before kill() closed the listening socket
                        _drop(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._open.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.received += 1
                    crash = server.received == kill_at
                if crash:  # this request and those in flight get no reply
                    threading.Thread(target=server.kill, daemon=True).start()
                time.sleep(delay_s)
                last = body["messages"][-1]["content"]
                text = reply(last) if callable(reply) else reply
                out = {
                    "choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                    "model": body["model"],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                }
                if not self._send(200, out):
                    return
                with server._lock:
                    server.served += 1
                    stop = answers is not None and server.served >= answers
                if stop:
                    threading.Thread(target=server.stop, daemon=True).start()

            def _send(self, status: int, body: Any) -> bool:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                except OSError:  # killed under this request: the client saw the connection drop
                    return False
                return True

        self.httpd = _Quiet(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True).start()

    def stop(self) -> None:
        """Stops listening; the requests in flight still get their replies."""
        self.httpd.shutdown()
        self.httpd.server_close()

    def kill(self) -> None:
        """Stops listening and drops every open connection at once: the requests in flight get no reply."""
        with self._lock:
            self.killed = True
            for conn in self._open:
                _drop(conn)
        self.stop()


def _drop(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
