"""Redis key builders (schema version 1). Every key of one task shares the hash tag ``{<task id>}``."""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTIVATIONS_STREAM = "uc:activations"  # local tasks'; an AgentTask's namespace has its own (activations_stream)
TASKS_INDEX = "uc:tasks"
# Sorted set: task id -> unix time of its turn's last heartbeat. One global key (not under a task's hash tag), so it is
# written by a separate command next to the task's own scripts; members are removed when the lease is released.
HEARTBEATS_INDEX = "uc:heartbeats"
ACTIVATIONS_MAXLEN = 10_000
# Stream of task changes (store.changes): which task's tree row changed, one small entry each (the local UI's tree
# feed). Global like the activation stream, so it is written by a separate command, never inside a task's script.
CHANGES_STREAM = "uc:changes"  # local tasks'; an AgentTask's namespace has its own (changes_stream)
CHANGES_MAXLEN = 10_000
# Keys that belong to no task (each owned by one module that builds the rest of its name here).
BEDROCK_MODELS_CACHE = "uc:bedrock:models:{region}"  # providers.model_names: the region's model list
THROTTLE_PREFIX = "uc:throttle:"  # providers.throttle: <prefix><tag>:win|tok|state
FAULTS_PREFIX = "uc:faults:"  # faults: one key per armed kill point
FAULTS_LOG = "uc:faults:log"  # faults: every kill, in order
RETENTION_JOURNAL = "uc:retention:removing"  # store.retention: root id -> the tree being removed (JSON)
AGENTS_INDEX = "uc:agents"  # store.agents: sorted set of the stored agent ids (score: when stored)
CONVERSATIONS_INDEX = "uc:conversations"  # store.conversations: sorted set of conversation ids (score: created)
# store.telemetry: metrics of short-lived processes (turn Jobs), shared by all tasks, exported by the operator.
METRICS_COUNTERS = "uc:metrics:counters"  # hash: <name>|<labels> -> float
METRICS_HISTOGRAMS = "uc:metrics:hist"  # hash: <name>|<labels>|le=<bound>, |sum, |count -> float
METRICS_GAUGES = "uc:metrics:gauges"  # hash: <name>|<labels> -> value


def agent_key(agent_id: str) -> str:
    """``uc:agent:{<agent id>}``: one agent definition as JSON (``store.agents``). Not under ``uc:{<id>}:`` so no
    task's key pattern (retention's SCAN of a task, a namespace's ACL patterns) ever covers it."""
    return f"uc:agent:{{{agent_id}}}"


def conversation_key(conversation: str, part: str) -> str:
    """``uc:conv:{<conversation id>}:<part>``: a shared conversation's keys (``store.conversations``): meta, posts,
    post ids, members. One hash tag per conversation; not under ``uc:{<id>}:``, so no task's pattern covers them."""
    return f"uc:conv:{{{conversation}}}:{part}"


def namespace_key(namespace: str, part: str) -> str:
    """``uc:{<namespace>/}:<part>``: a key of a whole namespace, in its tasks' key space (a task name is never empty,
    so no task's key is one of these; a namespace's Redis user is granted exactly the ones it writes)."""
    return f"uc:{{{namespace}/}}:{part}"


def activations_stream(task_id: str) -> str:
    """The activation stream that wakes ``task_id``: its namespace's own (``uc:{<namespace>/}:activations``) for an
    AgentTask, so a namespace that poisons its stream (an entry with the largest id, ``MAXLEN 0``) stops only its own
    wake-ups; the local one (``uc:activations``) for a local task."""
    namespace, slash, _ = task_id.partition("/")
    return namespace_activations_stream(namespace) if slash else ACTIVATIONS_STREAM


def namespace_activations_stream(namespace: str) -> str:
    """The activation stream of ``namespace``'s AgentTasks (``activations_stream``)."""
    return namespace_key(namespace, "activations")


