"""Pure parts of approvals: which calls wait, what wakes a waiting task, marks and notes, inherited gates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from unicore.api.schema import Approval
from unicore.store.approvals import PendingCall, wakes
from unicore.store.task_writes import inherited_approval
from unicore.turn.approvals import waiting_note
from unicore_client.local.approval_commands import call_mark


def call(kind: str = "approval", call_id: str = "c1", **extra: object) -> PendingCall:
    return PendingCall(call_id=call_id, tool="ask_user" if kind == "input" else "write_file", input={"path": "a"},
                       kind=kind, turn=0, requested_at=1.0, **extra)  # type: ignore[arg-type]


def test_gates_name_tools_or_everything() -> None:
    assert Approval(tools=["write_file"]).gates("write_file") and not Approval(tools=["write_file"]).gates("x")
    assert Approval(tools=["*"]).gates("anything") and not Approval().gates("write_file")
    with pytest.raises(ValidationError):
        Approval(tools=["*"], timeout_seconds=0)


def test_what_wakes_a_waiting_task() -> None:
    assert wakes(None, ["completion"]) and not wakes(None, [])
    assert wakes("input", ["completion", "user"]) and not wakes("input", ["completion", "tool_result"])
    assert not wakes("approval", ["user", "completion"]) and wakes("approval", ["decision"])


def test_a_child_keeps_its_parents_gates() -> None:
    parent = Approval(tools=["write_file"], timeout_seconds=60)
    assert inherited_approval(None, parent) == parent
    assert inherited_approval(None, None) is None
    assert inherited_approval(Approval(tools=["spawn_task"], timeout_seconds=5), parent) == Approval(
        tools=["write_file", "spawn_task"], timeout_seconds=5)
    assert inherited_approval(Approval(tools=["x"]), Approval()) == Approval(tools=["x"])


def test_marks_notes_and_denial_texts() -> None:
    assert call_mark(call()) == "[waiting for approval]"
    assert call_mark(call("input")) == "[waiting for an answer]"
    assert call_mark(call(status="approved", decided_by="alice")) == "[approved by alice]"
    assert call_mark(call(status="denied", decided_by="bob", reason="no")) == "[denied by bob: no]"
    assert call_mark(call("input", status="answered", decided_by="carol")) == "[answered by carol]"
    assert call(status="denied", decided_by="bob", reason="no").result_text() == "denied by bob: no"
    assert call(status="denied", decided_by="timeout").result_text() == "denied by timeout"
    assert waiting_note([call(), call("input", call_id="q")]) == (
        "waiting for approval of write_file (c1) and an answer to ask_user (q)")
    assert waiting_note([]) == ""
    long = PendingCall(call_id="c1", tool="write_file", input={"content": "x" * 500}, kind="approval", turn=0,
                       requested_at=1.0)
    assert len(long.describe()) < 230 and long.describe().endswith("...")
