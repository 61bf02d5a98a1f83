"""``unicore ui``'s HTTP server: the static page, the JSON API and Server-Sent Events over ``LocalBackend``.

Security (the UI can start turns, so it is guarded like Jupyter): it binds 127.0.0.1 by default; a random per-run
token in the printed URL (``?token=``) sets an HttpOnly, SameSite=Strict cookie and redirects to the bare path;
every other request without that cookie gets 401. A POST also needs the ``X-CSRF-Token`` header equal to the per-run
value the page reads from its meta tag, a ``Host`` naming this server and, when sent, an ``Origin`` of this server
(403 otherwise). Every response carries a strict Content-Security-Policy (no inline script or style, nothing from
other origins).

API (JSON; the cluster-mode backend serves the same):
``GET  /api/tree``                              every root's tree (flattened, with depth)
``GET  /api/tasks/T``                           one task (status, turns, tokens, children, pending calls)
``GET  /api/tasks/T/messages?start=&count=``    a page of the transcript
``GET  /api/events``                            SSE ``tree``: the forest when it changes
``GET  /api/tasks/T/events?from=N``             SSE ``message``/``token``/``task`` (``Last-Event-ID`` resumes)
``GET  /api/tasks/T/eventlog``                  the task's Events: {events: [{time, type, reason, message}]}
``POST /api/tasks``                             {prompt, model, name?, require_approval?, limits?} or {yaml} -> {id}
``POST /api/tasks/T/messages``                  {text, client_id} -> {queued}
``POST /api/tasks/T/calls/C``                   {approve: bool}
``POST /api/tasks/T/suspend|resume|stop``       {} (stop: the task and every descendant)
``GET  /api/conversations``                     shared conversations (issue 33): {conversations: [...]}
``GET  /api/conversations/C``                   one: meta and participants with their live state
``GET  /api/conversations/C/posts?after=&limit=`` its posts after a seq: {posts: [...]}
``GET  /api/conversations/C/events?after=N``    SSE ``post``/``conversation`` (``Last-Event-ID`` resumes)
``POST /api/conversations/C/posts``             {text, id} -> {posted, seq} (the same id twice posts once)
``POST /api/conversations/C/pause|resume|close`` {} -> {status, changed}
``POST /api/conversations``                     {name, title?, tasks?, handoff_limit?} -> 201/200 {id, created}
                                                (200: it existed, kept as it is; the person and tasks join it)
``POST /api/conversations/C/members``           {task, action: join|leave} -> {changed}

A conversation's refusals: 404 (no such conversation, or a task named that does not exist), 409 (closed: no post, no
pause or resume, no join or leave); in cluster mode (C is ``<namespace>/<name>``, percent-encoded as one segment, a
task ``<namespace>/<name>`` of its namespace) also 403 (RBAC: the right that is missing) and 503.
"""

from __future__ import annotations

import hmac
import itertools
import json
import secrets
import threading
import webbrowser
from collections.abc import Iterator
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from unicore.errors import AlreadyDecided, MessageTooLarge, TaskNotFound, UniCoreError

from unicore_client.arguments import UsageError
from unicore_client.ui.backend_protocol import BackendRefusal, TaskEvent, UIBackend
from unicore_client.ui.conversation_views import create_request
from unicore_client.ui.local_backend import Cursor
from unicore_client.ui.refusals import BadRequest

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
COOKIE = "unicore_ui_{port}"  # per port: cookies ignore ports, and two runs must not overwrite each other's
STATIC = {"/app.js": "text/javascript", "/common.js": "text/javascript", "/conversations.js": "text/javascript",
          "/app.css": "text/css"}  # app.js imports the other two (ES modules)
MAX_BODY = 1 << 20


def asset(name: str) -> bytes:
    return resources.files("unicore_client.ui").joinpath("static", name).read_bytes()


class UIServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, backend: UIBackend, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), UIHandler)
        self.backend = backend
        self.token = secrets.token_urlsafe(32)
        self.csrf = secrets.token_urlsafe(32)
        self.stopping = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def shutdown(self) -> None:
        self.stopping.set()
        super().shutdown()

    def run(self, *, open_browser: bool = False) -> None:
        """Serve until Ctrl-C (``unicore ui`` and ``kubectl agenttask ui``), opening the URL first if asked; then
        stop the event streams and close the socket."""
        if open_browser:
            webbrowser.open(self.url)
        try:
            self.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            self.stopping.set()
            self.server_close()