def changes_stream(task_id: str) -> str:
    """The stream of task changes ``task_id``'s changes go to: its namespace's own, or the local one (as
    ``activations_stream``)."""
    namespace, slash, _ = task_id.partition("/")
    return namespace_changes_stream(namespace) if slash else CHANGES_STREAM


def namespace_changes_stream(namespace: str) -> str:
    """The stream of task changes of ``namespace``'s AgentTasks (``changes_stream``)."""
    return namespace_key(namespace, "changes")


def warm_pod_key(namespace: str, pod: str) -> str:
    """``uc:{<namespace>/}:warmpod:<pod>``: a warm turn pod's own record (``store.warm_pods``), written by the pod."""
    return namespace_key(namespace, f"warmpod:{pod}")


def warm_assignment_stream(namespace: str, pod: str) -> str:
    """``uc:{<namespace>/}:warmassign:<pod>``: the stream a warm pod reads its assignment from (``store.warm_pods``);
    written only by the operator."""
    return namespace_key(namespace, f"warmassign:{pod}")


def warm_fence_key(namespace: str) -> str:
    """``uc:{<namespace>/}:warmfence``: the operator's record of which warm pod runs which turn Job's turn
    (``store.warm_pods``); no namespace user may touch it."""
    return namespace_key(namespace, "warmfence")


def task_key(task_id: str, part: str) -> str:
    """``uc:{<task id>}:<part>``; the braces make Redis Cluster keep all of a task's keys in one slot."""
    return f"uc:{{{task_id}}}:{part}"


GATE_PART = "gate"  # uc:{<task id>}:gate:<name>: the scripted model's gates (gate_key)
GATE_NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"  # no glob character, brace or colon: a gate key matches no other part


def gate_key(task_id: str, name: str) -> str:
    """``uc:{<task id>}:gate:<name>``: a gate of the scripted model (``providers.scripted``, step ``gate``): the
    task's model call waits until the key exists. Set only by tests (``store.gates.open_gate``, with the admin
    identity); a namespace's Redis user may read it, not write it (``store.acl``). Not in ``TaskKeys.all`` (its
    names are the script's): the task's pattern (``TaskKeys.pattern``) covers it, so the operator's clean-up of a
    deleted task removes it."""
    if not re.match(GATE_NAME_PATTERN, name):
        raise ValueError(f"not a gate name: {name!r} (1-64 of A-Z a-z 0-9 . _ -)")
    return task_key(task_id, f"{GATE_PART}:{name}")


