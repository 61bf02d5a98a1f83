"""The operator's Kubernetes API calls (turn Jobs, AgentTasks and their status, Events, pods, the Event watch; also the
agent ServiceAccount and RBAC objects it creates, and the Secrets of per-namespace Redis identities), made through the
Kubernetes ``ApiClient`` rather than the generated API classes.

Kubernetes' Python client 37 wraps each method of a generated API class in pydantic's ``validate_call`` when the
class is built: ``CoreV1Api``'s ~1,240 methods cost about 21 MiB of resident memory, ``BatchV1Api`` and
``CustomObjectsApi`` together about 9 MiB, a third of an idle operator, for eight calls. The requests here go through
the same client machinery (configuration, authentication and token refresh, TLS, the connection pool,
``ApiException`` on errors); bodies are plain JSON dicts, as the API serves them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.rest import ApiException

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class CoreCalls:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def _send(self, method: str, path: str, *, query: Sequence[tuple[str, str]] = (),
              body: Mapping[str, Any] | None = None, timeout: float | None = None, content_type: str = JSON) -> Any:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api.param_serialize(method=method, resource_path=path, query_params=list(query),
                                           header_params=headers, body=dict(body) if body is not None else None,
                                           auth_settings=["BearerToken"])
        response = self.api.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException(http_resp=response)
        return response

    def _json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        return dict(json.loads(self._send(method, path, **options).read()))

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the collection at ``path`` (any API group, e.g. the agent RBAC of ``agent_rbac``)."""
        return self._json("POST", path, body=body)

    def create_quietly(self, path: str, body: Mapping[str, Any]) -> bool:
        """POST ``body`` to the collection at ``path``, its answer read and dropped (not decoded); False when the
        object exists already (409)."""
        try:
            response = self._send("POST", path, body=body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        response.read()  # the client's response: read in full, its connection back in the pool
        return True

    def delete(self, path: str, body: Mapping[str, Any] | None = None) -> bool:
        """DELETE the object at ``path`` (``body``: DeleteOptions); False when it does not exist."""
        try:
            self._send("DELETE", path, body=body).read()
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> bool:
        """JSON merge patch (RFC 7386) of the object at ``path``; False when it does not exist."""
        try:
            self._send("PATCH", path, body=patch, content_type=MERGE_PATCH).read()
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list(self, path: str, label_selector: str = "") -> list[dict[str, Any]]:
        """The items of the collection at ``path`` (matching ``label_selector``), as the API serves them."""
        query = [("labelSelector", label_selector)] if label_selector else []
        return list(self._json("GET", path, query=query).get("items") or [])

    def read(self, path: str) -> dict[str, Any] | None:
        """GET the object at ``path`` (any API group); None when it does not exist."""
        try:
            return self._json("GET", path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``body`` (with its resourceVersion: 409 Conflict when the object changed since it was read)."""
        return self._json("PUT", path, body=body)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> dict[str, Any]:
        return self._json("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", body=event)

    def read_log(self, namespace: str, pod: str, limit_bytes: int) -> str:
        """The last ``limit_bytes`` of pod ``pod``'s log (its one container's); "" when it has none (yet)."""
        try:
            response = self._send("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}/log",
                                  query=[("limitBytes", str(limit_bytes))])
        except ApiException as exc:
            if exc.status in (400, 404):
                return ""
            raise
        data = response.read()
        return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data or "")

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as the API serves it, or None when it does not exist."""
        try:
            return self._json("GET", f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def watch_events(self, namespace: str | None, *, field_selector: str, resource_version: str | None,
                     timeout_seconds: int) -> Iterator[dict[str, Any]]:
        """The watch events (``{"type", "object"}``) of core/v1 Events in ``namespace`` (all namespaces: None)
        matching ``field_selector``, from ``resource_version``, until the server ends the watch after
        ``timeout_seconds``. An ``ERROR`` event (e.g. 410 Gone: the version is too old) raises ``ApiException``
        with its code."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events" if namespace else "/api/v1/events"
        query = [("watch", "true"), ("fieldSelector", field_selector), ("timeoutSeconds", str(timeout_seconds)),
                 ("allowWatchBookmarks", "false")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        response = self._send("GET", path, query=query, timeout=timeout_seconds + 30)
        raw = response.response  # the urllib3 response, read as it streams
        try:
            pending = b""
            for chunk in raw.stream(amt=None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _watch_event(line)
            if pending.strip():
                yield _watch_event(pending)
        finally:
            raw.release_conn()


def _watch_event(line: bytes) -> dict[str, Any]:
    event = json.loads(line)
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise ApiException(status=status.get("code"), reason=f"{status.get('reason')}: {status.get('message')}")
    return dict(event)
