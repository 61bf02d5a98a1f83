"""``kubectl agenttask ui``'s tree source: the AgentTasks the user may list (one namespace, or all), kept current by
a Kubernetes watch with the user's own credentials (no polling). One list at start (so a missing right is one clear
error before the server starts), then watches from its resourceVersion; an expired version (410) lists again; a
broken connection retries with a backoff. Every change bumps a version that readers wait on."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from unicore.log import get_logger

from unicore_client.kubectl_plugin.commands import kube_error
from unicore_client.kubectl_plugin.errors import Forbidden as PluginForbidden
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.kube import GROUP, PLURAL, VERSION, KubeContext
from unicore_client.ui.backend_protocol import BackendRefusal, Forbidden, Unavailable

log = get_logger("ui")
WATCH_SECONDS = 240  # one watch request's server-side timeout; then it resumes from the last resourceVersion
RETRY_SECONDS = (0.5, 10.0)  # backoff after a failed list or watch: first, at most


def refusal(exc: PluginError) -> BackendRefusal:
    return Forbidden(exc.message) if isinstance(exc, PluginForbidden) else Unavailable(exc.message)


class TaskWatch:
    """The watched AgentTasks by (namespace, name), their version, and the last error (cleared by a good list)."""

    def __init__(self, kube: KubeContext, namespace: str | None) -> None:
        self.kube = kube
        self.namespace = namespace  # None: every namespace
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.error: BackendRefusal | None = None
        self._changed = threading.Condition()
        self._closed = threading.Event()
        self._resource_version = ""
        self._thread: threading.Thread | None = None
        self._response: Any = None

    # ------------------------------------------------------------------ readers

    def covers(self, namespace: str) -> bool:
        return self.namespace is None or self.namespace == namespace

    def snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        with self._changed:
            return self.version, list(self.objects.values())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._changed:
            return self.objects.get((namespace, name))

    def wait_changed(self, seen: int, timeout: float) -> int:
        """The version once it differs from ``seen``, or after ``timeout`` seconds (or once closed)."""
        with self._changed:
            self._changed.wait_for(lambda: self.version != seen or self._closed.is_set(), timeout=timeout)
            return self.version

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        """List once (raises Forbidden / Unavailable with the API server's reason), then watch in a thread."""
        self._list()
        self._thread = threading.Thread(target=self._run, name="ui-agenttask-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks the watch thread's read
            except OSError:  # its connection was closed meanwhile (the watch ended): nothing to unblock
                pass
        with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ the watch

    def _lister(self) -> Callable[..., Any]:
        """The list call of the watched scope (``watch=True`` makes it the watch)."""
        custom = self.kube.custom()
        if self.namespace is None:
            return lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)
        namespace = self.namespace
        return lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **kw)

    def _list(self) -> None:
        where = self.namespace or "(all)"
        try:
            listed = self._lister()(_request_timeout=(10, 60))
        except Exception as exc:
            error = refusal(kube_error(exc, verb="list", what="agenttasks", namespace=where))
            self._set_error(error)
            raise error from None
        objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in listed.get("items") or []}
        with self._changed:
            self.objects = objects
            self.error = None
            self.version += 1
            self._resource_version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
            self._changed.notify_all()

    def _set_error(self, error: BackendRefusal) -> None:
        with self._changed:
            self.error = error
            self.version += 1
            self._changed.notify_all()

    def _run(self) -> None:
        """Watch from the last resourceVersion, again and again (a watch request ends at its timeout); after a
        dropped connection too, with a backoff. A 410 (the version is too old) or a refusal lists again."""
        delay = RETRY_SECONDS[0]
        while not self._closed.is_set():
            try:
                self._watch_once()
                delay = RETRY_SECONDS[0]
                continue
            except _Expired:
                log.debug("the AgentTask watch's resourceVersion expired (410); listing again")
            except Exception as exc:  # connection lost, API server restarting, a right revoked
                if self._closed.is_set():
                    return
                status = getattr(exc, "status", None)
                if status != 410:
                    log.debug("the AgentTask watch failed (HTTP %s): %s; again in %.1fs", status, exc, delay)
                    if status in (401, 403):
                        self._set_error(refusal(kube_error(exc, verb="watch", what="agenttasks",
                                                           namespace=self.namespace or "(all)")))
                    self._closed.wait(delay)
                    delay = min(delay * 2, RETRY_SECONDS[1])
                    if status not in (401, 403):
                        continue  # from the last resourceVersion
            try:
                self._list()
                delay = RETRY_SECONDS[0]
            except BackendRefusal:
                self._closed.wait(delay)
                delay = min(delay * 2, RETRY_SECONDS[1])

    def _watch_once(self) -> None:
        """One watch request from the last resourceVersion, its events applied, until its timeout."""
        response = self._lister()(watch=True, resource_version=self._resource_version, allow_watch_bookmarks=True,
                                  timeout_seconds=WATCH_SECONDS, _preload_content=False,
                                  _request_timeout=(10, WATCH_SECONDS + 30))
        self._response = response
        try:
            for line in response:
                if self._closed.is_set():
                    return
                if line.strip():
                    event = json.loads(line)
                    self._apply(str(event.get("type", "")), event.get("object") or {})
        finally:
            self._response = None
            response.release_conn()

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        with self._changed:
            if meta.get("resourceVersion"):
                self._resource_version = str(meta["resourceVersion"])
            if kind == "BOOKMARK":
                return
            key = (str(meta.get("namespace")), str(meta.get("name")))
            if kind == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            self.version += 1
            self._changed.notify_all()


class _Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


__all__ = ["TaskWatch", "refusal"]
