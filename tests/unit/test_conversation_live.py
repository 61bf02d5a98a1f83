"""The agents' live lines of ``conv show --follow`` (``unicore_client.conversation_live``, pure)."""

from __future__ import annotations

from typing import Any

from unicore.store.token_stream import StreamEntry
from unicore_client.conversation_live import LiveLines, token_event


def entry(kind: str, text: str = "", *, seq: int = 3, attempt: int = 1) -> dict[str, Any]:
    return {"id": "1-0", "turn": 1, "call": 0, "seq": seq, "attempt": attempt, "kind": kind, "text": text}


def render(live: LiveLines, *items: tuple[str, dict[str, Any]]) -> str:
    return "".join(live.render(task, task.rsplit("/", 1)[-1], item) for task, item in items)


def test_lines_say_whose_text_it_is_when_agents_interleave_and_lines_end() -> None:
    live = LiveLines()
    text = render(live, ("ns/writer", entry("attempt")), ("ns/writer", entry("text", "Hello ")),
                  ("ns/critic", entry("text", "Hm", seq=5)), ("ns/writer", entry("text", "world\n\nBye")),
                  ("ns/writer", entry("end")), ("ns/critic", entry("turn_end", seq=0, attempt=0)),
                  ("ns/critic", entry("output", "$ ls\n", seq=5)))
    assert text == ("writer (live): Hello \ncritic (live): Hm\nwriter (live): world\nwriter (live): \n"
                    "writer (live): Bye\n")
    assert not live.open
    assert render(live, ("ns/critic", entry("text", "more", seq=5))) == "critic (live): more"
    assert live.open and live.close_line() == "\n" and live.close_line() == ""


def test_a_new_try_says_the_answer_starts_again_and_late_text_of_a_void_try_is_dropped() -> None:
    live = LiveLines()
    text = render(live, ("w", entry("text", "first")), ("w", entry("attempt", attempt=2)),
                  ("w", entry("text", "late", attempt=1)), ("w", entry("text", "second", attempt=2)))
    assert text == "w (live): first\nw (live): [retrying: the answer starts again]\nw (live): second"


def test_hostile_text_and_names_are_escaped() -> None:
    live = LiveLines()
    text = live.render("t", "evil\x1b]0;x\x07\nname", StreamEntry.of("1-0", {
        "turn": "0", "call": "0", "seq": "1", "attempt": "1", "kind": "text", "text": "a\x1b[2J\u202eb\r\tc"}))
    assert text == "evil\\x1b]0;x\\x07\\x0aname (live): a\\x1b[2J\\u202eb\\x0d\tc"
    assert live.forget("t") == "\n" and live.forget("t") == ""


def test_token_events_are_text_entries_only_and_exact() -> None:
    assert token_event("ns/w", entry("text", "a\x1b")) == {"event": "token", "task": "ns/w", "seq": 3, "attempt": 1,
                                                           "text": "a\x1b"}
    assert token_event("ns/w", entry("end")) is None and token_event("ns/w", entry("text", "")) is None
