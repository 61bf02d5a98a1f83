"""The operator's read/write task API (messages in, transcripts out) as a Kubernetes aggregated API
(``tasks.unicore.dev/v1alpha1``): the API server authenticates users and proxies their requests to the operator,
which verifies the API server's front-proxy certificate and authorizes every request with a SubjectAccessReview, so
Kubernetes RBAC decides per namespace who may read and who may send. See docs/kubectl.md."""

from __future__ import annotations

from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.lookup import TaskLookup
from unicore_operator.task_api.routes import ROUTES, ApiResponse, Target, answer, discovery, dispatch, resolve
from unicore_operator.task_api.service import TaskApi, sender_of

__all__ = [
    "ROUTES",
    "ApiError",
    "ApiResponse",
    "TaskApi",
    "TaskLookup",
    "Target",
    "answer",
    "discovery",
    "dispatch",
    "resolve",
    "sender_of",
]
