"""May this user do that: every request of the aggregated task API is authorized with a SubjectAccessReview
(authorization.k8s.io/v1), so Kubernetes' own authorizers (RBAC) decide, namespace by namespace.

The attributes are the ones the API server derives from the request's path and already checked before it proxied
it (``get`` on ``agenttasks/transcript`` in group ``tasks.unicore.dev`` in the task's namespace, ``create`` on
``agenttasks/messages``): the operator asks again rather than trusting that every path to it went through that
check. RBAC rules name the subresources (``resources: ["agenttasks/transcript"]``); the chart's ClusterRoles,
aggregated into view and edit, grant them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from unicore_operator.task_api.authn import UserInfo

SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALLOWED_TTL_SECONDS = 10.0  # an allowed decision is reused this long (a revoked right stops working within it)
CACHE_SIZE = 4096


@dataclass(frozen=True)
class Attributes:
    """What a request does, in RBAC's terms (a resource request of the aggregated group)."""

    verb: str
    namespace: str
    name: str
    subresource: str
    group: str
    version: str
    resource: str

    def describe(self) -> str:
        return (f'{self.verb} resource "{self.resource}/{self.subresource}" in API group "{self.group}" in the '
                f'namespace "{self.namespace}"')


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


def review_body(user: UserInfo, attrs: Attributes) -> dict[str, Any]:
    """The SubjectAccessReview asking whether ``user`` may do ``attrs``."""
    spec: dict[str, Any] = {
        "user": user.name,
        "groups": list(user.groups),
        "resourceAttributes": {
            "namespace": attrs.namespace,
            "verb": attrs.verb,
            "group": attrs.group,
            "version": attrs.version,
            "resource": attrs.resource,
            "subresource": attrs.subresource,
            "name": attrs.name,
        },
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def decision_of(review: Mapping[str, Any]) -> Decision:
    """The answer of a created SubjectAccessReview: allowed only when ``status.allowed`` and not ``denied``."""
    status = review.get("status") or {}
    reason = str(status.get("reason") or status.get("evaluationError") or "")
    return Decision(bool(status.get("allowed")) and not status.get("denied"), reason)


class Authorizer:
    """Asks the API server (``create(path, body) -> answer``: the operator's KubeClients.core.create); allowed
    decisions are reused for ALLOWED_TTL_SECONDS, denials never (a right just granted works at once). Thread-safe:
    the server calls it from worker threads."""

    def __init__(self, create: Callable[[str, dict[str, Any]], Mapping[str, Any]], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._create = create
        self._clock = clock
        self._allowed: OrderedDict[tuple[UserInfo, Attributes], float] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, user: UserInfo, attrs: Attributes) -> Decision:
        key = (user, attrs)
        now = self._clock()
        with self._lock:
            until = self._allowed.get(key)
            if until is not None and until > now:
                return Decision(True, "cached")
            self._allowed.pop(key, None)
        decision = decision_of(self._create(SAR_PATH, review_body(user, attrs)))
        if decision.allowed:
            with self._lock:
                self._allowed[key] = now + ALLOWED_TTL_SECONDS
                while len(self._allowed) > CACHE_SIZE:
                    self._allowed.popitem(last=False)
        return decision
