"""Names the operator shares with the chart, the runtime and the kubectl plugin (docs/CONTRACT.md)."""

from __future__ import annotations

import hashlib
import re

from unicore.state import keys

GROUP = "unicore.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AgentTask"
PLURAL = "agenttasks"

FINALIZER = "unicore.dev/cleanup"
ANNOTATION_PREFIX = "unicore.dev"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "unicore-operator"
TASK_LABEL = "unicore.dev/task"
TURN_LABEL = "unicore.dev/turn"
ATTEMPT_LABEL = "unicore.dev/attempt"
PARENT_LABEL = "unicore.dev/parent"
ROOT_LABEL = "unicore.dev/root"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TASK_ID_ANNOTATION = "unicore.dev/task-id"

ACTIVATIONS_STREAM = keys.ACTIVATIONS_STREAM  # owned by unicore.state.keys
OPERATOR_CONSUMER_GROUP = "operator"

JOB_NAME_MAX = 52  # Job names above 52 characters break the pod-name/label limits of derived objects
LABEL_VALUE_MAX = 63
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def task_id(namespace: str, name: str) -> str:
    """The Redis task id of AgentTask ``namespace/name``."""
    return f"{namespace}/{name}"


def label_value(text: str) -> str:
    """``text`` as a valid label value: unchanged when it fits, else truncated with a hash suffix."""
    if len(text) <= LABEL_VALUE_MAX and _LABEL_VALUE_RE.match(text):
        return text
    digest = short_hash(text)
    head = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[: LABEL_VALUE_MAX - len(digest) - 1].rstrip("-_.")
    return f"{head}-{digest}" if head else digest
