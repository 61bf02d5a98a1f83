"""The task API's route table and a framework-free dispatcher: (method, path, query, body) -> ApiResponse.

Routes (all JSON; errors are Kubernetes ``Status`` objects):

    GET  /v1                                                  what this API serves
    GET  /v1/namespaces/{ns}/agenttasks/{name}                task summary from Redis
    GET  /v1/namespaces/{ns}/agenttasks/{name}/tree           the task and its descendants (bounded)
    GET  /v1/namespaces/{ns}/agenttasks/{name}/transcript     ?since=<seq>&limit=<n>&turn=<n>&tools=true
    POST /v1/namespaces/{ns}/agenttasks/{name}/messages       {"id": "<uuid>", "text": "...", "sender": "..."}

Clients reach it through the API server's service proxy:
``/api/v1/namespaces/<operator-ns>/services/unicore-operator:http/proxy/v1/...``
(``get services/proxy`` to read, ``create services/proxy`` to send).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.service import TaskApi, log

PREFIX = "/v1/"
MAX_BODY_BYTES = 1024 * 1024  # the message cap (256 KiB) plus JSON escaping headroom

_TASK = r"^/v1/namespaces/(?P<namespace>[^/]+)/agenttasks/(?P<name>[^/]+)"


@dataclass
class ApiResponse:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), default=str).encode()

    @property
    def content_type(self) -> str:
        return "application/json"


Handler = Callable[[TaskApi, dict[str, str], str, bytes], tuple[int, dict[str, Any]]]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    doc: str


def _index(api: TaskApi, params: dict[str, str], query: str, body: bytes) -> tuple[int, dict[str, Any]]:
    return 200, {
        "kind": "TaskApi",
        "version": "v1",
        "routes": [f"{route.method} {route.doc}" for route in ROUTES],
    }


ROUTES: tuple[Route, ...] = (
    Route("GET", re.compile(r"^/v1$"), _index, "/v1"),
    Route(
        "GET",
        re.compile(_TASK + r"$"),
        lambda api, p, q, b: api.get_task(p["namespace"], p["name"]),
        "/v1/namespaces/{ns}/agenttasks/{name}",
    ),
    Route(
        "GET",
        re.compile(_TASK + r"/tree$"),
        lambda api, p, q, b: api.get_tree(p["namespace"], p["name"]),
        "/v1/namespaces/{ns}/agenttasks/{name}/tree",
    ),
    Route(
        "GET",
        re.compile(_TASK + r"/transcript$"),
        lambda api, p, q, b: api.get_transcript(p["namespace"], p["name"], q),
        "/v1/namespaces/{ns}/agenttasks/{name}/transcript?since=&limit=&turn=&tools=",
    ),
    Route(
        "POST",
        re.compile(_TASK + r"/messages$"),
        lambda api, p, q, b: api.post_message(p["namespace"], p["name"], b),
        "/v1/namespaces/{ns}/agenttasks/{name}/messages",
    ),
)


def handles(path: str) -> bool:
    """Is ``path`` (without the query) the task API's?"""
    return path == "/v1" or path.startswith(PREFIX)


def dispatch(api: TaskApi, method: str, path: str, query: str = "", body: bytes = b"") -> ApiResponse:
    """Answer one request. Never raises: unexpected errors become a 500 Status (and are logged)."""
    path = path.rstrip("/") or "/"
    try:
        allowed: list[str] = []
        for route in ROUTES:
            match = route.pattern.match(path)
            if not match:
                continue
            if route.method != method.upper():
                allowed.append(route.method)
                continue
            status, payload = route.handler(api, match.groupdict(), query, body)
            return ApiResponse(status, payload)
        if allowed:
            raise ApiError(405, f"{method} is not allowed on {path} (use {', '.join(sorted(set(allowed)))})")
        raise ApiError(404, f"no task API route for {method} {path}; see GET /v1")
    except ApiError as exc:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else {}
        return ApiResponse(exc.status, exc.body(), headers)
    except Exception:
        log.exception("task API %s %s failed", method, path)
        return ApiResponse(
            500, ApiError(500, f"internal error answering {method} {path}; see the operator log").body()
        )
