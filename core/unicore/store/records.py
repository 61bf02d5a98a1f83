"""Typed views of what the store reads back from Redis: task records, turns, drain results, leases.

``TaskRecord.from_hash`` is the one decoder of a task's ``uc:{T}:task`` hash; ``task_views.TaskView`` is a projection
of a ``TaskRecord`` (the fields the tools, the spawn policy and the operator read), never decoded from the hash on its
own."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, ValidationError

from unicore.api.schema import SCHEMA_VERSION, Approval, Limits, MCPServerRef, Message, Usage
from unicore.store import codec
from unicore.traces.spans import parse as parse_traceparent

TaskStatus = Literal["idle", "running"]


class TaskRecord(BaseModel):
    """The ``uc:{T}:task`` hash, decoded."""

    id: str
    name: str
    parent: str | None = None
    root: str
    depth: int = 0
    model: str = "scripted"
    system_prompt: str = ""
    tools: list[str] | None = None
    child_tools: list[str] | None = None
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    script: dict[str, Any] | None = None
    approval: Approval | None = None  # tool calls that wait for a person (``state.approvals``)
    mcp_servers: list[MCPServerRef] | None = None  # MCP servers whose tools the task uses (``TaskSpec``)
    mcp_definitions: list[dict[str, Any]] | None = None  # local mode, on a root: the tree's MCP server definitions
    # Its agent (``TaskSpec.agent``), what the creator set over it (``unicore.agents.own_settings``) and the agents
    # it may spawn (its agent's ``agents``, as of its last turn start: ``unicore.agent_resolution``)
    agent: str | None = None
    own_spec: dict[str, Any] | None = None
    agents: list[str] | None = None
    status: TaskStatus = "idle"
    turns: int = 0  # turns started (== number of stored turns)
    iterations: int = 0  # model calls of turns (assistant messages)
    tool_iterations: int = 0  # assistant messages that asked for tools
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    tree_input_tokens: int = 0  # rolled up over the whole tree (meaningful on the root)
    tree_output_tokens: int = 0
    tree_total_tokens: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    last_response: str = ""
    last_error: str = ""
    lease_holder: str = ""
    suspended: bool = False  # local mode's suspend (``state.suspension``); on Kubernetes spec.suspend is the truth
    suspended_at: float = 0.0  # when ``suspended`` last changed
    # Its place in its tree's trace (``unicore.traces``; "" / 0: none): the W3C traceparent its turns hang under (the
    # spawn call that created it, or its root ``task`` span), and its newest turn attempt's span with the time that
    # attempt started (0 once it ended: a later attempt that finds it still set emits it as lost)
    trace_parent: str = ""
    trace_turn: str = ""
    trace_turn_started: float = 0.0
    schema_version: int = SCHEMA_VERSION

    @property
    def trace_id(self) -> str:
        """The id of its tree's trace ("" when it has none): the trace its turns are in."""
        ref = parse_traceparent(self.trace_parent)
        return ref.trace_id if ref is not None else ""

    @property
    def usage(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens, output_tokens=self.output_tokens, total_tokens=self.total_tokens
        )

    @property
    def tree_usage(self) -> Usage:
        return Usage(
            input_tokens=self.tree_input_tokens,
            output_tokens=self.tree_output_tokens,
            total_tokens=self.tree_total_tokens,
        )

    JSON_FIELDS: ClassVar[tuple[str, ...]] = (
        "tools", "child_tools", "limits", "script", "approval", "mcp_servers", "mcp_definitions", "own_spec", "agents"
    )

    @classmethod
    def from_hash(cls, data: Mapping[Any, Any], *, tolerant: bool = False) -> TaskRecord:
        """The ``uc:{T}:task`` hash (keys and values str or bytes; values already decoded are taken as they are),
        decoded. ``tolerant``: a field that does not decode or validate reads as its default, and a record without
        ``id``, ``name`` or ``root`` reads them as "" (what the operator, the spawn checks and ``task_status`` read: a
        namespace's turn pods may write their record); otherwise such a field raises."""
        values: dict[str, Any] = {}
        for raw_key, raw in data.items():
            key = codec.text(raw_key)
            if key not in cls.model_fields:
                continue
            value = codec.text(raw) if isinstance(raw, bytes) else raw
            if key in cls.JSON_FIELDS:
                try:
                    decoded = _json_field(value)
                except ValueError:
                    if not tolerant:
                        raise
                    continue
                if decoded is not None or key != "limits":
                    values[key] = decoded
            elif key in ("parent", "agent"):
                values[key] = value or None
            else:
                values[key] = value
        if not tolerant:
            return cls.model_validate(values)
        while True:
            try:
                return cls.model_validate({**_REQUIRED_UNREAD, **values})
            except ValidationError as error:
                bad = {str(detail["loc"][0]) for detail in error.errors() if detail["loc"]} & values.keys()
                if not bad:
                    raise
                values = {key: value for key, value in values.items() if key not in bad}

    def to_hash(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in self.model_dump(mode="json").items():
            if key in self.JSON_FIELDS:
                out[key] = "" if value is None else codec.dumps(value)
            elif value is None:
                out[key] = ""
            elif isinstance(value, bool):
                out[key] = "1" if value else "0"
            else:
                out[key] = str(value)
        return out


_REQUIRED_UNREAD: dict[str, Any] = {"id": "", "name": "", "root": ""}  # a tolerant read's required fields, if missing


def _json_field(value: Any) -> Any:
    """A JSON field of the task hash: "" is None; a value already decoded is itself."""
    if value is None or value == "":
        return None
    return json.loads(value) if isinstance(value, str) else value


class Turn(BaseModel):
    """One turn with its messages (as loaded by ``TaskStore.load_history``)."""

    turn_number: int
    started_at: float
    first_seq: int
    summary: str = ""
    ended_at: float | None = None
    iterations: int | None = None
    note: str = ""
    messages: list[Message] = Field(default_factory=list)


@dataclass
class DrainResult:
    """What one drain moved from the inbox into the conversation."""

    drained: int = 0  # inbox entries consumed
    messages: list[Message] = field(default_factory=list)  # user messages appended
    turn_number: int | None = None
    new_turn: bool = False
    oldest: float | None = None  # when the oldest drained entry was queued (unix time; None: none says)
    trace_links: list[str] = field(default_factory=list)  # the traceparents the drained entries carried

    @property
    def empty(self) -> bool:
        return self.drained == 0


@dataclass
class Lease:
    """A held lease. ``last_write``: the write id of this holder's newest write of the conversation (``drain``,
    ``append_message``) that Redis acknowledged; ``fence`` carries it, so a write finds out when one of the holder's
    earlier writes is missing (lost in a Redis failover: ``store.lua``'s module doc)."""

    task_id: str
    token: int
    holder: str
    last_write: str = ""

    @property
    def fence(self) -> str:
        """ARGV[1] of a fenced script: the token and the holder's newest write (``lua._FENCE``)."""
        return f"{self.token}/{self.last_write}"


def turn_meta_field(turn_number: int, name: str) -> str:
    """The ``uc:{T}:turnmeta`` hash field of ``name`` (ended_at, summary, iterations, note, ...) of a turn."""
    return f"{turn_number}:{name}"


@dataclass(frozen=True)
class TurnMeta:
    """What a turn's end recorded (``uc:{T}:turnmeta`` fields ``<n>:<name>``); the one parser of that format."""

    ended_at: float | None = None
    summary: str = ""
    iterations: int | None = None
    note: str = ""

    @classmethod
    def of(cls, meta: Mapping[str, str], turn_number: int) -> TurnMeta:
        ended = meta.get(turn_meta_field(turn_number, "ended_at"))
        iterations = meta.get(turn_meta_field(turn_number, "iterations"))
        return cls(
            ended_at=float(ended) if ended else None,
            summary=meta.get(turn_meta_field(turn_number, "summary"), "") or "",
            iterations=int(iterations) if iterations else None,
            note=meta.get(turn_meta_field(turn_number, "note"), "") or "",
        )


@dataclass(frozen=True)
class TurnHeader:
    """A turn's header in ``uc:{T}:turns`` (written by ``lua.py`` when a turn starts)."""

    number: int  # as Redis stores it (from 0)
    started_at: float
    first_seq: int


def parse_turn_headers(raw: Sequence[str]) -> list[TurnHeader]:
    """The stored turn headers, oldest first."""
    headers: list[TurnHeader] = []
    for item in raw:
        data = json.loads(item)
        headers.append(
            TurnHeader(int(data["turn_number"]), float(data["started_at"]), int(data["first_seq"]))
        )
    return sorted(headers, key=lambda h: h.first_seq)
