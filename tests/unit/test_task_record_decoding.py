"""One decoder of the task hash: ``TaskRecord.from_hash`` (strict, or tolerant for records a namespace's turn pods
may have written), and ``TaskView`` a projection of the record it decodes."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError
from unicore.api.schema import Approval, Limits
from unicore.store.records import TaskRecord
from unicore.store.task_views import TaskView, view_from_mapping

RECORD = TaskRecord(
    id="ns/root-a", name="root-a", parent="ns/root", root="ns/root", depth=1, model="openai:m", system_prompt="be",
    tools=["read_file", "spawn_task"], child_tools=["read_file"], limits=Limits(max_depth=2, token_budget=500),
    script={"default": "ok"}, approval=Approval(tools=["shell"]), agent="writer", agents=["researcher"],
    status="running", turns=3, iterations=7, tool_iterations=2, input_tokens=10, output_tokens=20, total_tokens=30,
    tree_total_tokens=90, created_at=1.5, updated_at=2.5, last_response="done", suspended=True,
)


def as_bytes(fields: dict[str, str]) -> dict[bytes, bytes]:
    """The hash as the operator's asyncio client returns it."""
    return {key.encode(): value.encode() for key, value in fields.items()}


def test_the_hash_decodes_to_the_record_it_was_written_from_strictly_or_tolerantly() -> None:
    stored = RECORD.to_hash()
    assert TaskRecord.from_hash(stored) == RECORD
    assert TaskRecord.from_hash(as_bytes(stored)) == RECORD
    assert TaskRecord.from_hash(as_bytes(stored), tolerant=True) == RECORD


def test_a_view_is_the_records_own_fields() -> None:
    """Every field of a ``TaskView`` is a field of ``TaskRecord`` with the same value: a projection, no more."""
    view = view_from_mapping(as_bytes(RECORD.to_hash()))
    assert view == TaskView.of(RECORD)
    for item in dataclasses.fields(TaskView):
        assert getattr(view, item.name) == getattr(RECORD, item.name), item.name


BAD = {"tools": "[not json", "depth": "deep", "status": "sleeping", "limits": '{"max_depth": -1}',
       "script": '["not", "a", "dict"]', "agents": '{"a": 1}', "created_at": "yesterday"}


@pytest.mark.parametrize("field", sorted(BAD))
def test_a_strict_read_refuses_a_field_that_does_not_decode(field: str) -> None:
    with pytest.raises((ValidationError, ValueError)):
        TaskRecord.from_hash({**RECORD.to_hash(), field: BAD[field]})


def test_a_tolerant_read_takes_each_bad_field_as_its_default_and_keeps_the_rest() -> None:
    read = TaskRecord.from_hash(as_bytes({**RECORD.to_hash(), **BAD}), tolerant=True)
    defaults = TaskRecord(id="", name="", root="")
    for field in BAD:
        assert getattr(read, field) == getattr(defaults, field), field
    kept = set(TaskRecord.model_fields) - set(BAD)
    assert {name: getattr(read, name) for name in kept} == {name: getattr(RECORD, name) for name in kept}


def test_a_tolerant_read_of_a_partial_hash_reads_the_missing_names_as_empty() -> None:
    view = view_from_mapping({"agents": '["researcher"]'})
    assert (view.id, view.root, view.root_id, view.parent, view.agents) == ("", "", "", None, ["researcher"])
    assert view_from_mapping({"id": "ns/t", "root": ""}).root_id == "ns/t"
