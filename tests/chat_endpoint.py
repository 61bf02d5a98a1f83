"""A real OpenAI-compatible chat endpoint for tests of the endpoint map (stdlib http.server in a thread): it serves
one model to callers with one API key, answers others with HTTP 401 / 404, and records every request it sees (path,
Authorization header, model). Answers are plain JSON (what a server that ignores ``stream: true`` sends)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Endpoint:
    """One OpenAI-compatible server that serves ``model`` to callers with ``key`` (else HTTP 401 / 404)."""

    label: str
    model: str
    key: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    host: str = "127.0.0.1"

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://{self.host}:{self.server.server_address[1]}/v1"

    def start(self) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                auth = self.headers.get("Authorization")
                endpoint.seen.append({"path": self.path, "auth": auth, "model": body.get("model")})
                if auth != f"Bearer {endpoint.key}":
                    return self._send(401, {"error": {"message": f"{endpoint.label}: bad key {auth!r}"}})
                if self.path != "/v1/chat/completions" or body.get("model") != endpoint.model:
                    return self._send(404, {"error": {"message": f"{endpoint.label} serves only {endpoint.model}"}})
                return self._send(200, {
                    "id": "chatcmpl-1", "object": "chat.completion", "model": endpoint.model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": f"answered by {endpoint.label}"}}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
                })

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
                return

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        threading.Thread(target=self.server.serve_forever, name=f"endpoint-{self.label}", daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
