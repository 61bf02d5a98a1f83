"""A turn's side of approvals and ``ask_user``: what waits for a person, and what happens once decided.

``ApprovalGate.wait`` (after the model's answer): when the answer calls a gated tool (``TaskRecord.approval``) or
``ask_user``, each such call is recorded as a ``PendingCall`` (``state.approvals``) and does not run; the other calls
of the answer run now and their results are HELD with the pending calls (not queued), so that the answer's results
reach the conversation together, in one message, once every call is decided. The turn then ends: no model call
until then (``wait`` returns the note the turn ends with).

``ApprovalGate.prepare`` (before the turn's first drain): user messages in the inbox answer pending questions, in
order (a message answers one question and leaves the inbox). Then, if nothing is pending any more, every decided
call gets its result, in call order, queued with the held ones: approved -> its tool runs now; denied -> an error
result "denied by <who>: <reason>"; answered -> the answer. The drain that follows moves them into the
conversation and the model goes on. While something is still pending, ``prepare`` says so and the turn ends
without draining (decision wake-ups found then are dropped: a later decision queues a new one).

Decided means what the deciders wrote into ``uc:{T}:decisions`` (``state.approvals``), a key this turn's Redis user
may only read: a state, a name or a wake-up that code in the turn pod wrote into the approvals hash or the inbox
decides nothing (the call stays pending), and an approved call runs with the tool and input its decision recorded.

Never twice: an approved call's tool starts only after ``state.approval_writes.start_call`` marked it started (atomic,
fenced); a turn that dies after that mark gives the call the error result ``INTERRUPTED_TEXT`` instead of running it
again (at most once). An approval binds to what the call's tool name ran when it was made (``Tool.target``, kept
in ``PendingCall.target``): an approved call whose name runs another tool by then (an MCP server that lists its
tools differently now) is not run but answered with an error result. Results are queued under the id
``tr:<call id>``, remembered in the task's seen set, so a repeated resolution queues nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import redis

from unicore.api.schema import ContentBlock, InboxMessage, tool_result_block, tool_result_message_id
from unicore.faults import fault_point
from unicore.log import get_logger
from unicore.store import approval_writes as writes
from unicore.store import approvals, codec
from unicore.store.approvals import PendingCall
from unicore.store.records import Lease, TaskRecord
from unicore.terminal import printable
from unicore.tools.ask_user import ASK_USER_TOOL
from unicore.tools.base import Tool, ToolContext
from unicore.tools.registry import run_tool_call
from unicore.traces import genai, spans

log = get_logger("approvals")

INTERRUPTED_TEXT = (
    "Error: the approved tool call was started by a turn that stopped before its result was stored; it was not run "
    "again (it may or may not have taken effect)"
)


class Prepared(Enum):
    NOTHING = "nothing"  # no call waits or waited: a turn as usual
    WAITING = "waiting"  # something is still pending: end without draining or calling the model
    RESOLVED = "resolved"  # every waiting call got its result (queued): drain and go on


def result_entry(call_id: str, block: ContentBlock, sender: str, answers: str | None = None) -> InboxMessage:
    """The inbox entry of a call's result (the id the turn's own results use: ``tr:<call id>``)."""
    return InboxMessage(id=tool_result_message_id(call_id), type="tool_result", content=block, sender=sender,
                        tool_use_id=call_id, answers=answers)


def waiting_note(calls: Sequence[PendingCall]) -> str:
    """One line: what the task waits for."""
    asks = [call for call in calls if call.kind == "input"]
    gated = [call for call in calls if call.kind == "approval"]
    parts = []
    if gated:
        parts.append("approval of " + ", ".join(f"{call.tool} ({call.call_id})" for call in gated))
    if asks:
        parts.append("an answer to " + ", ".join(f"ask_user ({call.call_id})" for call in asks))
    return "waiting for " + " and ".join(parts) if parts else ""


class ApprovalGate:
    """One turn's approvals: ``wait`` after an answer with tool calls, ``prepare`` before the first drain."""

    def __init__(self, client: redis.Redis, lease: Lease, record: TaskRecord, ctx: ToolContext,
                 tools: Sequence[Tool], on_step: Callable[[str], None] | None = None) -> None:
        self.on_step = on_step or (lambda _step: None)  # the turn's progress marks (stall detection)
        self.redis = client
        self.lease = lease
        self.record = record
        self.ctx = ctx
        self.tools = {tool.name: tool for tool in tools}
        self.note = ""

    # ---- after an answer

    def _kind(self, use: dict[str, Any]) -> approvals.PendingKind | None:
        """How a call waits: "input" (ask_user), "approval" (a gated tool), None (it runs now). A call that could
        not run anyway (a tool the task lacks, input its schema refuses) does not wait: it fails at once."""
        name = use.get("name")
        tool = self.tools.get(str(name))
        gated = name == ASK_USER_TOOL or (self.record.approval is not None and self.record.approval.gates(str(name)))
        if tool is None or not gated:
            return None
        try:
            tool.Input.model_validate(use.get("input") or {})
        except ValueError:
            return None
        return "input" if name == ASK_USER_TOOL else "approval"

    def wait(self, turn_number: int, tool_uses: Sequence[ContentBlock], now: float) -> str | None:
        """Record the answer's waiting calls and run (and hold the results of) the others; the note the turn ends
        with, or None when no call of the answer waits (the turn runs them as usual)."""
        uses = [block["toolUse"] for block in tool_uses]
        kinds = [self._kind(use) for use in uses]
        if not any(kinds):
            return None
        pending = [
            PendingCall(call_id=str(use["toolUseId"]), tool=str(use["name"]), input=dict(use.get("input") or {}),
                        kind=kind, turn=turn_number, requested_at=now, position=position,
                        question=str((use.get("input") or {}).get("question", "")) if kind == "input" else "",
                        target=self.tools[str(use["name"])].target())
            for position, (use, kind) in enumerate(zip(uses, kinds, strict=True)) if kind is not None
        ]
        writes.record_calls(self.redis, self.lease, pending)  # the task waits from here on
        fault_point("after pending calls")
        for position, (use, kind) in enumerate(zip(uses, kinds, strict=True)):
            if kind is None:
                self.on_step(f"tool {use.get('name')}")
                result = run_tool_call(self.ctx, self.tools.values(), {"toolUse": use})
                writes.hold_result(self.redis, self.lease, str(use["toolUseId"]), position, result)
        self.note = waiting_note(pending)
        log.info("task %s: %s", self.lease.task_id, printable(self.note, multiline=False))
        return self.note

    # ---- before the first drain

    def prepare(self) -> Prepared:
        calls = approvals.unresolved_calls(self.redis, self.lease.task_id)
        held = writes.held_results(self.redis, self.lease.task_id)
        if not calls and not held:
            return Prepared.NOTHING
        if any(call.kind == "input" and call.status == "pending" for call in calls):
            self._take_answers(calls)
            calls = approvals.unresolved_calls(self.redis, self.lease.task_id)
        still = [call for call in calls if call.status == "pending"]
        if still:
            self.note = waiting_note(still)
            self._drop_wakeups()
            return Prepared.WAITING
        items: list[tuple[int, str, PendingCall | ContentBlock]] = [
            (call.position, call.call_id, call) for call in calls
        ]
        items += [(position, call_id, block) for call_id, (position, block) in held.items()]
        for _position, call_id, item in sorted(items, key=lambda entry: entry[0]):
            if isinstance(item, PendingCall):
                self._resolve(item)
            else:
                self._queue(call_id, result_entry(call_id, item, self.lease.task_id))
        return Prepared.RESOLVED

    def _take_answers(self, calls: Sequence[PendingCall]) -> None:
        questions = [call for call in calls if call.kind == "input" and call.status == "pending"]
        raw_entries = approvals.inbox_entries(self.redis, self.lease.task_id)
        index = 0
        for raw in raw_entries:
            if not questions:
                break
            entry = _decode(raw)
            if entry.get("type") != "user":
                index += 1
                continue
            question = questions.pop(0)
            content = entry.get("content")
            answer = content if isinstance(content, str) else json.dumps(content)
            by = str(entry.get("sender") or "user")
            if not writes.answer_question(self.redis, self.lease, question.call_id, index, raw, answer,
                                          str(entry.get("id", "")), by):
                index += 1  # the question was decided meanwhile (denied): the message stays, for the model
            # else the entry left the inbox: the next one moved to this index

    def _drop_wakeups(self) -> None:
        raw_entries = approvals.inbox_entries(self.redis, self.lease.task_id)
        wakeups = [raw for raw in raw_entries if _decode(raw).get("type") == approvals.WAKEUP_TYPE]
        writes.drop_entries(self.redis, self.lease, wakeups)

    def _resolve(self, call: PendingCall) -> None:
        # its wait for a person, from the call to the decision (or the answer), in the trace of the turn resuming
        spans.emit(genai.HUMAN_WAIT, start=call.requested_at, end=call.decided_at or time.time(), parent=None,
                   attributes={"unicore.wait.kind": call.kind, genai.TOOL_NAME: call.tool,
                               genai.TOOL_CALL_ID: call.call_id, "unicore.wait.outcome": call.status,
                               "unicore.wait.decided_by": call.decided_by or None})
        answers = None
        if call.status == "answered":
            block = tool_result_block(call.call_id, call.answer)
            answers = call.answer_id or None
        elif call.status == "denied":
            block = tool_result_block(call.call_id, f"Error: {call.result_text()}", error=True)
        elif (moved := self._moved(call)) is not None:
            log.warning("task %s: approved call %s not run: %s", self.lease.task_id, call.call_id,
                        printable(moved, multiline=False))
            block = tool_result_block(call.call_id, f"Error: the approved call was not run: {moved}", error=True)
        elif writes.start_call(self.redis, self.lease, call.call_id):
            log.info("task %s: running approved call %s (%s)", self.lease.task_id, call.call_id, call.tool)
            use = {"toolUseId": call.call_id, "name": call.tool, "input": call.input}
            self.on_step(f"tool {call.tool}")
            block = run_tool_call(self.ctx, self.tools.values(), {"toolUse": use})
        else:
            log.warning("task %s: approved call %s was started before; not run again", self.lease.task_id,
                        call.call_id)
            block = tool_result_block(call.call_id, INTERRUPTED_TEXT, error=True)
        self._queue(call.call_id, result_entry(call.call_id, block, self.lease.task_id, answers))

    def _moved(self, call: PendingCall) -> str | None:
        """Why an approved call must not run: its name now runs something else than what was approved (an MCP
        server that lists another tool under that name by now). None: it runs what was approved (or its
        tool is gone, which ``run_tool_call`` answers)."""
        tool = self.tools.get(call.tool)
        if tool is None or not call.target or tool.target() == call.target:
            return None
        return f"{call.tool} now names {tool.target()}, not {call.target} that was approved"

    def _queue(self, call_id: str, entry: InboxMessage) -> None:
        """Queue a call's result (as ``turn._queue_result`` does: one over the message cap becomes an error)."""
        size = len(codec.model_json(entry).encode())  # as the store writes it (valid text, state.codec)
        if size > self.ctx.store.message_cap_bytes:
            text = (f"Error: the tool result was too large to keep ({size} bytes, over the cap of "
                    f"{self.ctx.store.message_cap_bytes} bytes)")
            entry = entry.model_copy(update={"content": tool_result_block(call_id, text, error=True)})
        writes.resolve(self.redis, self.lease, call_id, entry)


def _decode(raw: str) -> dict[str, Any]:
    try:
        entry = json.loads(raw)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


__all__ = ["ApprovalGate", "INTERRUPTED_TEXT", "Prepared", "result_entry", "waiting_note"]
