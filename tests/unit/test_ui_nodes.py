"""`kubectl agenttask ui`: AgentTasks, transcript messages and Events as the web UI's JSON (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest
from unicore_client.ui.cluster_nodes import (
    descendants,
    event_of,
    forest_of,
    message_of,
    node_of,
    spec_limits,
    split_id,
)


def agenttask(name: str, created: str, *, parent: str | None = None, namespace: str = "team-a",
              **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"prompt": "p", "model": "scripted"}
    if parent:
        spec["parentRef"] = {"name": parent}
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created}, "spec": spec,
            "status": status}


def test_a_node_maps_the_agenttask_phase_to_the_pages_phases() -> None:
    expected = {"Pending": ("queued", None), "Running": ("running", None), "Waiting": ("running", None),
                "WaitingForApproval": ("waiting", "approval"), "WaitingForInput": ("waiting", "input"),
                "Suspended": ("suspended", None), "Idle": ("done", None), "Failed": ("failed", None)}
    for phase, (shown, waiting) in expected.items():
        node = node_of(agenttask("t", "2026-01-01T00:00:00Z", phase=phase, message="why"))
        assert (node["phase"], node["waiting"], node["status"]) == (shown, waiting, phase)
        assert node["error"] == ("why" if phase == "Failed" else "")
    fresh = node_of(agenttask("t", "2026-01-01T00:00:00Z"))
    assert (fresh["phase"], fresh["status"], fresh["turns"], fresh["tokens"]) == ("queued", "New", 0, 0)


def test_a_node_has_ids_with_the_namespace_and_times_in_epoch_seconds() -> None:
    obj = agenttask("kid", "2026-01-01T00:00:00Z", parent="root", turns=2, tokens=1500, depth=1,
                    lastTurn={"endedAt": "2026-01-01T00:01:30Z"}, lastResponse="x" * 500)
    node = node_of(obj)
    assert (node["id"], node["parent"], node["depth"]) == ("team-a/kid", "team-a/root", 1)
    assert node["updated_at"] - node["created_at"] == 90.0
    assert (node["turns"], node["tokens"], len(node["last"])) == (2, 1500, 200)


def test_the_forest_is_depth_first_newest_root_first_siblings_oldest_first_and_bounded() -> None:
    objects = [agenttask("old", "2026-01-01T00:00:00Z"), agenttask("new", "2026-01-02T00:00:00Z"),
               agenttask("new-b", "2026-01-02T00:00:05Z", parent="new"),
               agenttask("new-a", "2026-01-02T00:00:01Z", parent="new"),
               agenttask("new-a-x", "2026-01-02T00:00:09Z", parent="new-a"),
               agenttask("orphan", "2026-01-01T12:00:00Z", parent="hidden")]  # its parent is not visible: a root
    nodes = forest_of(objects)
    assert [(n["id"].split("/")[1], n["depth"]) for n in nodes] == [
        ("new", 0), ("new-a", 1), ("new-a-x", 2), ("new-b", 1), ("orphan", 0), ("old", 0)]
    many = [agenttask(f"t{i}", f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z") for i in range(1500)]
    assert len(forest_of(many)) == 200  # MAX_ROOTS


def test_descendants_are_parents_first_and_only_in_the_namespace() -> None:
    objects = [agenttask("r", "2026-01-01T00:00:00Z"), agenttask("r-a", "2026-01-01T00:00:01Z", parent="r"),
               agenttask("r-a-x", "2026-01-01T00:00:02Z", parent="r-a"),
               agenttask("r-b", "2026-01-01T00:00:03Z", parent="r"),
               agenttask("r-c", "2026-01-01T00:00:04Z", parent="r", namespace="team-b")]
    assert descendants(objects, "team-a", "r") == ["r-a", "r-b", "r-a-x"]
    assert descendants(objects, "team-a", "r-b") == []


def test_task_ids_name_a_namespace_or_use_the_default() -> None:
    assert split_id("team-a/chat", "default") == ("team-a", "chat")
    assert split_id("chat", "team-b") == ("team-b", "chat")
    for bad in ("Team/chat", "a/b/c", "team-a/", "team-a/../x", ""):
        with pytest.raises(ValueError, match="bad task id"):
            split_id(bad, "default")


def test_a_transcript_message_gets_the_turn_number_from_0() -> None:
    shaped = message_of({"seq": 3, "turn": 2, "role": "assistant", "timestamp": 1.0,
                         "content": [{"toolUse": {"toolUseId": "u1", "name": "spawn_task", "input": {"name": "a"}}}]})
    assert shaped == {"seq": 3, "role": "assistant", "turn_number": 1, "timestamp": 1.0,
                      "content": [{"toolUse": {"toolUseId": "u1", "name": "spawn_task", "input": {"name": "a"}}}]}


def test_an_event_takes_the_newest_time_it_has() -> None:
    event = {"type": "Normal", "reason": "TurnStarted", "message": "turn 1", "firstTimestamp": "2026-01-01T00:00:00Z",
             "lastTimestamp": "2026-01-01T00:00:10Z"}
    assert event_of(event) == {"time": 1767225610.0, "type": "Normal", "reason": "TurnStarted", "message": "turn 1"}
    assert event_of({"eventTime": "2026-01-01T00:00:00.5Z", "reason": "R"})["time"] == 1767225600.5


def test_limits_are_the_local_modes_field_names_written_as_the_specs_keys() -> None:
    assert spec_limits({"max_children": 2, "turn_timeout_seconds": 60, "recursion": False}) == {
        "maxChildren": 2, "turnTimeoutSeconds": 60, "recursion": False}
    with pytest.raises(ValueError, match="no such limit max_kids"):
        spec_limits({"max_kids": 1})


def test_a_node_says_what_started_its_task() -> None:
    scheduled = node_of(agenttask("r-1", "2026-01-01T00:00:00Z", phase="Idle",
                                  origin={"kind": "AgentSchedule", "name": "reporter", "at": "2026-01-01T00:00:00Z"}))
    called = node_of(agenttask("a2a-1", "2026-01-01T00:00:00Z", origin={"kind": "A2A", "name": "advisor"}))
    assert (scheduled["origin"], called["origin"]) == ("schedule reporter", "a2a advisor")
    assert node_of(agenttask("t", "2026-01-01T00:00:00Z"))["origin"] == ""
