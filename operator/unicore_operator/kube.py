"""Thin, typed wrappers over the Kubernetes client (synchronous; the async code calls them via asyncio.to_thread)."""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.rest import ApiException

from unicore_operator import names
from unicore_operator.core_calls import CoreCalls
from unicore_operator.log import logger


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class KubeClients:
    api: client.ApiClient

    def __post_init__(self) -> None:
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = CoreCalls(self.api)  # not client.CoreV1Api: see core_calls

    def create_job(self, job: dict[str, Any]) -> bool:
        """Create the Job; False when it already exists (a duplicate activation)."""
        try:
            # The client serialises a plain dict body as it is; its annotation only names the model class. The
            # answer (the whole Job) is read and dropped, not deserialised into V1Job models nobody looks at.
            response: Any = self.batch.create_namespaced_job(  # the urllib3 response (typed as the V1Job)
                job["metadata"]["namespace"], cast(client.V1Job, job), _preload_content=False)
            response.read()
            response.release_conn()
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Job as the API serves it (camelCase keys), or None when it does not exist."""
        try:
            job = self.batch.read_namespaced_job(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(self.api.sanitize_for_serialization(job))

    def delete_job(self, namespace: str, name: str, propagation: str = "Background") -> bool:
        try:
            self.batch.delete_namespaced_job(
                name, namespace, body=client.V1DeleteOptions(propagation_policy=propagation)
            )
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def get_agenttask(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.custom.get_namespaced_custom_object(names.GROUP, names.VERSION, namespace, names.PLURAL, name)
            return dict(cast(dict[str, Any], obj))  # custom objects come back as the decoded JSON dict
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(
                names.GROUP, names.VERSION, namespace, names.PLURAL, name, {"status": status}
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report on
                raise

    def post_event(self, task: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """A core/v1 Event on the AgentTask (best effort: never fails the caller)."""
        meta = task["metadata"]
        now = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": names.MANAGED_BY, "host": socket.gethostname()},
            "reportingComponent": names.MANAGED_BY,
            "reportingInstance": socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_event(meta["namespace"], body)
        except Exception as exc:  # an event is a courtesy; never break a handler for it
            logger.debug("could not post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc)
