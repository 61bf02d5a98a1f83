"""The stored form of a tool call waiting for a person, shared by the readers and deciders (``state.approvals``) and
the turn's writes (``state.approval_writes``): the turn's records in ``uc:{T}:approvals`` and the people's decisions
in ``uc:{T}:decisions``.

Who decides what a call's status is (``_parse``): approved or denied, by whom, why and when come only from
the call's entry in ``decisions``, which a namespace's Redis user cannot write; an entry also holds the call as it
was when decided, and that copy is what runs. ``answered`` (a question answered by a user message) comes from the
turn's state in ``approvals``. Anything else the approvals hash claims (a state or a call record that says approved,
a decider's name) is ignored: such a call is pending."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import redis

from unicore.errors import LeaseLost, TaskNotFound
from unicore.store import codec, lua
from unicore.store.client import RedisClient

PendingKind = Literal["approval", "input"]
CallStatus = Literal["pending", "approved", "denied", "answered"]
TIMEOUT_DECIDER = "timeout"
WAKEUP_TYPE = "decision"

_CALL = "call:"
_STATE = "state:"
_HELD = "held:"
_COUNT = "pending:"


@dataclass(frozen=True)
class PendingCall:
    """A tool call waiting for (or decided by) a person."""

    call_id: str
    tool: str
    input: dict[str, Any]
    kind: PendingKind
    turn: int
    requested_at: float
    question: str = ""  # ask_user's question
    status: CallStatus = "pending"
    decided_by: str = ""
    reason: str = ""
    decided_at: float | None = None
    position: int = 0  # index of the call in the model's answer
    answer: str = ""  # a question's answer (status answered)
    answer_id: str = ""  # the id of the message that answered it
    started_at: float | None = None  # an approved call: when the turn started its tool (it runs at most once)
    resolved_at: float | None = None  # when its result was queued for the conversation
    # What the tool's name ran when the call was made (``Tool.target``: an MCP tool's server and real name); an
    # approved call whose name runs something else by then is not run (``approvals_turn``). "": not recorded.
    target: str = ""

    @property
    def decided(self) -> bool:
        return self.status != "pending"

    def describe(self) -> str:
        """One line for people (text is not escaped: print it with ``terminal.printable``)."""
        if self.kind == "input":
            return f"{self.call_id}: question: {self.question}"
        arguments = json.dumps(self.input, ensure_ascii=False, sort_keys=True)
        if len(arguments) > 200:
            arguments = arguments[:197] + "..."
        return f"{self.call_id}: {self.tool} {arguments}"

    def result_text(self) -> str:
        """The text a denied call's error result carries."""
        who = self.decided_by or "?"
        return f"denied by {who}: {self.reason}" if self.reason else f"denied by {who}"


_STATE_FIELDS = ("status", "decided_by", "reason", "decided_at", "answer", "answer_id", "started_at",
                 "resolved_at")


def _call_json(call: PendingCall) -> str:
    data = {k: v for k, v in asdict(call).items() if k not in _STATE_FIELDS}
    return codec.dumps(data)


def _state_json(call: PendingCall) -> str:
    data = {k: getattr(call, k) for k in _STATE_FIELDS if getattr(call, k) is not None}
    data["kind"] = call.kind
    data["requested_at"] = call.requested_at
    return codec.dumps(data)


# The fields of a call's state that the turn writes (its marks); a decision's fields come from ``decisions`` only.
_TURN_FIELDS = ("answer", "answer_id", "started_at", "resolved_at")
_DECISION_FIELDS = ("status", "decided_by", "reason", "decided_at")
_DECIDED = ("approved", "denied")


def _parse(call_raw: str, state_raw: str | None, decision_raw: str | None = None) -> PendingCall:
    """The call from its record and state (``approvals``) and its decision (``decisions``; None: undecided)."""
    decision = json.loads(decision_raw) if decision_raw else {}
    if decision.get("status") not in _DECIDED:
        decision = {}
    recorded = decision.get("call")
    data = {k: v for k, v in json.loads(recorded if isinstance(recorded, str) else call_raw).items()
            if k not in _STATE_FIELDS}
    state = json.loads(state_raw) if state_raw else {}
    for name in _TURN_FIELDS:
        if state.get(name) is not None:
            data[name] = state[name]
    if decision:
        data.update({name: decision[name] for name in _DECISION_FIELDS if decision.get(name) is not None})
    elif state.get("status") == "answered" and data.get("kind") == "input":
        data.update(status="answered", decided_by=state.get("decided_by") or "", decided_at=state.get("decided_at"))
    known = PendingCall.__dataclass_fields__
    return PendingCall(**{k: v for k, v in data.items() if k in known})


def _order(call: PendingCall) -> tuple[int, float, int, str]:
    return (call.turn, call.requested_at, call.position, call.call_id)


# The two counter fields ``waiting_for`` reads (HMGET them in this order; ``waiting_from_counters`` reads the reply).
WAITING_FIELDS: tuple[str, str] = (_COUNT + "approval", _COUNT + "input")


def waiting_from_counters(values: Sequence[object]) -> PendingKind | None:
    """``waiting_for`` from the two counters (``WAITING_FIELDS``) as HMGET returned them (bytes, text or None)."""
    approval, question = (_count(value) for value in values)
    return "approval" if approval > 0 else "input" if question > 0 else None


def _count(value: object) -> int:
    if value is None:
        return 0
    try:
        return int(value.decode() if isinstance(value, bytes) else str(value))
    except ValueError:
        return 0


def calls_from_hash(data: dict[str, str], decisions: dict[str, str]) -> list[PendingCall]:
    """Every call in the approvals hash with its decision (both HGETALLs decoded to text), in call order: for readers
    that fetched them themselves."""
    found = [_parse(raw, data.get(_STATE + call_id), decisions.get(call_id))
             for call_id, raw in ((name[len(_CALL):], raw) for name, raw in data.items() if name.startswith(_CALL))]
    return sorted(found, key=_order)


_DECODE_STATE = """
local function is_set(value) return value ~= nil and value ~= cjson.null end
"""


def run_script(client: RedisClient, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    try:
        return client.register_script(script)(keys=list(keys), args=list(args))
    except redis.ResponseError as exc:
        text = str(exc)
        if lua.LEASE_LOST in text:
            raise LeaseLost(f"lease of {keys[0]} lost: write refused") from None
        if "UC_NO_TASK" in text:
            raise TaskNotFound(f"no task behind {keys[0]}") from None
        raise

__all__ = ["CallStatus", "PendingCall", "PendingKind", "run_script"]