@dataclass(frozen=True)
class TaskKeys:
    """All keys of one task."""

    task_id: str

    @property
    def task(self) -> str:
        return task_key(self.task_id, "task")

    @property
    def turns(self) -> str:
        return task_key(self.task_id, "turns")

    @property
    def turnmeta(self) -> str:
        return task_key(self.task_id, "turnmeta")

    @property
    def messages(self) -> str:
        return task_key(self.task_id, "messages")

    @property
    def compactions(self) -> str:
        """Append-only list of compaction records: summaries of the history before a seq (``store.compactions``)."""
        return task_key(self.task_id, "compactions")

    @property
    def inbox(self) -> str:
        return task_key(self.task_id, "inbox")

    @property
    def seen(self) -> str:
        return task_key(self.task_id, "seen")

    @property
    def lease(self) -> str:
        return task_key(self.task_id, "lease")

    @property
    def fence(self) -> str:
        return task_key(self.task_id, "fence")

    @property
    def heartbeat(self) -> str:
        return task_key(self.task_id, "heartbeat")

    @property
    def children(self) -> str:
        return task_key(self.task_id, "children")

    @property
    def child_slots(self) -> str:
        """Sorted set of this task's child ids that hold a child slot (reserved before the child is created)."""
        return task_key(self.task_id, "childslots")

    @property
    def tree_slots(self) -> str:
        """On a root: sorted set of descendant ids that hold a slot of the tree (``max_descendants``)."""
        return task_key(self.task_id, "treeslots")

    @property
    def operator(self) -> str:
        """The operator's per-task hash: Jobs ended per turn, consecutive failures, last failure, retry time."""
        return task_key(self.task_id, "operator")

    @property
    def operator_jobs(self) -> str:
        """Set of turn Job names whose end the operator recorded (each counted once)."""
        return task_key(self.task_id, "opjobs")

    @property
    def operator_reaped(self) -> str:
        """Set of turn Job names the watchdog recorded first (their own outcome, when it shows, is not a repeat)."""
        return task_key(self.task_id, "opreaped")

    @property
    def command_jobs(self) -> str:
        """The task's command Jobs as its turns requested them (``submit_job``; ``store.command_jobs``): number ->
        request, and ``#next``, the last number given."""
        return task_key(self.task_id, "cmdjobs")

    @property
    def operator_command_jobs(self) -> str:
        """What the operator (or local mode's supervisor) did with those requests: ``created:<n>`` (the Job's uid, or
        ``local``), ``ended:<n>`` (the outcome, once its result is in the task's inbox). A namespace's Redis user
        cannot write it (``store.acl``)."""
        return task_key(self.task_id, "opcmdjobs")

    @property
    def tokens(self) -> str:
        """The live stream of the model's answers as they arrive (``store.token_stream``; bounded, expires)."""
        return task_key(self.task_id, "tokens")

    @property
    def budget(self) -> str:
        """On a root: the token budget reservations of the tree's model calls in flight (``store.tree_budget``)."""
        return task_key(self.task_id, "budget")

    @property
    def approvals(self) -> str:
        """Tool calls waiting for a person (approvals, ask_user questions) as the turn recorded them, and the turn's
        marks on them (``store.approvals``); the decisions are in ``decisions``."""
        return task_key(self.task_id, "approvals")

    @property
    def decisions(self) -> str:
        """People's decisions on the task's waiting calls (``store.approvals``): written only by the deciders, with the
        admin or local identity; a namespace's Redis user may read it, not write it (``store.acl``): a turn pod
        cannot approve its own calls."""
        return task_key(self.task_id, "decisions")

    @property
    def conversations(self) -> str:
        """The conversations the task takes part in, a hash (id -> when it joined; ``store.conversations``): the
        conversation's members are the truth, this is the task's way to find them."""
        return task_key(self.task_id, "conversations")

    @property
    def conversation_outbox(self) -> str:
        """The task's posts (``post_message``) waiting to go into their conversations: the task's own key, so a post's
        sender is the task whose outbox it came from (``store.conversations.publish``)."""
        return task_key(self.task_id, "convout")

    @property
    def retired(self) -> str:
        """The task record while retention removes its tree (``store.retention``): renamed from ``task``, so the task
        no longer exists for any turn or producer, and renamed back if the tree turns out not to be idle."""
        return task_key(self.task_id, "retired")

    @property
    def archived(self) -> str:
        """Tombstone left when retention removed the task: archive URL and time (``store.retention``)."""
        return task_key(self.task_id, "archived")

    def pattern(self) -> str:
        """A SCAN pattern matching exactly this task's keys (glob characters of the id escaped)."""
        escaped = "".join("\\" + ch if ch in "[]*?\\" else ch for ch in self.task_id)
        return task_key(escaped, "*")

    def all(self) -> list[str]:
        return [
            self.task,
            self.turns,
            self.turnmeta,
            self.messages,
            self.compactions,
            self.inbox,
            self.seen,
            self.lease,
            self.fence,
            self.heartbeat,
            self.children,
            self.child_slots,
            self.tree_slots,
            self.operator,
            self.operator_jobs,
            self.operator_reaped,
            self.tokens,
            self.retired,
            self.archived,
            self.approvals,
            self.decisions,
            self.budget,
            self.command_jobs,
            self.operator_command_jobs,
            self.conversations,
            self.conversation_outbox,
        ]
