"""Serving the task API with the standard library's ``http.server`` (standalone, or inside another handler).

The API server's proxy forwards request bodies with ``Transfer-Encoding: chunked`` (no Content-Length), which
``http.server`` does not decode by itself: :func:`read_body` handles both, with a size cap.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.routes import MAX_BODY_BYTES, ApiResponse, dispatch
from unicore_operator.task_api.service import TaskApi, log


def _read_exact(stream: Any, count: int) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise ApiError(400, "the request body ended early")
    return data


def read_body(headers: Any, stream: Any, cap: int = MAX_BODY_BYTES) -> bytes:
    """The request body (Content-Length or chunked), at most ``cap`` bytes, else ApiError 413."""
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        chunks: list[bytes] = []
        size = 0
        while True:
            line = stream.readline(1024).strip()
            try:
                length = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise ApiError(400, "malformed chunked request body") from None
            if length == 0:
                while stream.readline(1024).strip():  # trailers
                    pass
                return b"".join(chunks)
            size += length
            if size > cap:
                raise ApiError(413, f"the request body is over the cap of {cap} bytes; nothing was queued")
            chunks.append(_read_exact(stream, length))
            stream.readline(1024)  # the CRLF closing the chunk
    raw_length = headers.get("Content-Length")
    if not raw_length:
        return b""
    try:
        length = int(raw_length)
    except ValueError:
        raise ApiError(400, f"bad Content-Length {raw_length!r}") from None
    if length > cap:
        raise ApiError(
            413, f"the request body is {length} bytes, over the cap of {cap} bytes; nothing was queued"
        )
    return _read_exact(stream, length)


def handle(api: TaskApi, request: BaseHTTPRequestHandler) -> None:
    """Answer ``request`` (an ``http.server`` handler whose path is the task API's) completely."""
    url = urlsplit(request.path)
    try:
        body = (
            read_body(request.headers, request.rfile) if request.command in ("POST", "PUT", "PATCH") else b""
        )
    except ApiError as exc:
        request.close_connection = True  # the unread body would corrupt the next request
        send(request, ApiResponse(exc.status, exc.body()))
        return
    send(request, dispatch(api, request.command, url.path, url.query, body))


def send(request: BaseHTTPRequestHandler, response: ApiResponse) -> None:
    payload = response.encoded()
    request.send_response(response.status)
    request.send_header("Content-Type", response.content_type)
    request.send_header("Content-Length", str(len(payload)))
    request.send_header("Cache-Control", "no-store")
    for key, value in response.headers.items():
        request.send_header(key, value)
    request.end_headers()
    if request.command != "HEAD":
        request.wfile.write(payload)


def handler_class(api: TaskApi) -> type[BaseHTTPRequestHandler]:
    class TaskApiHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            handle(api, self)

        do_POST = do_PUT = do_DELETE = do_PATCH = do_GET  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("%s %s", self.address_string(), format % args)

    return TaskApiHandler


def serve(
    api: TaskApi, host: str = "0.0.0.0", port: int = 8080
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serve only the task API in a daemon thread (tests, or an operator without its own HTTP server)."""
    server = ThreadingHTTPServer((host, port), handler_class(api))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="unicore-task-api", daemon=True)
    thread.start()
    log.info("task API listening on %s:%d", host, server.server_address[1])
    return server, thread
