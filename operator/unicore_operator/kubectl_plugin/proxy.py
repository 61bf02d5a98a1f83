"""Calls to the operator's task API through the API server's service proxy, with the user's credentials.

    /api/v1/namespaces/<operator-ns>/services/unicore-operator:http/proxy/v1/...

Reading needs ``get services/proxy`` and sending ``create services/proxy`` on ``unicore-operator:http`` in the
operator's namespace. Transient failures (operator restarting, task not initialised yet) are retried until a
deadline; callers make retries safe (``send`` reuses its message id).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from unicore_operator.kubectl_plugin.errors import Forbidden, NotFound, PluginError, Unreachable
from unicore_operator.kubectl_plugin.kube import KubeContext
from unicore_operator.log import logger

log = logger.getChild("kubectl")

SERVICE = "unicore-operator"
PORT_NAME = "http"
READER_ROLE = "unicore-agenttask-reader"
MESSENGER_ROLE = "unicore-agenttask-messenger"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
DEFAULT_TIMEOUT_SECONDS = 30.0


def proxy_base(operator_namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(operator_namespace)}/services/{SERVICE}:{PORT_NAME}/proxy"


def task_path(namespace: str, name: str, suffix: str = "") -> str:
    return f"/v1/namespaces/{quote(namespace)}/agenttasks/{quote(name)}{suffix}"


def _decode(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {"message": raw.decode(errors="replace")[:500]}
    return value if isinstance(value, dict) else {"message": str(value)[:500]}


def forbidden_message(status_message: str, *, verb: str, operator_namespace: str) -> str:
    """``forbidden: <user> cannot <verb> services/proxy ... (ask for the <role> role)``."""
    match = re.search(r'User "([^"]+)"', status_message)
    user = match.group(1) if match else "you"
    role = MESSENGER_ROLE if verb == "create" else READER_ROLE
    what = "send messages to" if verb == "create" else "read transcripts of"
    return (
        f'forbidden: {user} cannot {verb} services/proxy "{SERVICE}:{PORT_NAME}" in namespace '
        f"{operator_namespace}, so cannot {what} agent tasks (ask for the {role} role)"
    )


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
            resource_path=proxy_base(self.kube.operator_namespace) + path,
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
        deadline = time.monotonic() + self.timeout
        delay = 0.2
        while True:
            try:
                status, payload = self._once(method, path, query, body)
            except Exception as exc:  # urllib3 connection errors, TLS errors
                status, payload = 0, {"message": f"cannot reach the Kubernetes API server: {exc}"}
            if 200 <= status < 300:
                return payload
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
            raise self._error(method, status, payload)

    def _error(self, method: str, status: int, payload: dict[str, Any]) -> PluginError:
        message = str(payload.get("message") or payload)
        details = payload.get("details") or {}
        operator_ns = self.kube.operator_namespace
        if status == 403:
            verb = "create" if method == "POST" else "get"
            return Forbidden(forbidden_message(message, verb=verb, operator_namespace=operator_ns))
        if status == 401:
            return Forbidden(f"unauthorized: the API server did not accept your credentials ({message})")
        if status == 404 and details.get("kind") == "services":
            return Unreachable(
                f"the UniCore operator's Service {SERVICE} was not found in namespace {operator_ns}: "
                "is UniCore installed there? (set --operator-namespace or UNICORE_OPERATOR_NAMESPACE)"
            )
        if status == 404:
            return NotFound(message)
        if status == 0:
            return Unreachable(message)
        if status in RETRYABLE_STATUS:
            if payload.get("reason") == "TaskNotReady":
                return Unreachable(f"{message} (gave up after {self.timeout:.0f}s)")
            return Unreachable(
                f"the UniCore operator is not reachable through the API server (HTTP {status}: "
                f"{message}); is it running in namespace {operator_ns}?"
            )
        return PluginError(f"the task API answered HTTP {status}: {message}")
