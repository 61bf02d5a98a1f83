"""Pydantic models of everything UniCore stores or accepts at an edge.

Content blocks follow the Bedrock Converse shape, kept as plain dicts so they round-trip unchanged:
``{"text": str}``, ``{"toolUse": {"toolUseId", "name", "input"}}``,
``{"toolResult": {"toolUseId", "content": [{"text"}|{"json"}], "status": "success"|"error"}}``.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

SCHEMA_VERSION = 1
DEFAULT_MAX_ITERATIONS = 250
DEFAULT_MESSAGE_CAP_BYTES = 256 * 1024

# [<namespace>/]<name>: a DNS-1123 label, then a DNS-1123 subdomain (dot-separated labels, none empty: "a..b" is no
# Kubernetes object name).
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
TASK_ID_RE = re.compile(rf"^(?:{_LABEL}/)?{_LABEL}(\.{_LABEL})*$")
# Task id bounds: a name is at most an AgentTask name (253), a namespace at most a Kubernetes namespace (63).
# Everything derived from an id with a tighter limit shortens it with a hash of the whole id: Job names (52,
# unicore_operator.job_builder.turn_job_name), label values (63, unicore_operator.names.label_value), local
# turn log files (255 bytes, unicore.launch.local.turn_log_name). A local root has no namespace, so its
# workspace folder (~/.unicore/workspaces/<root>) fits a file name too. Redis keys have no practical limit.
MAX_TASK_NAME = 253
MAX_NAMESPACE = 63

Role = Literal["user", "assistant"]
# "decision": a wake-up queued when people decided every tool call a task waited for (``state.approvals``); it
# carries no conversation content (the drain moves no message for it)
InboxType = Literal["user", "completion", "tool_result", "decision"]
ContentBlock = dict[str, Any]


def task_name(task_id: str) -> str:
    """The task's name: the part after the namespace (``default/demo-a`` -> ``demo-a``)."""
    return task_id.rsplit("/", 1)[-1]


def child_task_id(parent_id: str, name: str) -> str:
    """The id of the child ``name`` of ``parent_id``: ``<parent>-<name>`` in the parent's namespace."""
    return f"{parent_id}-{name}"


# Inbox message ids. The inbox accepts an id once, so a message a user sends with the id of one the runtime sends
# would stand in for it and the runtime's own would be dropped as a repeat (a child's report, a tool's result). The
# runtime's ids therefore start with these prefixes, which no id a user chooses may start with (``user_message_id``:
# ``unicore send --id``, the web UI's client id, the task API's message id). A new kind of runtime message gets its
# prefix here (tests/unit/test_message_ids.py finds every ``InboxMessage(id=...)`` and checks it).
PROMPT_ID_PREFIX = "prompt:"  # the prompt a task is created with
# an AgentTask's spec.prompt, by the object's uid: a task deleted and created again under its name is a new object
# whose prompt is queued again (ids already stored use this form, so it stays apart from PROMPT_ID_PREFIX)
OBJECT_PROMPT_ID_PREFIX = "prompt-"
COMPLETION_ID_PREFIX = "completion:"  # a child's report of a turn, to its parent
FAILURE_ID_PREFIX = "failed:"  # a child's report of its failure, to its parent
TOOL_RESULT_ID_PREFIX = "tr:"  # a tool call's result (also a person's decision on a call that waited for one)
DECISION_ID_PREFIX = "decision:"  # the wake-up after people decided every call a task waited for (store.approvals)
REAP_ID_PREFIX = "reap-"  # the watchdog's note on a reaped turn
JOB_RESULT_ID_PREFIX = "cmdjob:"  # a command Job's result (submit_job, store.command_jobs)
TRIGGER_ID_PREFIX = "trigger:"  # a webhook event's message to an AgentTrigger's task (unicore_operator.triggers)
A2A_ID_PREFIX = "a2a:"  # an A2A client's message to an agent's task (unicore_operator.a2a_server)
CONVERSATION_ID_PREFIX = "conv:"  # a conversation's post delivered to a participating task (unicore.conversations)
RUNTIME_MESSAGE_ID_PREFIXES = (PROMPT_ID_PREFIX, OBJECT_PROMPT_ID_PREFIX, COMPLETION_ID_PREFIX, FAILURE_ID_PREFIX,
                               TOOL_RESULT_ID_PREFIX, DECISION_ID_PREFIX, REAP_ID_PREFIX, JOB_RESULT_ID_PREFIX,
                               TRIGGER_ID_PREFIX, A2A_ID_PREFIX, CONVERSATION_ID_PREFIX)


