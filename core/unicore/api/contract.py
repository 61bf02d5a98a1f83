"""Names shared by the runtime, the operator, the chart and the kubectl plugin (docs/CONTRACT.md): the API group and
kind, labels, annotations, the agents' ServiceAccount, task ids. Nothing else spells them (a test checks).

It lives in the runtime package because turn pods (the Kubernetes spawner) need it and their image has no
operator; the operator's ``names`` module re-exports it."""

from __future__ import annotations

import hashlib
import re

GROUP = "unicore.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "AgentTask"
PLURAL = "agenttasks"
AGENT_KIND = "Agent"  # reusable agent definitions (crds/agent.yaml, unicore.agents)
AGENT_PLURAL = "agents"
SCHEDULE_KIND = "AgentSchedule"  # AgentTasks started on a cron schedule (crds/agentschedule.yaml, docs/schedules.md)
SCHEDULE_PLURAL = "agentschedules"
TRIGGER_KIND = "AgentTrigger"  # AgentTasks started (or messages sent) by webhook deliveries (docs/triggers.md)
TRIGGER_PLURAL = "agenttriggers"
# a namespace's Secret of its triggers' HMAC keys (one key per trigger): the one Secret name the operator reads
TRIGGER_SECRET = "unicore-triggers"
MCP_SERVER_KIND = "MCPServer"  # MCP tool servers (unicore.mcp_config: local-mode documents, later a CRD)

FINALIZER = f"{GROUP}/cleanup"
ANNOTATION_PREFIX = GROUP

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "unicore-operator"
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"
TASK_LABEL = f"{GROUP}/task"
TURN_LABEL = f"{GROUP}/turn"
ATTEMPT_LABEL = f"{GROUP}/attempt"
COMMAND_JOB_LABEL = f"{GROUP}/command-job"  # a task's command Job (submit_job): its number; turn Jobs have none
WARM_POOL_LABEL = f"{GROUP}/warm-pool"  # a warm turn Job's pool (issue 30); it has no task label until assigned
WARM_TEMPLATE_LABEL = f"{GROUP}/warm-template"  # the hash of the pod template a warm Job was built from
SCHEDULE_LABEL = f"{GROUP}/schedule"  # the AgentSchedule that started a task (unicore.schedules.schedule_label)
TRIGGER_LABEL = f"{GROUP}/trigger"  # the AgentTrigger that started a task
A2A_AGENT_LABEL = f"{GROUP}/a2a-agent"  # the Agent an A2A client started a task of (unicore_operator.a2a_server)
PARENT_LABEL = f"{GROUP}/parent"
ROOT_LABEL = f"{GROUP}/root"
NODE_POOL_LABEL = f"{GROUP}/node-pool"  # the example node pools of the dev cluster and kind config
HOST_PROCESS_GATE = f"{GROUP}/host-process"  # readiness gate of the demo's host-process operator endpoint
LOCAL_PATH_PROVISIONER = f"{GROUP}/local-path"  # the dev cluster's real node: its volume provisioner's name
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_MANAGED_LABEL = f"{GROUP}/kueue"  # the dev cluster's Kueue manages the Jobs of namespaces with this label
TASK_ID_ANNOTATION = f"{GROUP}/task-id"
# when a warm turn pod was given its turn (RFC 3339): its turn started then, not at the pod's start (issue 30)
ASSIGNED_AT_ANNOTATION = f"{GROUP}/assigned-at"
SCHEDULED_AT_ANNOTATION = f"{GROUP}/scheduled-at"  # a scheduled task's run: its scheduled time (RFC 3339)
A2A_CALLER_ANNOTATION = f"{GROUP}/a2a-caller"  # who started a task through A2A (the TokenReview's user name)
EVENT_ID_ANNOTATION = f"{GROUP}/event-id"  # a triggered task's event: its id (the sender's delivery id)
# where a task's turns hang in its tree's trace (a W3C traceparent: the spawn call that created it; unicore.traces)
TRACEPARENT_ANNOTATION = f"{GROUP}/traceparent"

AGENT_SERVICE_ACCOUNT = "unicore-agent"

LABEL_VALUE_MAX = 63
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def task_id(namespace: str, name: str) -> str:
    """The task id of AgentTask ``namespace/name`` (its Redis id; local tasks have bare names)."""
    return f"{namespace}/{name}"


def split_task_id(task_id: str) -> tuple[str, str] | None:
    """(namespace, name) of the AgentTask whose task id is ``task_id``; None for a local task's bare name."""
    namespace, slash, name = task_id.partition("/")
    return (namespace, name) if slash else None


def task_namespace(task_id: str) -> str:
    """The namespace of ``task_id`` ("" for a local task's bare name)."""
    namespace, slash, _ = task_id.partition("/")
    return namespace if slash else ""


def same_namespace(task_id: str, other_id: str) -> bool:
    """Both tasks are in one namespace (local tasks: both local). The tenant boundary: every link the operator or
    the task API follows from one task to another (children, parent, owed reports) is used only when this holds,
    since a namespace's own Redis user can write those links (docs/architecture.md, "The tenant boundary")."""
    return task_namespace(task_id) == task_namespace(other_id)


def label_value(text: str) -> str:
    """``text`` as a valid label value: unchanged when it fits, else truncated with a hash suffix."""
    if len(text) <= LABEL_VALUE_MAX and _LABEL_VALUE_RE.match(text):
        return text
    digest = short_hash(text)
    head = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[: LABEL_VALUE_MAX - len(digest) - 1].rstrip("-_.")
    return f"{head}-{digest}" if head else digest
