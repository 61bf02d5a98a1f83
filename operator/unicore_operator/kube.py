"""Thin, typed wrappers over the Kubernetes client (synchronous; the async code calls them via asyncio.to_thread)."""

from __future__ import annotations

import datetime
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client

from unicore_operator import names
from unicore_operator.core_calls import CoreCalls
from unicore_operator.log import logger


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_path(namespace: str, name: str = "") -> str:
    """The batch/v1 Jobs collection of ``namespace``, or Job ``name`` in it."""
    collection = f"/apis/batch/v1/namespaces/{quote(namespace, safe='')}/jobs"
    return f"{collection}/{quote(name, safe='')}" if name else collection


def pod_path(namespace: str, name: str) -> str:
    """Pod ``name`` of ``namespace``."""
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def agenttask_path(namespace: str, name: str = "") -> str:
    """The AgentTasks collection of ``namespace``, or AgentTask ``name`` in it."""
    collection = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{quote(namespace, safe='')}/{names.PLURAL}"
    return f"{collection}/{quote(name, safe='')}" if name else collection


def agent_path(namespace: str, name: str) -> str:
    return (f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{quote(namespace, safe='')}/{names.AGENT_PLURAL}/"
            f"{quote(name, safe='')}")


@dataclass
class KubeClients:
    api: client.ApiClient

    def __post_init__(self) -> None:
        self.core = CoreCalls(self.api)  # not the generated API classes: see core_calls

    def create_job(self, job: dict[str, Any]) -> bool:
        """Create the Job; False when it already exists (a duplicate activation). Its answer (the whole Job) is
        read and dropped, not decoded."""
        return self.core.create_quietly(job_path(job["metadata"]["namespace"]), job)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Job as the API serves it (camelCase keys), or None when it does not exist."""
        return self.core.read(job_path(namespace, name))

    def list_jobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self.core.list(job_path(namespace), label_selector)

    def delete_job(self, namespace: str, name: str, propagation: str = "Background", uid: str | None = None) -> bool:
        """Delete the Job (only the one with ``uid`` when given: 409 Conflict for another); False when it does not
        exist."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        if uid:
            options["preconditions"] = {"uid": uid}
        return self.core.delete(job_path(namespace, name), options)

    def get_agenttask(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.core.read(agenttask_path(namespace, name))

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the AgentTask's status (nothing to report on when it was deleted meanwhile)."""
        self.core.merge_patch(agenttask_path(namespace, name) + "/status", {"status": status})

    def get_agent(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.core.read(agent_path(namespace, name))

    def patch_agent_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch the Agent's status (nothing to report on when it was deleted meanwhile)."""
        self.core.merge_patch(agent_path(namespace, name) + "/status", {"status": status})

    def post_event(self, task: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """A core/v1 Event on the AgentTask ``task`` (or the object of another kind its ``kind`` names: an
        AgentSchedule), best effort: never fails the caller."""
        meta = task["metadata"]
        now = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": task.get("apiVersion") or names.API_VERSION,
                "kind": task.get("kind") or names.KIND,
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
