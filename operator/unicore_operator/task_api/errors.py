"""Errors of the task API, rendered as Kubernetes ``Status`` objects.

The API is reached through the API server (an aggregated API), which passes the backend's status code and body
through unchanged. Answering errors as ``kind: Status`` lets plain ``kubectl get --raw`` print them as
``Error from server (NotFound): agenttask "default/x" not found`` and lets the plugin read ``reason``.
"""

from __future__ import annotations

from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    411: "LengthRequired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    410: "Gone",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    """An error answer: HTTP status, a machine-readable reason and a clear message."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason or REASONS.get(status, "Unknown")
        self.details = details
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return status_body(self.status, self.reason, self.message, self.details)


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def task_not_found(namespace: str, name: str, why: str = "") -> ApiError:
    suffix = f" ({why})" if why else ""
    return ApiError(
        404,
        f'agenttask "{namespace}/{name}" not found{suffix}',
        details={"name": name, "group": "unicore.dev", "kind": "agenttasks"},
    )
