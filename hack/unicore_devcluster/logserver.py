"""A tiny kubelet endpoint so that ``kubectl logs`` works: GET /containerLogs/<ns>/<pod>/<container>."""

from __future__ import annotations

import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from unicore_devcluster.log import logger

LogLocator = Callable[[str, str, str | None], Path | None]
IsRunning = Callable[[str, str], bool]


def _tail(data: bytes, lines: int) -> bytes:
    if lines < 0:
        return data
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:]) if lines else b""


class KubeletLogServer:
    """Serves container log files over HTTPS (client certificates signed by the cluster CA required)."""

    def __init__(
        self, port: int, cert: Path, key: Path, ca: Path, locate: LogLocator, is_running: IsRunning
    ) -> None:
        self.port = port
        locate_fn, running_fn = locate, is_running

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
                logger.debug("kubelet-logs: " + format, *args)

            def do_GET(self) -> None:  # noqa: N802 - stdlib naming
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) < 3 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                ns, pod = parts[1], parts[2]
                container = parts[3] if len(parts) > 3 else None
                query = urllib.parse.parse_qs(url.query)
                path = locate_fn(ns, pod, container)
                if path is None or not path.exists():
                    self.send_error(404, "no log for this container")
                    return
                follow = query.get("follow", ["false"])[0] == "true"
                tail = int(query.get("tailLines", ["-1"])[0])
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                if not follow:
                    body = _tail(path.read_bytes(), tail)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with open(path, "rb") as handle:
                    self._chunk(_tail(handle.read(), tail))
                    while True:
                        data = handle.read()
                        if data:
                            self._chunk(data)
                        elif not running_fn(ns, pod):
                            break
                        else:
                            time.sleep(0.2)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _chunk(self, data: bytes) -> None:
                if not data:  # an empty chunk would end the response
                    return
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
        ctx.load_cert_chain(str(cert), str(key))
        ctx.verify_mode = ssl.CERT_REQUIRED
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="devcluster-kubelet-logs", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