class UIHandler(BaseHTTPRequestHandler):
    server: UIServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: the URL holds the token
        return

    # ------------------------------------------------------------------ responses

    def _headers(self, status: int, ctype: str, length: int | None, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cache-Control", "no-store")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self._headers(status, ctype, len(body), extra)
        self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    # ------------------------------------------------------------------ checks

    def _authorized(self) -> bool:
        cookie = SimpleCookie(self.headers.get("Cookie", ""))
        morsel = cookie.get(COOKIE.format(port=self.server.port))
        return morsel is not None and hmac.compare_digest(morsel.value, self.server.token)

    def _same_origin(self) -> bool:
        port = self.server.port
        hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        if self.headers.get("Host", "") not in hosts:
            return False
        origin = self.headers.get("Origin")
        return origin is None or origin in {f"http://{h}" for h in hosts}

    def _gate(self, query: dict[str, list[str]], path: str) -> bool:
        """Whether to go on; sends the cookie-setting redirect or the 401 itself."""
        token = (query.get("token") or [""])[0]
        if token and hmac.compare_digest(token, self.server.token):
            cookie = f"{COOKIE.format(port=self.server.port)}={self.server.token}; HttpOnly; SameSite=Strict; Path=/"
            self._send(HTTPStatus.SEE_OTHER, b"", "text/plain", {"Location": path, "Set-Cookie": cookie})
            return False
        if not self._authorized():
            self._error(HTTPStatus.UNAUTHORIZED, "open the URL printed by 'unicore ui' (it holds the token)")
            return False
        return True

    # ------------------------------------------------------------------ routes

    def do_GET(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if not self._gate(query, parts.path):
            return
        try:
            self._get(parts.path, query)
        except TaskNotFound as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except BadRequest as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except BackendRefusal as exc:  # e.g. 403: the API server's reason, one line
            self._error(exc.status, exc.message)
        except (BrokenPipeError, ConnectionResetError):
            return

    def _get(self, path: str, query: dict[str, list[str]]) -> None:
        backend = self.server.backend
        segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        if path in ("/", "/index.html"):
            page = asset("index.html").replace(b"__CSRF__", self.server.csrf.encode())
            self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")
        elif path in STATIC:
            self._send(HTTPStatus.OK, asset(path[1:]), STATIC[path] + "; charset=utf-8")
        elif segments == ["api", "tree"]:
            self._json(HTTPStatus.OK, {"nodes": backend.forest()})
        elif segments == ["api", "events"]:
            self._tree_events()
        elif len(segments) == 3 and segments[:2] == ["api", "tasks"]:
            self._json(HTTPStatus.OK, backend.task(segments[2]))
        elif len(segments) == 4 and segments[:2] == ["api", "tasks"] and segments[3] == "messages":
            start, count = _int(query, "start", 0), _int(query, "count", 200)
            self._json(HTTPStatus.OK, {"messages": backend.messages(segments[2], start, count)})
        elif len(segments) == 4 and segments[:2] == ["api", "tasks"] and segments[3] == "eventlog":
            self._json(HTTPStatus.OK, {"events": backend.events(segments[2])})
        elif len(segments) == 4 and segments[:2] == ["api", "tasks"] and segments[3] == "events":
            resume = self.headers.get("Last-Event-ID")
            cursor: Cursor | int = Cursor.parse(resume) if resume else _int(query, "from", 0)
            self._task_events(segments[2], cursor)
        elif segments == ["api", "conversations"]:
            self._json(HTTPStatus.OK, {"conversations": backend.conversations()})
        elif len(segments) == 3 and segments[:2] == ["api", "conversations"]:
            self._json(HTTPStatus.OK, backend.conversation(segments[2]))
        elif len(segments) == 4 and segments[:2] == ["api", "conversations"] and segments[3] == "posts":
            posts = backend.conversation_posts(segments[2], _int(query, "after", 0), _int(query, "limit", 500))
            self._json(HTTPStatus.OK, {"posts": posts})
        elif len(segments) == 4 and segments[:2] == ["api", "conversations"] and segments[3] == "events":
            resume = self.headers.get("Last-Event-ID")
            after = _seq(resume) if resume else _int(query, "after", 0)
            self._stream(backend.conversation_events(segments[2], after, stop=self.server.stopping))
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such page")

    def do_POST(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        if not self._gate({}, parts.path):
            return
        csrf = self.headers.get("X-CSRF-Token", "")
        if not (csrf and hmac.compare_digest(csrf, self.server.csrf) and self._same_origin()):
            self._error(HTTPStatus.FORBIDDEN, "missing or wrong CSRF token or origin")
            return
        try:
            length = self._body_length()
        except BadRequest as exc:  # the body's end is unknown: answer, then drop the connection
            self.close_connection = True
            self._send(HTTPStatus.BAD_REQUEST, json.dumps({"error": str(exc)}).encode(), "application/json",
                       {"Connection": "close"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise BadRequest("the body is a JSON object")
            self._post([unquote(s) for s in parts.path.strip("/").split("/")], body)
        except (ValueError, MessageTooLarge, UsageError) as exc:  # BadRequest, bad JSON, a bad script, too large
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
        except TaskNotFound as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except BackendRefusal as exc:
            self._error(exc.status, exc.message)
        except AlreadyDecided as exc:  # decided already, or past its timeout (DecisionExpired): as the task API, 409
            self._error(HTTPStatus.CONFLICT, f"{type(exc).__name__}: {exc}")
        except UniCoreError as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"{type(exc).__name__}: {exc}")

    def _body_length(self) -> int:
        """The request's ``Content-Length`` (0 without one): one header of ASCII digits, at most MAX_BODY; else
        BadRequest. Never -1, which would read until the client closes and hold this thread meanwhile."""
        given = self.headers.get_all("Content-Length") or []
        if not given:
            return 0
        text = given[0].strip()
        if len(given) > 1 or not (text.isascii() and text.isdigit()):
            raise BadRequest("Content-Length: one whole number of bytes")
        if int(text) > MAX_BODY:
            raise BadRequest(f"request too large (at most {MAX_BODY} bytes)")
        return int(text)

    def _post(self, segments: list[str], body: dict[str, Any]) -> None:
        backend = self.server.backend
        if segments == ["api", "tasks"] and "yaml" in body:
            self._json(HTTPStatus.CREATED, {"id": backend.create_from_yaml(_text(body, "yaml"))})
        elif segments == ["api", "tasks"]:
            model = _text(body, "model") or "scripted"
            gated = [t.strip() for t in _text(body, "require_approval").split(",") if t.strip()]
            name = backend.create(_text(body, "prompt"), model, _text(body, "name") or None, gated,
                                  limits=_limits(body))
            self._json(HTTPStatus.CREATED, {"id": name})
        elif len(segments) == 4 and segments[:2] == ["api", "tasks"] and segments[3] in ("suspend", "resume"):
            getattr(backend, segments[3])(segments[2])
            self._json(HTTPStatus.OK, {"ok": True})
        elif len(segments) == 4 and segments[:2] == ["api", "tasks"] and segments[3] == "stop":
            self._json(HTTPStatus.OK, {"suspended": backend.stop(segments[2])})
        elif len(segments) == 4 and segments[:2] == ["api", "tasks"] and segments[3] == "messages":
            client_id = _text(body, "client_id")
            if not 8 <= len(client_id) <= 64 or not client_id.replace("-", "").isalnum():
                raise BadRequest("client_id: 8-64 letters, digits or '-'")
            queued = backend.send(segments[2], _text(body, "text"), client_id)
            self._json(HTTPStatus.OK, {"queued": queued})
        elif len(segments) == 5 and segments[:2] == ["api", "tasks"] and segments[3] == "calls":
            approve = body.get("approve")
            if not isinstance(approve, bool):  # "false" or 0 is no decision (it was: truthiness)
                raise BadRequest("approve: true or false (a JSON boolean)")
            backend.decide(segments[2], segments[4], approve)
            self._json(HTTPStatus.OK, {"ok": True})
        elif segments == ["api", "conversations"]:  # 201 created, 200 it existed (kept as it is)
            made = backend.conversation_create(*create_request(body))
            self._json(HTTPStatus.CREATED if made["created"] else HTTPStatus.OK, made)
        elif len(segments) == 4 and segments[:2] == ["api", "conversations"] and segments[3] == "members":
            self._json(HTTPStatus.OK, backend.conversation_member(segments[2], _text(body, "task"),
                                                                  _text(body, "action") or "join"))
        elif len(segments) == 4 and segments[:2] == ["api", "conversations"] and segments[3] == "posts":
            self._json(HTTPStatus.OK, backend.conversation_post(segments[2], _text(body, "text"), _text(body, "id")))
        elif (len(segments) == 4 and segments[:2] == ["api", "conversations"]
              and segments[3] in ("pause", "resume", "close")):
            self._json(HTTPStatus.OK, backend.conversation_control(segments[2], segments[3]))
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such endpoint")

    # ------------------------------------------------------------------ server-sent events

    def _sse_start(self) -> None:
        self.close_connection = True
        self._headers(HTTPStatus.OK, "text/event-stream; charset=utf-8", None, {"Connection": "close"})

    def _event(self, event_id: str, name: str, data: Any) -> None:
        if not name:  # keepalive: a write to a closed connection ends the handler's thread
            self.wfile.write(b": keepalive\n\n")
            self.wfile.flush()
            return
        self.wfile.write(f"id: {event_id}\nevent: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _task_events(self, task_id: str, cursor: Cursor | int) -> None:
        self._stream(self.server.backend.task_events(task_id, cursor, stop=self.server.stopping))

    def _stream(self, events: Iterator[TaskEvent]) -> None:
        """An SSE stream of ``events`` (a task's, a conversation's): its first event before the headers, so that an
        error to start with (TaskNotFound, NotFound, BadRequest, a refusal) is an HTTP error, not a stream."""
        first = next(events)  # TaskNotFound / BadRequest before the headers go out
        self._sse_start()
        self._event(*first)
        try:
            for event in events:
                self._event(*event)
        except (UniCoreError, BackendRefusal):  # e.g. the task removed (retention) or a right revoked: the stream
            return  # ends, the page reconnects and sees the 404 or 403 (a conversation's page the same)

    def _tree_events(self) -> None:
        """The backend's tree feed (``UIBackend.tree_changes``): the forest each time it changed, a keepalive when
        quiet; the event id is a version of it (a resumed stream gets the current forest, which holds every change it
        missed)."""
        changes = self.server.backend.tree_changes(self.server.stopping)
        first = next(changes, None)  # Forbidden etc. before the headers go out
        self._sse_start()
        try:
            for nodes in itertools.chain([first], changes):
                if nodes is None:
                    self.wfile.write(b": keepalive\n\n")
                else:
                    body = json.dumps(nodes)
                    self.wfile.write(f"id: {secrets.token_hex(8)}\nevent: tree\ndata: {body}\n\n".encode())
                self.wfile.flush()
        except (UniCoreError, BackendRefusal):  # e.g. a task removed while read: the page reconnects and reads again
            return


def _int(query: dict[str, list[str]], name: str, default: int) -> int:
    try:
        return int((query.get(name) or [str(default)])[0])
    except ValueError:
        raise BadRequest(f"{name}: a number") from None


def _seq(value: str) -> int:
    """A conversation stream's ``Last-Event-ID``: the seq of the last post it sent."""
    if not (value.isascii() and value.isdigit()):
        raise BadRequest(f"bad event id {value[:40]!r}")
    return int(value)


def _limits(body: dict[str, Any]) -> dict[str, Any] | None:
    """``limits``: numbers and booleans by ``schema.Limits`` field (the backend checks names and bounds)."""
    limits = body.get("limits")
    if limits is None:
        return None
    if not isinstance(limits, dict) or not all(isinstance(v, int) for v in limits.values()):
        raise BadRequest("limits: an object of whole numbers by limit name")
    return limits


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise BadRequest(f"{name}: a string")
    return value


__all__ = ["CSP", "UIServer"]