def prompt_message_id(task_id: str) -> str:
    """The inbox message id of the prompt a task is created with."""
    return f"{PROMPT_ID_PREFIX}{task_id}"


def object_prompt_message_id(uid: str) -> str:
    """The inbox message id of an AgentTask's spec.prompt (``uid``: the object's): the same on every retry, so it is
    queued once."""
    return f"{OBJECT_PROMPT_ID_PREFIX}{uid}"


def completion_message_id(task_id: str, turn_number: int) -> str:
    """The id of the report of ``task_id``'s turn ``turn_number`` in its parent's inbox."""
    return f"{COMPLETION_ID_PREFIX}{task_id}:{turn_number}"


def failure_message_id(task_id: str, turn_number: int) -> str:
    """The id of the report that ``task_id`` failed (in turn ``turn_number``) in its parent's inbox."""
    return f"{FAILURE_ID_PREFIX}{task_id}:{turn_number}"


def tool_result_message_id(call_id: str) -> str:
    """The id of the result of tool call ``call_id`` in its task's inbox."""
    return f"{TOOL_RESULT_ID_PREFIX}{call_id}"


def reap_message_id(attempt: str) -> str:
    """The id of the watchdog's note that it reaped ``attempt`` (one per reaped attempt)."""
    return f"{REAP_ID_PREFIX}{attempt}"


def job_result_message_id(task_id: str, n: int) -> str:
    """The id of the result of ``task_id``'s command Job number ``n`` in its inbox (delivered once)."""
    return f"{JOB_RESULT_ID_PREFIX}{task_id}:{n}"


def trigger_message_id(namespace: str, trigger: str, source: str, event_id: str) -> str:
    """The id of the message event ``event_id`` (from ``source``) sends through AgentTrigger ``namespace/trigger``:
    the same for every delivery of that event, so it is queued once."""
    digest = hashlib.sha256(f"{namespace}\0{trigger}\0{source}\0{event_id}".encode()).hexdigest()
    return f"{TRIGGER_ID_PREFIX}{digest}"


def a2a_message_id(message_id: str) -> str:
    """The id of A2A message ``message_id`` (the client's ``messageId``) in a task's inbox: a retried send is
    queued once."""
    return f"{A2A_ID_PREFIX}{message_id}"


def conversation_message_id(conversation: str, post_id: str, task_id: str) -> str:
    """The id of conversation post ``post_id`` in participant ``task_id``'s inbox: the same on every delivery of it,
    so it is queued once however often delivery runs (after a crash, by two deliverers at once)."""
    digest = hashlib.sha256(f"{conversation}\0{post_id}\0{task_id}".encode()).hexdigest()
    return f"{CONVERSATION_ID_PREFIX}{digest}"


def user_message_id(message_id: str) -> str:
    """``message_id`` when a user may choose it; a ValueError of one line when the runtime's own messages use its
    prefix (``RUNTIME_MESSAGE_ID_PREFIXES``). Ids compare exactly, so only these exact prefixes are refused."""
    for prefix in RUNTIME_MESSAGE_ID_PREFIXES:
        if message_id.startswith(prefix):
            # a pydantic error (a ValueError) so that a model's field reports this line and no "Value error, "
            raise PydanticCustomError(
                "reserved_message_id",
                "message id {shown} starts with {prefix}, which only the runtime's own messages use; choose another",
                {"shown": _shown(message_id), "prefix": repr(prefix)},
            )
    return message_id


UserMessageId = Annotated[str, AfterValidator(user_message_id)]


