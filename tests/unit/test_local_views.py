"""The web UI's JSON of local tasks (``unicore_client.ui.local_views``), built from the store's reads without Redis:
the forest's order and bounds, and a task's events."""

from __future__ import annotations

from unicore.store.approval_records import PendingCall
from unicore.store.compactions import Compaction
from unicore.store.records import TaskRecord, TurnHeader, TurnMeta
from unicore.store.ui_reads import Row, TaskHistory
from unicore_client.ui.local_views import build_forest, forest_json, task_events


def record(task_id: str, parent: str | None, created_at: float, **fields: object) -> TaskRecord:
    return TaskRecord(id=task_id, name=task_id, parent=parent, root=(parent or task_id).split("-")[0],
                      created_at=created_at, **fields)  # type: ignore[arg-type]


def rows(*records: TaskRecord) -> dict[str, Row]:
    return {r.id: (r, None) for r in records}


def test_the_forest_lists_the_newest_root_first_and_each_tree_depth_first_oldest_child_first() -> None:
    forest = rows(record("a", None, 1), record("a-young", "a", 5), record("a-old", "a", 2),
                  record("a-old-kid", "a-old", 3), record("b", None, 4), record("lost", "gone", 6))
    assert [(n.depth, n.record.id) for n in build_forest(forest, max_roots=10, max_nodes=10)] == [
        (0, "b"), (0, "a"), (1, "a-old"), (2, "a-old-kid"), (1, "a-young")]
    assert [n.record.id for n in build_forest(forest, max_roots=1, max_nodes=10)] == ["b"]
    assert [n.record.id for n in build_forest(forest, max_roots=10, max_nodes=3)] == ["b", "a", "a-old"]


def test_a_rows_json_says_its_phase() -> None:
    waiting = record("w", None, 1, turns=1)
    nodes = forest_json({**rows(record("s", None, 2, suspended=True), record("f", None, 3, last_error="boom"),
                                record("q", None, 4)), "w": (waiting, "approval")})
    assert {n["id"]: n["phase"] for n in nodes} == {"s": "suspended", "f": "failed", "q": "queued", "w": "waiting"}


def test_a_tasks_events_come_oldest_first_from_its_record_and_history() -> None:
    task = record("t", None, 10, model="openai:m", last_error="it broke", updated_at=90, suspended=True,
                  suspended_at=80)
    history = TaskHistory(
        turns=[(TurnHeader(0, 20, 0), TurnMeta(ended_at=30, iterations=2, note="cancelled")),
               (TurnHeader(1, 40, 5), TurnMeta())],
        calls=[PendingCall("c1", "shell", {"cmd": "ls"}, "approval", 1, requested_at=45, status="denied",
                           decided_by="alice", reason="no", decided_at=50)],
        compactions=[Compaction(upto=4, summary="s", turn_number=1, created_at=60)],
    )
    events = [(e["time"], e["type"], e["reason"], e["message"]) for e in task_events(task, history)]
    assert events == [
        (10, "Normal", "Created", "task created (model openai:m)"),
        (20, "Normal", "TurnStarted", "turn 1 started"),
        (30, "Normal", "TurnEnded", "turn 1 ended after 2 model call(s) (cancelled)"),
        (40, "Normal", "TurnStarted", "turn 2 started"),
        (45, "Normal", "WaitingForApproval", 'c1: shell {"cmd": "ls"}'),
        (50, "Warning", "ApprovalDecided", "c1 denied by alice: no"),
        (60, "Normal", "Compacted", "turn 2: the history before message 4 summarised for requests"),
        (80, "Normal", "Suspended", "suspended: no new turn starts"),
        (90, "Warning", "TurnFailed", "it broke"),
    ]
