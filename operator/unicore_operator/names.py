"""The names of the shared contract (``unicore.api.contract``) plus the operator's own (consumer group, Job name
cap)."""

from __future__ import annotations

from unicore.api.contract import (
    AGENT_KIND,
    AGENT_PLURAL,
    AGENT_SERVICE_ACCOUNT,
    ANNOTATION_PREFIX,
    API_VERSION,
    ASSIGNED_AT_ANNOTATION,
    ATTEMPT_LABEL,
    COMMAND_JOB_LABEL,
    COMPONENT_LABEL,
    FINALIZER,
    GROUP,
    HOST_PROCESS_GATE,
    KIND,
    KUEUE_QUEUE_LABEL,
    LABEL_VALUE_MAX,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    PARENT_LABEL,
    PLURAL,
    ROOT_LABEL,
    TASK_ID_ANNOTATION,
    TASK_LABEL,
    TURN_LABEL,
    VERSION,
    WARM_POOL_LABEL,
    WARM_TEMPLATE_LABEL,
    label_value,
    short_hash,
    task_id,
)
from unicore.store.keys import ACTIVATIONS_STREAM

OPERATOR_CONSUMER_GROUP = "operator"
JOB_NAME_MAX = 52  # Job names above 52 characters break the pod-name/label limits of derived objects

__all__ = [
    "ACTIVATIONS_STREAM", "AGENT_KIND", "AGENT_PLURAL", "AGENT_SERVICE_ACCOUNT", "ANNOTATION_PREFIX", "API_VERSION",
    "ASSIGNED_AT_ANNOTATION",
    "ATTEMPT_LABEL", "COMMAND_JOB_LABEL",
    "COMPONENT_LABEL", "FINALIZER", "GROUP", "HOST_PROCESS_GATE", "JOB_NAME_MAX", "KIND", "KUEUE_QUEUE_LABEL",
    "LABEL_VALUE_MAX", "MANAGED_BY", "MANAGED_BY_LABEL", "NAME_LABEL", "OPERATOR_CONSUMER_GROUP", "PARENT_LABEL",
    "PLURAL", "ROOT_LABEL", "TASK_ID_ANNOTATION", "TASK_LABEL", "TURN_LABEL", "VERSION", "WARM_POOL_LABEL",
    "WARM_TEMPLATE_LABEL", "label_value",
    "short_hash", "task_id",
]
