"""The turn pods' ServiceAccount, Role and RoleBinding, provisioned by the operator in a namespace the first time it
sees an AgentTask there (``UNICORE_PROVISION_AGENT_RBAC``; on by default when cluster-wide).

The three objects are the chart's (helm/unicore/templates/serviceaccounts.yaml, rbac-agent.yaml), built by pure
``build_*_spec`` functions: turn pods may create, get, list and watch AgentTasks of their own namespace (spawn_task),
nothing else. They are created in the order Role, RoleBinding, ServiceAccount, each once (409 AlreadyExists: someone
made it, the chart or an earlier run; it is left as it is, never updated), so the ServiceAccount, without which no
turn pod is created, exists only once its permissions do. A namespace is remembered once all three exist, so later
tasks there cost nothing; it is not when a create fails, and the next AgentTask created there tries again.

When a create is refused (the operator's RBAC does not allow it, e.g. ``rbac.provisionAgent=false``), the AgentTask
gets a Warning Event ``AgentRBACMissing`` saying which object could not be created and why, and its turn Job's
FailedCreate Event (job_events.py) puts ``serviceaccount "unicore-agent" not found`` into its status.

The operator may create this Role only because it holds the Role's permissions itself (RBAC's escalation check):
the chart gives it ``create`` on agenttasks for that (besides the get/list/watch it has anyway), and no ``escalate``
or ``bind``. Creating the RoleBinding needs the same (it holds every permission of the Role it binds).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import defaultdict
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import quote

import kopf
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from unicore_operator import events, names
from unicore_operator.context import OperatorContext
from unicore_operator.core_calls import CoreCalls
from unicore_operator.log import logger
from unicore_operator.settings import OperatorSettings

RBAC_API = "rbac.authorization.k8s.io"
AGENT_RULES = [{"apiGroups": [names.GROUP], "resources": [names.PLURAL], "verbs": ["create", "get", "list", "watch"]}]
LABELS = {names.NAME_LABEL: "unicore", names.COMPONENT_LABEL: "agent", names.MANAGED_BY_LABEL: names.MANAGED_BY}
MISSING_REASON = "AgentRBACMissing"  # the Event posted on a task when provisioning fails
MEMO_KEY = "agent_rbac"  # the provisioner on Kopf's memo (one per operator process)
TRANSIENT = frozenset({429, 500, 502, 503, 504})


def _metadata(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(LABELS)}


def build_service_account_spec(namespace: str, settings: OperatorSettings) -> dict[str, Any]:
    meta = _metadata(settings.agent_service_account, namespace)
    if settings.agent_service_account_annotations:
        meta["annotations"] = dict(settings.agent_service_account_annotations)
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}


def build_role_spec(namespace: str, settings: OperatorSettings) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": _metadata(settings.agent_service_account, namespace),
        "rules": copy.deepcopy(AGENT_RULES),
    }


def build_role_binding_spec(namespace: str, settings: OperatorSettings) -> dict[str, Any]:
    name = settings.agent_service_account
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(name, namespace),
        "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }


def build_agent_rbac_specs(namespace: str, settings: OperatorSettings) -> list[dict[str, Any]]:
    """The three objects in the order they are created (the ServiceAccount last)."""
    return [build_role_spec(namespace, settings), build_role_binding_spec(namespace, settings),
            build_service_account_spec(namespace, settings)]


def collection_path(obj: dict[str, Any]) -> str:
    """The URL path of the namespaced collection ``obj`` is created in (pure)."""
    namespace = quote(obj["metadata"]["namespace"], safe="")
    plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}[obj["kind"]]
    base = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    return f"{base}/namespaces/{namespace}/{plural}"


def refusal(obj: dict[str, Any], exc: ApiException) -> str:
    """One line: which object could not be created, and the API server's reason (pure)."""
    meta = obj["metadata"]
    try:
        detail = str(json.loads(exc.body or "{}").get("message") or "")
    except (TypeError, ValueError):
        detail = ""
    detail = " ".join((detail or str(exc.reason or "")).split())
    return (f"could not create {obj['kind']} {meta['name']} in namespace {meta['namespace']} for turn pods "
            f"({exc.status}: {detail})")


class TransientFailure(Exception):
    """The API server could not answer now (throttled, unavailable): try again shortly."""


class AgentRbacProvisioner:
    """Creates the agent objects once per namespace per operator process (``done``)."""

    def __init__(self, core: CoreCalls, settings: OperatorSettings) -> None:
        self.core = core
        self.settings = settings
        self.done: set[str] = set()
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    @property
    def enabled(self) -> bool:
        return self.settings.provisions_agent_rbac

    async def ensure(self, namespace: str) -> str | None:
        """Make sure ``namespace`` has the agent ServiceAccount, Role and RoleBinding. None when it has them (or
        provisioning is off); else the one-line reason they could not be created. TransientFailure when the API
        server could not answer now. Concurrent calls for one namespace create the objects once."""
        if not self.enabled or namespace in self.done:
            return None
        async with self.locks[namespace]:
            if namespace in self.done:
                return None
            problem = await asyncio.to_thread(self.create_all, namespace)
            if problem is None:
                self.done.add(namespace)
                self.locks.pop(namespace, None)
            return problem

    def create_all(self, namespace: str) -> str | None:
        for obj in build_agent_rbac_specs(namespace, self.settings):
            try:
                self.core.create(collection_path(obj), obj)
            except ApiException as exc:
                if exc.status == 409:
                    continue  # it exists: the chart's, a person's, or ours from an earlier run
                if exc.status in TRANSIENT:
                    raise TransientFailure(refusal(obj, exc)) from exc
                return refusal(obj, exc)
            except (HTTPError, OSError) as exc:  # no answer at all (connection refused, reset, timed out)
                raise TransientFailure(f"could not reach the API server: {exc}") from exc
        return None


async def provision_for(ctx: OperatorContext, memo: MutableMapping[str, Any], task: dict[str, Any]) -> None:
    """The AgentTask create handler's step before anything else: the task's namespace gets the agent objects (once
    per process). A refusal is logged and posted on the task as a Warning Event, and the task goes on (its turn
    Job's FailedCreate then shows in its status what is missing); a transient failure retries the handler."""
    provisioner: AgentRbacProvisioner | None = memo.get(MEMO_KEY)
    if provisioner is None:
        provisioner = memo[MEMO_KEY] = AgentRbacProvisioner(ctx.kube.core, ctx.settings)
    meta = task["metadata"]
    try:
        problem = await provisioner.ensure(meta["namespace"])
    except TransientFailure as exc:
        raise kopf.TemporaryError(f"{exc}; trying again", delay=2) from exc
    if problem:
        logger.warning("AgentTask %s/%s: %s", meta["namespace"], meta["name"], problem)
        events.post(ctx, task, events.WARNING, MISSING_REASON, problem)
