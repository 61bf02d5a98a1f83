"""Calls to the operator's task API, a Kubernetes aggregated API, through the API server with the user's own
credentials:

    /apis/tasks.unicore.dev/v1alpha1/namespaces/<ns>/agenttasks/<name>/{transcript,tree,summary,stream,messages,
                                                                       approvals}
    /apis/tasks.unicore.dev/v1alpha1/namespaces/<ns>/conversations[/<name>[/{posts,members,control}]]  (+ DELETE)

RBAC in the task's namespace decides: ``get`` on ``agenttasks/transcript`` (``/tree``, ``/summary``, ``/stream``,
``/approvals``) to read, ``create`` on ``agenttasks/messages`` to send and on ``agenttasks/approvals`` to decide
(group ``tasks.unicore.dev``; the chart's ClusterRoles unicore-agenttask-reader and -messenger, also aggregated into
view and edit; ``conversations``: ``get``/``list`` to read, ``create`` on the resource and its subresources to take
part, in the same two roles; ``delete`` in the editor role). Transient failures (operator restarting, task not
initialised yet) are retried until a deadline; callers make retries safe (``send`` reuses its message id, a post its
client id; a decision repeated answers 409 AlreadyDecided).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from unicore.log import get_logger

from unicore_client.kubectl_plugin.errors import Forbidden, NotFound, PluginError, Unreachable
from unicore_client.kubectl_plugin.kube import KubeContext

log = get_logger("kubectl")

GROUP = "tasks.unicore.dev"
VERSION = "v1alpha1"
API_BASE = f"/apis/{GROUP}/{VERSION}"
APISERVICE = f"{VERSION}.{GROUP}"
READER_ROLE = "unicore-agenttask-reader"
MESSENGER_ROLE = "unicore-agenttask-messenger"
EDITOR_ROLE = "unicore-agenttask-editor"  # aggregated into edit and admin
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
DEFAULT_TIMEOUT_SECONDS = 30.0


def task_path(namespace: str, name: str, subresource: str) -> str:
    """The path of an AgentTask's task API subresource (``transcript``, ``tree``, ``summary``, ``stream``,
    ``messages``)."""
    return f"{API_BASE}/namespaces/{quote(namespace, safe='')}/agenttasks/{quote(name, safe='')}/{subresource}"


def conversation_path(namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    """The path of the namespace's ``conversations`` (a conversation with ``name``; its ``posts``, ``members`` or
    ``control`` with ``subresource``)."""
    path = f"{API_BASE}/namespaces/{quote(namespace, safe='')}/conversations"
    if name is not None:
        path += f"/{quote(name, safe='')}"
        if subresource:
            path += f"/{subresource}"
    return path


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {"message": raw.decode(errors="replace")[:500]}
    return value if isinstance(value, dict) else {"message": str(value)[:500]}


def forbidden_message(status_message: str, *, method: str, path: str) -> str:
    """``forbidden: <user> cannot <verb> agenttasks/<sub> in namespace <ns>, so ... (ask for the <role> role)``."""
    match = re.search(r'User "([^"]+)"', status_message)
    user = match.group(1) if match else "you"
    parts = path.split("?", 1)[0].rstrip("/").split("/")
    subresource = parts[-1]
    namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else "?"
    if "conversations" in parts:
        return _conversation_forbidden(user, method, namespace, parts[parts.index("conversations") + 1:])
    if method == "POST" and subresource == "approvals":
        verb, role, what = "create", MESSENGER_ROLE, "approve or deny tool calls of"
    elif method == "POST":
        verb, role, what = "create", MESSENGER_ROLE, "send messages to"
    else:
        verb, role, what = "get", READER_ROLE, "read"
    return (f"forbidden: {user} cannot {verb} agenttasks/{subresource} ({GROUP}) in namespace {namespace}, so "
            f"cannot {what} its agent tasks (ask for the {role} role there)")


# what a conversation request without its right could not do, by (method, subresource)
_CONVERSATION_DOINGS = {("POST", ""): "create conversations", ("POST", "posts"): "post to its conversations",
                        ("POST", "members"): "add tasks to or take tasks out of its conversations",
                        ("POST", "control"): "pause, resume or close its conversations"}


def _conversation_forbidden(user: str, method: str, namespace: str, rest: list[str]) -> str:
    """``forbidden: <user> cannot <verb> conversations[/<sub>] ...`` (``rest``: the path after ``conversations``)."""
    sub = rest[1] if len(rest) > 1 else ""
    resource = f"conversations/{sub}" if sub else "conversations"
    if method == "DELETE":
        verb, role, what = "delete", EDITOR_ROLE, "delete its conversations"
    elif method == "POST":
        verb, role, what = "create", MESSENGER_ROLE, _CONVERSATION_DOINGS.get(("POST", sub), "change conversations")
    else:
        verb, role, what = ("get" if rest else "list"), READER_ROLE, "read its conversations"
    return (f"forbidden: {user} cannot {verb} {resource} ({GROUP}) in namespace {namespace}, so cannot {what} "
            f"(ask for the {role} role there)")


class TaskApiClient:
    """JSON requests to the task API; errors become PluginError subclasses with clear messages."""

    def __init__(
        self,
        kube: KubeContext,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube = kube
        self.timeout = timeout
        self.sleep = sleep

    def get(self, path: str, query: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
        return self._request("GET", path, query, None)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", path, (), body)

    def delete(self, path: str) -> dict[str, Any]:
        return self._request("DELETE", path, (), None)

    def post_with_status(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``post``, with the answer's HTTP status (201: created; 200: it was there already)."""
        return self._exchange("POST", path, (), body)

    def _once(
        self, method: str, path: str, query: Sequence[tuple[str, Any]], body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        api = self.kube.api_client
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        params = [
            (key, str(value).lower() if isinstance(value, bool) else str(value)) for key, value in query
        ]
        _method, url, header_params, serialized, post_params = api.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = api.call_api(
                _method,
                url,
                header_params=header_params,
                body=serialized,
                post_params=post_params,
                _request_timeout=(10, 60),
            )
            response.read()
            return int(response.status), _decode(response.data or b"")
        except ApiException as exc:
            raw = exc.body.encode() if isinstance(exc.body, str) else (exc.body or b"")
            return int(exc.status or 0), _decode(raw)

    def _request(
        self, method: str, path: str, query: Sequence[tuple[str, Any]], body: dict[str, Any] | None
    ) -> dict[str, Any]:
        return self._exchange(method, path, query, body)[1]

    def _exchange(
        self, method: str, path: str, query: Sequence[tuple[str, Any]], body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.timeout
        delay = 0.2
        while True:
            try:
                status, payload = self._once(method, path, query, body)
            except Exception as exc:  # urllib3 connection errors, TLS errors
                status, payload = 0, {"message": f"cannot reach the Kubernetes API server: {exc}"}
            if 200 <= status < 300:
                return status, payload
            if (status in RETRYABLE_STATUS or status == 0) and time.monotonic() + delay < deadline:
                log.debug(
                    "retrying %s %s in %.1fs after HTTP %s: %s",
                    method,
                    path,
                    delay,
                    status,
                    payload.get("message"),
                )
                self.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            raise self._error(method, path, status, payload)

    def _error(self, method: str, path: str, status: int, payload: dict[str, Any]) -> PluginError:
        message = str(payload.get("message") or payload)
        details = payload.get("details") or {}
        if status == 403:
            return Forbidden(forbidden_message(message, method=method, path=path))
        if status == 401:
            return Forbidden(f"unauthorized: the API server did not accept your credentials ({message})")
        if status == 404 and not details.get("kind"):  # the API server's own 404: no such API group
            return Unreachable(
                f"the UniCore task API ({GROUP}/{VERSION}) is not served by this cluster: is UniCore installed, "
                f"with its APIService {APISERVICE}? ({message})"
            )
        if status == 404:
            return NotFound(message)
        if status == 0:
            return Unreachable(message)
        if status == 409:  # a decision repeated (AlreadyDecided), a closed conversation: the server says why
            return PluginError(message)
        if status in RETRYABLE_STATUS:
            if payload.get("reason") == "TaskNotReady":
                return Unreachable(f"{message} (gave up after {self.timeout:.0f}s)")
            return Unreachable(
                f"the UniCore task API is not reachable through the API server (HTTP {status}: {message}); is the "
                f"operator running? (kubectl get apiservice {APISERVICE})"
            )
        return PluginError(f"the task API answered HTTP {status}: {message}")
