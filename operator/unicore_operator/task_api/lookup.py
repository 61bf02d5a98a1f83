"""Does an AgentTask exist? The task API asks a TaskLookup before it writes anything.

The operator's lookup (``operator_routes.context_lookup``) reads its Kopf index, falls back to one GET, and knows
only the namespaces the operator watches; ``static_lookup`` serves objects a caller already holds (tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol


class LookupUnavailable(Exception):
    """The Kubernetes API could not be asked (the caller answers 503 and the client retries)."""


class TaskLookup(Protocol):
    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The AgentTask object, or None when there is none."""


def static_lookup(objects: Callable[[], Iterable[dict[str, Any]]]) -> TaskLookup:
    """A lookup over objects a caller already holds (a test)."""

    def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        for obj in objects():
            meta = obj.get("metadata", {})
            if meta.get("namespace") == namespace and meta.get("name") == name:
                return obj
        return None

    return lookup
