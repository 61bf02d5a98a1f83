"""The ids of the runtime's own inbox messages and the rule for ids a user chooses (``unicore.api.schema``): every id
the runtime gives a message is refused as a user's id, and nothing else is (issue 24, item 4)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from unicore.api import schema
from unicore.api.schema import (
    RUNTIME_MESSAGE_ID_PREFIXES,
    completion_message_id,
    failure_message_id,
    object_prompt_message_id,
    prompt_message_id,
    reap_message_id,
    tool_result_message_id,
    user_message_id,
)

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / "core" / "unicore", REPO / "operator" / "unicore_operator", REPO / "client" / "unicore_client"]
BUILDERS = {"prompt_message_id", "object_prompt_message_id", "completion_message_id", "failure_message_id",
            "tool_result_message_id", "reap_message_id", "job_result_message_id", "trigger_message_id",
            "a2a_message_id", "conversation_message_id"}
# ids passed on, not made, where the message is built: a child's owed report (made by ``reports.completion_report``:
# ``completion:<child>:<n>``) and a task API user's id (``user:<an id user_message_id accepted>``)
PASSED_ON = {"owed.report_id", "USER_MESSAGE_PREFIX + request.id"}


def _ids_made() -> list[tuple[str, str]]:
    """(file:line, the id expression) of every ``InboxMessage(id=...)`` in the sources; "" where the id is the
    default (a random UUID, which no one can choose in advance)."""
    found = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "InboxMessage":
                    given = [keyword.value for keyword in node.keywords if keyword.arg == "id"]
                    found.append((f"{path.relative_to(REPO)}:{node.lineno}", ast.unparse(given[0]) if given else ""))
    return found


def _is_reserved(expression: str) -> bool:
    value = ast.parse(expression, mode="eval").body
    if isinstance(value, ast.Call):
        return getattr(value.func, "id", None) in BUILDERS
    if isinstance(value, ast.JoinedStr) and value.values and isinstance(value.values[0], ast.Constant):
        value = value.values[0]
    return isinstance(value, ast.Constant) and str(value.value).startswith(RUNTIME_MESSAGE_ID_PREFIXES)


def test_every_id_the_runtime_gives_a_message_is_reserved() -> None:
    found = _ids_made()
    assert len(found) > 5, found
    unreserved = [(where, made) for where, made in found if made and made not in PASSED_ON and not _is_reserved(made)]
    assert unreserved == [], "an id a user could choose too: make it in schema with a reserved prefix"


@pytest.mark.parametrize("made", [
    prompt_message_id("team-a/demo"), completion_message_id("demo-a", 3), failure_message_id("demo-a", 0),
    tool_result_message_id("tooluse_1"), reap_message_id("reap-stuck-42"),
    object_prompt_message_id("0b7c2c36-4d0e-4f55-9d39-1c3b6cf1f2aa"),
])
def test_every_id_the_builders_make_is_refused_as_a_users(made: str) -> None:
    with pytest.raises(ValueError, match="runtime's own messages") as caught:
        user_message_id(made)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("ok", ["0123456789abcdef", "m-1", "user:alice-1", "Completion:x", "my-tr:x", "reap", "trx"])
def test_other_ids_pass_unchanged(ok: str) -> None:
    assert user_message_id(ok) == ok


def test_a_long_refused_id_is_shown_cut() -> None:
    with pytest.raises(ValueError) as caught:
        user_message_id("tr:" + "x" * 10_000)
    assert len(str(caught.value)) < 300


def test_the_builders_use_the_listed_prefixes() -> None:
    assert schema.PROMPT_ID_PREFIX in RUNTIME_MESSAGE_ID_PREFIXES
    assert completion_message_id("a", 1) == "completion:a:1" and failure_message_id("a", 1) == "failed:a:1"
    assert tool_result_message_id("c") == "tr:c" and prompt_message_id("t") == "prompt:t"
