"""The A2A wire shapes (``unicore_operator.a2a``, pure) as the A2A project's own types read them: every card, Task
and stream result parses with protobuf's strict ``ParseDict`` (an unknown or misspelled field fails, where the
client's lenient parser would drop it silently), and phases map to the states docs/a2a.md says."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.types import AgentCard, StreamResponse, Task, TaskState
from google.protobuf.json_format import ParseDict
from unicore_operator import a2a

AGENT = {"metadata": {"name": "helper", "namespace": "team-a", "generation": 3},
         "spec": {"model": "scripted", "systemPrompt": "You help with questions.\nBe brief.",
                  "a2a": {"skills": [{"id": "qa", "name": "Q&A", "tags": ["help"]}]}}}


def strict(message: Any, data: dict[str, Any]) -> Any:
    return ParseDict(data, message)  # no ignore_unknown_fields: a stray key is an error


def test_the_card_is_an_a2a_1_0_card_with_a_bearer_scheme() -> None:
    card = strict(AgentCard(), a2a.agent_card("team-a", AGENT, "https://agents.example.com/a2a/team-a/helper"))
    assert (card.name, card.description, card.version) == ("helper", "You help with questions.", "3")
    interface = card.supported_interfaces[0]
    assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
        "https://agents.example.com/a2a/team-a/helper", "JSONRPC", "1.0")
    assert card.capabilities.streaming and [s.id for s in card.skills] == ["qa"]
    assert card.security_schemes["kubernetes"].http_auth_security_scheme.scheme == "Bearer"
    plain = a2a.agent_card("team-a", {"metadata": {"name": "w"}, "spec": {"a2a": {}}}, "http://x/a2a/team-a/w")
    assert [s["id"] for s in plain["skills"]] == ["w"] and plain["description"] == "UniCore agent team-a/w"


@pytest.mark.parametrize(("phase", "state"), [
    ("Pending", TaskState.TASK_STATE_SUBMITTED), ("Running", TaskState.TASK_STATE_WORKING),
    ("WaitingForJobs", TaskState.TASK_STATE_WORKING), ("WaitingForInput", TaskState.TASK_STATE_INPUT_REQUIRED),
    ("WaitingForApproval", TaskState.TASK_STATE_INPUT_REQUIRED), ("Idle", TaskState.TASK_STATE_COMPLETED),
    ("Failed", TaskState.TASK_STATE_FAILED), ("Suspended", TaskState.TASK_STATE_CANCELED),
])
def test_phases_map_to_a2a_states(phase: str, state: int) -> None:
    body = a2a.a2a_task("a2a-1", phase, answer="Done.", question="Which one?", namespace="team-a",
                        history=[a2a.message("a2a-1", "ROLE_USER", "hi", "a2a-1-0")])
    task = strict(Task(), body)
    assert task.status.state == state and task.id == task.context_id == "a2a-1"
    assert task.artifacts[0].parts[0].text == "Done." and task.history[0].parts[0].text == "hi"
    asks = state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert (task.status.message.parts[0].text if asks else "") == ("Which one?" if asks else "")


def test_stream_results_are_stream_responses() -> None:
    assert strict(StreamResponse(), a2a.artifact_update("a2a-1", "tok")).artifact_update.artifact.parts[0].text == "tok"
    status = a2a.a2a_task("a2a-1", "Idle", answer="")["status"]
    update = strict(StreamResponse(), a2a.status_update("a2a-1", status)).status_update
    assert update.status.state == TaskState.TASK_STATE_COMPLETED
    assert strict(StreamResponse(), {"task": a2a.a2a_task("a2a-1", "Running", answer="")}).task.id == "a2a-1"


def test_message_text_takes_text_and_data_parts() -> None:
    assert a2a.text_of([{"text": "Hello"}, {"data": {"b": 1, "a": [2]}}, {"url": "http://x"}]) == (
        'Hello\n{"a": [2], "b": 1}')
    assert a2a.error(7, a2a.TASK_NOT_FOUND, "no task") == {"jsonrpc": "2.0", "id": 7,
                                                           "error": {"code": -32001, "message": "no task"}}
