"""A local HTTP server that stands for the task API in pure unit tests of its clients (the kubectl plugin's ``conv``
commands, the cluster web UI's conversations): stdlib http.server in a thread, JSON in and out, and a kubeconfig
(user alice, namespace team-a) that points the plugin's real client at it. What it answers is the test's: a function
of the request (``JsonRequest``) that returns the status and the JSON body."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass(frozen=True)
class JsonRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    authorization: str


Answer = Callable[[JsonRequest], tuple[int, dict[str, Any]]]


@contextmanager
def serve_task_api(answer: Answer, tmp_path: Path) -> Iterator[Path]:
    """Serve ``answer`` on a free port of 127.0.0.1 until the block ends; yields the kubeconfig that reaches it."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            request = JsonRequest(self.command, parts.path, dict(parse_qsl(parts.query)),
                                  json.loads(raw) if raw else None, self.headers.get("Authorization", ""))
            status, body = answer(request)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "stub",
        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "alice", "user": {"token": "alice-token"}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "alice", "namespace": "team-a"}}],
    }))
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
