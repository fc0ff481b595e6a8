"""A minimal OpenAI-compatible chat server on 127.0.0.1 for the command's tests (engine failures, the run lock):
every ``POST /v1/chat/completions`` gets ``reply`` after ``delay_s``; after ``answers`` replies it stops
listening, so the next connection is refused (a server taken away mid-run)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    def __init__(
        self, reply: str, *, delay_s: float = 0.0, answers: int | None = None, port: int = 0
    ) -> None:
        self.served = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(delay_s)
                data = json.dumps(
                    {
                        "choices": [{"message": {"content": reply}, "finish_reason": "stop"}],
                        "model": body["model"],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                server.served += 1
                if answers is not None and server.served >= answers:
                    threading.Thread(target=server.stop, daemon=True).start()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
