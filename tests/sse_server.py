"""A local OpenAI-compatible HTTP server (stdlib http.server in a thread) that streams chat completions as
llama.cpp's llama-server does: chunked transfer encoding, ``data: <chunk>\\n\\n`` events, a final chunk with the
finish reason, a usage chunk with empty ``choices`` (``stream_options.include_usage``), then ``data: [DONE]``.

Each queued answer is a function of the handler and the request body. The helpers that stand for behaviour a real
server cannot be made to show on demand are named after it: :func:`server_dies_mid_answer`,
:func:`server_repeats_tool_call_ids`, :func:`overloaded_with_retry_after`, :func:`answer_without_choices`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]
MODEL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, *, usage: dict[str, int] | None = None,
          choices: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-x", "object": "chat.completion.chunk", "created": int(time.time()), "model": MODEL,
        "system_fingerprint": "b6000-local",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else [],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def text_chunks(text: str, *, pieces: int = 3, finish: str = "stop", prompt: int = 40,
                usage: bool = True) -> list[dict[str, Any]]:
    """A text answer the way llama-server streams it: a role delta, the text in pieces, finish, usage."""
    size = max(1, -(-len(text) // pieces))
    out = [chunk({"role": "assistant", "content": None})]
    out += [chunk({"content": text[i:i + size]}) for i in range(0, len(text), size)]
    out.append(chunk({}, finish))
    if usage:
        completion = max(1, len(text) // 4)
        out.append(chunk(choices=False, usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                               "total_tokens": prompt + completion}))
    return out


def tool_call_chunks(calls: Sequence[tuple[str | None, str, str]], *, split: int = 2) -> list[dict[str, Any]]:
    """Native ``tool_calls`` deltas as vLLM/OpenAI stream them: id + name first, then argument fragments."""
    out = [chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        head: dict[str, Any] = {"index": index, "type": "function", "function": {"name": name, "arguments": ""}}
        if call_id is not None:
            head["id"] = call_id
        out.append(chunk({"tool_calls": [head]}))
        step = max(1, -(-len(arguments) // split))
        for i in range(0, len(arguments), step):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[i:i + step]}}]}))
    out.append(chunk({}, "tool_calls"))
    out.append(chunk(choices=False, usage={"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}))
    return out


def _start_stream(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()


def _write(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


def _event(handler: BaseHTTPRequestHandler, payload: dict[str, Any] | str) -> None:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    _write(handler, f"data: {text}\n\n".encode())


def stream(chunks: list[dict[str, Any]], *, done: bool = True,
           between: Callable[[int], object] | None = None) -> Answer:
    """A whole streamed answer (``between(i)`` runs after chunk i is sent: tests observe the live view there)."""
    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        _start_stream(handler)
        for i, item in enumerate(chunks):
            _event(handler, item)
            if between is not None:
                between(i)
        if done:
            _event(handler, "[DONE]")
        _write(handler, b"")  # the last chunk of the chunked body
    return answer


def server_dies_mid_answer(chunks: list[dict[str, Any]]) -> Answer:
    """The model server's process dies (or a proxy drops the connection) after sending ``chunks``: the chunked
    body stops without its last chunk and the connection closes."""
    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        _start_stream(handler)
        for item in chunks:
            _event(handler, item)
        handler.close_connection = True
        handler.wfile.flush()
        handler.connection.shutdown(2)
    return answer


def server_ends_stream_early(chunks: list[dict[str, Any]]) -> Answer:
    """A proxy that ends the body cleanly but too early (no finish reason, no ``[DONE]``): a cut just the same."""
    return stream(chunks, done=False)


def server_repeats_tool_call_ids(calls: list[tuple[str, str]]) -> Answer:
    """Servers that number calls per answer (``call_0`` every time) or give every call the same id."""
    return stream(tool_call_chunks([("call_0", name, arguments) for name, arguments in calls]))


def json_answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
    def answer(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)
    return answer


def overloaded_with_retry_after(seconds: str) -> Answer:
    """A rate-limited hosted API (or vLLM behind a gateway): HTTP 429 with ``Retry-After``."""
    return json_answer(429, {"error": {"message": "rate limited", "type": "rate_limit_error"}},
                       {"Retry-After": seconds})


def answer_without_choices() -> Answer:
    """An overloaded server/proxy that ends a stream properly but never sent a choice (seen with gateways)."""
    return stream([chunk(choices=False, usage={"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5})])


class SSEServer:
    """Serves queued answers to POST /v1/chat/completions, GET /v1/models from ``models``; records requests."""

    def __init__(self, models: list[str] | None = None) -> None:
        self.answers: list[Answer] = []
        self.requests: list[dict[str, Any]] = []
        self.models = models if models is not None else [MODEL]
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                server.requests.append({"path": self.path, "method": "GET"})
                data = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "llamacpp"}
                                                   for m in server.models]}
                json_answer(200, data)(self, {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                server.requests.append({"path": self.path, "method": "POST", "body": body,
                                        "auth": self.headers.get("Authorization")})
                if not server.answers:
                    json_answer(500, {"error": {"message": "no answer queued"}})(self, body)
                    return
                server.answers.pop(0)(self, body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def posts(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == "POST"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def serve(models: list[str] | None = None) -> Iterator[SSEServer]:
    server = SSEServer(models)
    try:
        yield server
    finally:
        server.close()
