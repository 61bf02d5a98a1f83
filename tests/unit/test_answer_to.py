"""`answer_to`: which stored answer belongs to an inbox message (what `unicore send` prints)."""

from __future__ import annotations

import json

from unicore.api.schema import InboxMessage, Message
from unicore.store.inbox import build_drain_batch, build_drain_messages
from unicore.store.records import Turn
from unicore.turn.history import answer_to


def user(text: str, *ids: str) -> Message:
    return Message(role="user", content=[{"text": text}], inbox_ids=list(ids))


def assistant(text: str, *, tool: bool = False) -> Message:
    content: list[dict] = [{"text": text}]
    if tool:
        content.append({"toolUse": {"toolUseId": "t1", "name": "note", "input": {}}})
    return Message(role="assistant", content=content)


def turn(number: int, *messages: Message, ended: bool = True, note: str = "") -> Turn:
    return Turn(
        turn_number=number,
        started_at=0.0,
        first_seq=0,
        ended_at=1.0 if ended else None,
        note=note,
        messages=list(messages),
    )


def test_the_answer_is_the_first_text_only_reply_after_the_message_in_its_turn() -> None:
    turns = [
        turn(0, user("a", "m-a"), assistant("answer a")),
        turn(1, user("b", "m-b"), assistant("looking", tool=True), user("late", "m-late"), assistant("answer b")),
        turn(2, user("c", "m-c"), user("d", "m-d"), assistant("answer c and d")),
    ]
    assert answer_to(turns, "m-a") == "answer a"
    assert answer_to(turns, "m-b") == "answer b"  # a tool call is not an answer
    assert answer_to(turns, "m-late") == "answer b"  # drained mid-turn: the turn's answer
    assert answer_to(turns, "m-c") == answer_to(turns, "m-d") == "answer c and d"  # drained together: shared
    assert answer_to(turns, "unknown") is None


def test_turns_started_by_child_completions_continue_the_work_until_the_next_request() -> None:
    turns = [
        turn(0, user("research", "m-1"), assistant("spawning", tool=True), user("ok"), assistant("waiting")),
        turn(1, user("[child a completed] A"), assistant("half")),  # completions carry no request ids
        turn(2, user("[child b completed] B"), assistant("A and B")),
        turn(3, user("and C?", "m-2"), assistant("C")),
        turn(4, user("[child c completed] C"), user("and D?", "m-3"), assistant("C and D")),
    ]
    assert answer_to(turns, "m-1") == "A and B"  # what `run` printed before: the answer after the children
    assert answer_to(turns, "m-2") == "C"  # turn 4 holds a new request (m-3): it is m-3's answer
    assert answer_to(turns, "m-3") == "C and D"
    unfinished = [*turns[:3], turn(3, user("[child c completed] C"), ended=False)]
    assert answer_to(unfinished, "m-1") is None  # the work on m-1 goes on


def test_a_turn_without_a_text_only_answer() -> None:
    running = [turn(0, user("a", "m-a"), assistant("working", tool=True), ended=False)]
    assert answer_to(running, "m-a") is None  # not answered yet
    capped = [turn(0, user("a", "m-a"), assistant("working", tool=True), ended=True, note="max_iterations")]
    assert answer_to(capped, "m-a") == "working"  # what the turn ended with (as last_response)
    budget = [turn(0, user("a", "m-a"), ended=True, note="token budget used up")]
    assert answer_to(budget, "m-a") == "token budget used up"


def test_drained_messages_carry_their_inbox_ids_and_old_messages_load_without() -> None:
    entries = [
        InboxMessage(id="u1", type="user", content="hello").model_dump_json(),
        InboxMessage(
            id="tr:1", type="tool_result", content={"toolResult": {"toolUseId": "1", "content": []}}
        ).model_dump_json(),
        "not json",
        InboxMessage(id="tr:2", type="tool_result", content={"toolUseId": "2", "content": []}).model_dump_json(),
        InboxMessage(id="c1", type="completion", content="child says hi").model_dump_json(),
    ]
    batch = build_drain_batch(entries)
    assert [ids for _content, ids in batch] == [[], ["u1"], [], []]  # only requests carry ids
    assert build_drain_messages(entries) == [content for content, _ids in batch]
    stored_before = json.dumps(
        {"seq": 0, "turn_number": 0, "message_number": 0, "role": "user", "timestamp": 1.0, "content": []}
    )
    assert Message.model_validate_json(stored_before).inbox_ids == []
