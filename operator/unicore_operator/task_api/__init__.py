"""The operator's read/write task API (messages in, transcripts out), reached through the API server's service
proxy so Kubernetes RBAC on ``services/proxy`` decides who may read and who may send. See docs/kubectl.md."""

from __future__ import annotations

from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.lookup import TaskLookup
from unicore_operator.task_api.routes import ROUTES, ApiResponse, dispatch, handles
from unicore_operator.task_api.service import TaskApi

__all__ = [
    "ROUTES",
    "ApiError",
    "ApiResponse",
    "TaskApi",
    "TaskLookup",
    "dispatch",
    "handles",
]

