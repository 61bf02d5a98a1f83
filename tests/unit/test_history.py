"""History cleanup (seed 000 cleanup_conversation_history) and Bedrock Converse request shaping."""

from __future__ import annotations

from unicore.api.schema import Message, tool_result_block
from unicore.turn.history import (
    INTERRUPTED_TEXT,
    build_request_messages,
    cleanup_conversation_history,
    latest_user_text,
    shape_converse_messages,
)

from tests.converse_check import converse_problems


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks):
    return {"role": "assistant", "content": list(blocks)}


def text(value):
    return {"text": value}


def use(tool_id, name="t"):
    return {"toolUse": {"toolUseId": tool_id, "name": name, "input": {}}}


def result(tool_id, value="ok"):
    return tool_result_block(tool_id, value)


def result_ids(message):
    return [b["toolResult"]["toolUseId"] for b in message["content"] if "toolResult" in b]


def test_tool_use_without_result_at_the_end_gets_a_synthetic_error_result():
    cleaned = cleanup_conversation_history([user(text("hi")), assistant(use("a"), use("b"))])
    assert len(cleaned) == 3
    assert result_ids(cleaned[2]) == ["a", "b"]
    block = cleaned[2]["content"][0]["toolResult"]
    assert block["status"] == "error" and block["content"][0]["text"] == INTERRUPTED_TEXT


def test_partial_results_are_completed_with_errors():
    cleaned = cleanup_conversation_history(
        [user(text("hi")), assistant(use("a"), use("b")), user(result("b"))]
    )
    assert result_ids(cleaned[2]) == ["b", "a"]
    statuses = {b["toolResult"]["toolUseId"]: b["toolResult"]["status"] for b in cleaned[2]["content"]}
    assert statuses == {"b": "success", "a": "error"}


def test_consecutive_assistant_messages_are_repaired_with_a_user_message_of_error_results():
    cleaned = cleanup_conversation_history(
        [user(text("hi")), assistant(use("a")), assistant(text("again"), use("c")), user(result("c"))]
    )
    roles = [m["role"] for m in cleaned]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert result_ids(cleaned[2]) == ["a"]
    assert cleaned[2]["content"][0]["toolResult"]["status"] == "error"
    assert result_ids(cleaned[4]) == ["c"]


def test_results_for_unknown_or_already_answered_ids_are_dropped():
    cleaned = cleanup_conversation_history(
        [
            user(text("hi"), result("ghost")),
            assistant(use("a")),
            user(result("a"), result("a"), result("zzz")),
        ]
    )
    assert cleaned[0]["content"] == [text("hi")]
    assert result_ids(cleaned[2]) == ["a"]


def test_a_user_message_made_only_of_unknown_results_disappears():
    cleaned = cleanup_conversation_history([user(text("hi")), assistant(text("done")), user(result("zzz"))])
    assert [m["role"] for m in cleaned] == ["user", "assistant"]


def test_stored_messages_are_not_modified():
    stored = [Message(role="user", content=[text("hi")]), Message(role="assistant", content=[use("a")])]
    before = [m.model_dump() for m in stored]
    build_request_messages(stored)
    assert [m.model_dump() for m in stored] == before


def test_shaping_merges_consecutive_user_messages_with_tool_results_first():
    shaped = shape_converse_messages(
        [
            user(text("hi")),
            assistant(use("a")),
            user(text("child done")),
            user(result("a")),
            user(text("more")),
        ]
    )
    assert [m["role"] for m in shaped] == ["user", "assistant", "user"]
    assert shaped[2]["content"] == [result("a"), text("child done"), text("more")]


def test_shaping_starts_with_a_user_message_and_replaces_empty_text():
    shaped = shape_converse_messages([assistant(text("")), user(text("x"))])
    assert shaped[0]["role"] == "user"
    assert shaped[1]["content"] == [{"text": "(empty)"}]


def test_build_request_messages_gives_a_valid_converse_conversation_for_a_messy_history():
    messy = [
        user(text("a")),
        user(text("b")),
        assistant(use("1"), use("2")),
        user(text("interrupting")),
        assistant(use("3")),
        assistant(text("oops")),
        user(result("3"), result("9")),
        user(text("end")),
    ]
    request = build_request_messages(messy)
    assert converse_problems(request) == []


def test_converse_problems_reports_what_bedrock_rejects():
    assert converse_problems([assistant(text("x"))])
    assert converse_problems([user(text("x")), user(text("y"))])
    assert converse_problems([user(text("x")), assistant(use("a")), user(text("no result"))])
    assert converse_problems([user(text("x")), assistant(use("a")), user(result("a"))]) == []


def test_latest_user_text_joins_the_trailing_user_messages():
    messages = [user(text("old")), assistant(text("x")), user(result("q"), text("one")), user(text("two"))]
    assert latest_user_text(messages) == "one\n\ntwo"
    assert latest_user_text([user(text("a")), assistant(text("b"))]) == ""
