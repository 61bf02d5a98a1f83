"""transcribe (seed 000 format) and bounding that keeps the newest part with a marker."""

from __future__ import annotations

from unicore.api.schema import Message
from unicore.turn.transcript import bound_tail, omitted_marker, transcribe

HISTORY = [
    Message(role="user", content=[{"text": "Find A"}]),
    Message(
        role="assistant",
        content=[
            {"text": "Looking."},
            {"toolUse": {"toolUseId": "t1", "name": "read_file", "input": {"path": "a.md"}}},
        ],
    ),
    Message(
        role="user",
        content=[
            {"toolResult": {"toolUseId": "t1", "content": [{"text": "A is 42"}], "status": "success"}},
            {"toolResult": {"toolUseId": "t2", "content": [{"json": {"k": 1}}], "status": "error"}},
        ],
    ),
    Message(role="assistant", content=[{"text": "A is 42."}]),
]


def test_transcribe_with_tool_details() -> None:
    assert transcribe(HISTORY).split("\n\n") == [
        "User: Find A",
        "Assistant: Looking.",
        'Assistant used tool read_file (id t1) with input: {"path": "a.md"}',
        "Tool result (id t1, success): A is 42",
        'Tool result (id t2, error): {"k": 1}',
        "Assistant: A is 42.",
    ]


def test_transcribe_without_tool_details() -> None:
    assert transcribe(HISTORY, include_tool_details=False).split("\n\n") == [
        "User: Find A",
        "Assistant: Looking.",
        "[Used read_file tool]",
        "Assistant: A is 42.",
    ]


def test_transcribe_accepts_turns_and_dicts() -> None:
    turns = [
        {"turn_number": 0, "messages": [m.model_dump() for m in HISTORY[:2]]},
        {"turn_number": 1, "messages": HISTORY[2:]},
    ]
    assert transcribe(turns) == transcribe(HISTORY)


def test_long_tool_results_are_clipped() -> None:
    history = [
        Message(
            role="user",
            content=[
                {"toolResult": {"toolUseId": "t", "content": [{"text": "x" * 50}], "status": "success"}}
            ],
        )
    ]
    text = transcribe(history, tool_result_chars=10)
    assert text == "Tool result (id t, success): " + "x" * 10 + " [... 40 more characters ...]"


def test_bound_tail_keeps_short_text() -> None:
    assert bound_tail("short", 100) == "short"


def test_bound_tail_cuts_the_oldest_part_with_a_marker() -> None:
    paragraphs = [f"User: message number {i:04d}" for i in range(500)]
    text = "\n\n".join(paragraphs)
    bounded = bound_tail(text, 2000, "parent conversation")
    assert len(bounded) <= 2000
    assert bounded.endswith(paragraphs[-1])
    assert "message number 0000" not in bounded
    marker, kept = bounded.split("\n\n", 1)
    omitted = len(text) - len(kept)
    assert marker == omitted_marker(omitted, "parent conversation")
    assert marker.startswith("[... ") and "earlier characters of the parent conversation omitted" in marker
    assert kept.startswith("User: message number")  # cut at a paragraph start
    assert text.endswith(kept)