def _shown(text: str) -> str:
    """``text`` quoted for a one-line error, cut when long."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text)} characters)"


def check_prompt(text: str) -> str:
    """The one rule for a prompt (a task's first message) on every path a task is created by: ``unicore run``, the
    web UI's form and manifests, an AgentTask's ``spec.prompt``, ``spawn_task``. Not empty and not only whitespace
    (``str.isspace``: spaces, tabs, line breaks, U+3000 ...); otherwise kept as written. A one-line ValueError (a
    pydantic error, so that a model's field reports this line and no "Value error, ")."""
    if not text.strip():
        raise PydanticCustomError("empty_prompt", "the prompt is empty (or only whitespace)")
    return text


# minLength: what a JSON schema can say of the rule (a tool's input schema, for the model)
Prompt = Annotated[str, AfterValidator(check_prompt), Field(json_schema_extra={"minLength": 1})]


def validate_task_id(task_id: str) -> str:
    name = task_name(task_id)
    namespace = task_id[: -len(name) - 1] if len(name) < len(task_id) else ""
    if len(name) > MAX_TASK_NAME or len(namespace) > MAX_NAMESPACE or not TASK_ID_RE.fullmatch(task_id):
        shown = repr(task_id) if len(task_id) <= 80 else f"{task_id[:60]!r}... ({len(task_id)} characters)"
        raise ValueError(
            f"invalid task id {shown}: use lowercase letters, digits and '-' (optionally '<namespace>/<name>'), "
            f"a name of at most {MAX_TASK_NAME} and a namespace of at most {MAX_NAMESPACE} characters"
        )
    return task_id


class Limits(BaseModel):
    """Policy limits, enforced in code (never left to the model)."""

    model_config = ConfigDict(extra="forbid")

    max_iterations: int = Field(default=DEFAULT_MAX_ITERATIONS, ge=1, le=10_000)
    max_depth: int = Field(default=3, ge=0, le=32)
    max_children: int = Field(default=10, ge=0, le=1_000)
    max_descendants: int = Field(default=100, ge=0, le=100_000)
    token_budget: int = Field(default=0, ge=0, description="tokens per root tree; 0 = unlimited")
    turn_timeout_seconds: int = Field(default=3600, ge=1)
    command_timeout_seconds: int = Field(default=600, ge=1, le=86_400)
    max_job_gpus: int = Field(default=1, ge=0, le=64)  # GPUs one command Job (submit_job) may ask for
    recursion: bool = True
    summarize_turns: bool = True


# Where and how turn pods run: fields of both an AgentTask's spec and an Agent's (``unicore.api.spec``), which only
# the operator's Job builder reads (a task's own, else its Agent's); no runtime shape here has them.
SCHEDULING_FIELDS = ("gpus", "resources", "node_selector", "tolerations", "priority_class_name", "runtime_class_name",
                     "image", "workbench", "queue_name")

APPROVE_ALL = "*"
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 3600


class Approval(BaseModel):
    """Which tool calls wait for a person's approval before they run (``state.approvals``, ``approvals_turn``).

    ``tools``: tool names, or ``["*"]`` for every tool; an empty list gates nothing. A call not decided within
    ``timeout_seconds`` is denied (by the operator's timer, or the local supervisor)."""

    model_config = ConfigDict(extra="forbid")

    tools: list[str] = Field(default_factory=list)
    timeout_seconds: int = Field(default=DEFAULT_APPROVAL_TIMEOUT_SECONDS, ge=1, le=30 * 24 * 3600)

    def gates(self, tool: str) -> bool:
        return APPROVE_ALL in self.tools or tool in self.tools


# An MCP server's name (``metadata.name`` of an MCPServer; ``unicore.mcp_config``): a DNS-1123 label of at most 32
# characters, so ``<server>__<tool>`` (the name the model sees) keeps at least 30 characters for the tool.
MCP_SERVER_NAME_RE = re.compile(rf"^{_LABEL}$")
MAX_MCP_SERVER_NAME = 32


def validate_mcp_server_name(name: str) -> str:
    if len(name) > MAX_MCP_SERVER_NAME or not MCP_SERVER_NAME_RE.match(name):
        raise ValueError(
            f"invalid MCP server name {name[:80]!r}: use 1-{MAX_MCP_SERVER_NAME} lowercase letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return name


class MCPServerRef(BaseModel):
    """A server a task uses (``mcpServers: [{name: time, tools: [get_current_time]}]``): ``tools`` is the allow-list
    of the server's tools (their names on the server); None = every tool the server lists (docs/mcp.md)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    tools: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = None

    _check_name = field_validator("name")(lambda cls, v: validate_mcp_server_name(v))  # type: ignore[misc]

    @field_validator("tools")
    @classmethod
    def _unique(cls, tools: list[str] | None) -> list[str] | None:
        return None if tools is None else list(dict.fromkeys(tools))


def one_ref_per_server(refs: list[MCPServerRef] | None) -> list[MCPServerRef] | None:
    """The check of a ``mcpServers`` list (a task's, an Agent's): each server named once."""
    names = [ref.name for ref in refs or []]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"MCP server(s) named more than once: {', '.join(twice)}")
    return refs


class TaskSpec(BaseModel):
    """What is needed to create a task (root or child)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    prompt: Prompt | None = None  # None: none queued with the task (the operator queues spec.prompt on its own)
    parent: str | None = None
    model: str = "scripted"
    system_prompt: str = ""
    tools: list[str] | None = None  # None = the default toolset for the task's depth
    child_tools: list[str] | None = None  # reduced toolset given to children
    limits: Limits = Field(default_factory=lambda: Limits())
    script: dict[str, Any] | None = None  # scripted model steps, inherited by children
    approval: Approval | None = None  # tool calls that wait for a person (None: a child inherits its parent's)
    mcp_servers: list[MCPServerRef] | None = None  # MCP servers whose tools the task uses (a child gets none)
    # Local mode only: the MCP server definitions `unicore run --mcp-server` gave the tree (camelCase dicts, as in
    # ``unicore.mcp_config``), stored on the root; the local supervisor passes them to the tree's turns in
    # UNICORE_MCP_SERVERS. None on Kubernetes, where the operator resolves MCPServer resources.
    mcp_definitions: list[dict[str, Any]] | None = None
    # The agent whose definition the task narrows (``unicore.agents``): ``<namespace>/<name>`` on Kubernetes, the
    # bare name in local mode; None = no agent. With one, the fields above that the creator set are the task's own
    # narrowing of it (``model_fields_set``), resolved over the agent's at every turn start.
    agent: str | None = None

    @field_validator("agent")
    @classmethod
    def _agent_id(cls, agent: str | None) -> str | None:
        if agent is not None and not TASK_ID_RE.fullmatch(agent):
            raise ValueError(f"invalid agent id {agent[:80]!r}: '[<namespace>/]<name>', a Kubernetes object name")
        return agent

    _one_ref_per_server = field_validator("mcp_servers")(  # type: ignore[misc]
        lambda cls, refs: one_ref_per_server(refs))

    _check_id = field_validator("id")(lambda cls, v: validate_task_id(v))  # type: ignore[misc]


class Message(BaseModel):
    """One stored conversation message (append-only)."""

    role: Role
    content: list[ContentBlock]
    seq: int = 0  # position in the task's whole history
    turn_number: int = 0
    message_number: int = 0  # position inside its turn
    timestamp: float = Field(default_factory=time.time)
    # ids of the ``user`` inbox entries (sends, prompts, a parent's messages) a user message was drained from:
    # ``unicore send`` finds its answer by them (``history.answer_to``); empty on other messages and on messages
    # stored before the field existed
    inbox_ids: list[str] = Field(default_factory=list)


class InboxMessage(BaseModel):
    """A message waiting in a task's inbox."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    type: InboxType
    content: Any  # str for user/completion, a toolResult block for tool_result
    sender: str | None = None
    tool_use_id: str | None = None
    timestamp: float = Field(default_factory=time.time)
    # on a tool_result that carries a person's answer to ``ask_user``: the id of the message the answer came in (a
    # request: ``history.answer_to`` finds the answer to it); None otherwise
    answers: str | None = None
    # the W3C traceparent of the span whose work it reports (a child's turn; ``unicore.traces``): the turn that drains
    # it links to that span. None: no trace
    trace_link: str | None = None


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


def text_block(text: str) -> ContentBlock:
    return {"text": text}


def tool_result_block(tool_use_id: str, text: str, *, error: bool = False) -> ContentBlock:
    return {
        "toolResult": {
            "toolUseId": tool_use_id,
            "content": [{"text": text}],
            "status": "error" if error else "success",
        }
    }


def is_turn_ending(message: Message | dict[str, Any]) -> bool:
    """A text-only assistant message ends a turn."""
    role = message.role if isinstance(message, Message) else message.get("role")
    content = message.content if isinstance(message, Message) else message.get("content", [])
    if role != "assistant":
        return False
    has_text = any("text" in block for block in content)
    has_tool_use = any("toolUse" in block for block in content)
    return has_text and not has_tool_use
