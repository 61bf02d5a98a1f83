"""Live text for followers (``unicore_client.live_view``, pure) and the scripted model's streaming (issue 14)."""

from __future__ import annotations

from typing import Any

from unicore.providers.base import ModelRequest
from unicore.providers.scripted import ScriptedModel, load_script
from unicore_client.live_view import RETRY_MARK, LiveText


def entry(kind: str, seq: int = 3, attempt: int = 1, text: str = "") -> dict[str, Any]:
    return {"kind": kind, "seq": seq, "attempt": attempt, "text": text, "turn": 1, "call": 0}


def render_all(live: LiveText, entries: list[dict[str, Any]], printed_next: int = 3) -> str:
    return "".join(live.render(e, printed_next) for e in entries)


def test_an_answer_is_one_paragraph_and_its_stored_message_keeps_only_what_was_not_shown() -> None:
    live = LiveText()
    out = render_all(live, [entry("attempt"), entry("text", text="Hello "), entry("text", text="world"),
                            entry("end")])
    assert out == "Assistant: Hello world\n"
    stored = {"seq": 3, "role": "assistant", "content": [{"text": "Hello world"},
                                                         {"toolUse": {"toolUseId": "t", "name": "n", "input": {}}}]}
    assert live.visible(stored) == {**stored, "content": [stored["content"][1]]}
    assert live.visible({"seq": 3, "role": "assistant", "content": [{"text": "Hello world"}]}) is None
    assert live.visible({"seq": 4, "role": "assistant", "content": [{"text": "x"}]}) is not None  # not shown live
    assert live.visible({"seq": 3, "role": "user", "content": [{"text": "[SYSTEM] refused"}]}) is not None


def test_a_new_try_says_the_answer_starts_again_and_late_entries_of_the_old_try_are_dropped() -> None:
    live = LiveText()
    out = render_all(live, [entry("text", text="half an"), entry("attempt", attempt=2),
                            entry("text", attempt=1, text=" old"), entry("text", attempt=2, text="whole answer"),
                            entry("end", attempt=2)])
    assert out == f"Assistant: half an\n{RETRY_MARK}\nAssistant: whole answer\n"
    assert render_all(LiveText(), [entry("attempt"), entry("attempt", attempt=2),
                                   entry("text", attempt=2, text="x")]) == "Assistant: x"  # nothing shown yet: no mark


def test_answers_already_printed_from_the_transcript_are_skipped_and_text_is_escaped() -> None:
    live = LiveText(lead="\n")
    assert render_all(live, [entry("text", seq=2, text="stored already"), entry("turn_end")], printed_next=3) == ""
    out = render_all(live, [entry("text", text="\x1b[2Jred\u202e"), entry("text", seq=5, text="next call")])
    assert out == "\nAssistant: \\x1b[2Jred\\u202e\n\nAssistant: next call"
    assert live.open and live.close_line() == "\n" and not live.open and live.close_line() == ""


def test_the_scripted_model_gives_its_answer_word_by_word_and_nothing_for_summaries() -> None:
    class Sink:
        def __init__(self) -> None:
            self.deltas: list[str] = []

        def attempt_started(self) -> None:
            self.deltas.append("<attempt>")

        def text(self, delta: str) -> None:
            self.deltas.append(delta)

    model = ScriptedModel(load_script({"default": "Three  words\nhere."}))
    sink = Sink()
    request = ModelRequest(task_id="t", messages=[{"role": "user", "content": [{"text": "hi"}]}])
    response = model.converse(request, sink)
    assert sink.deltas == ["Three  ", "words\n", "here."] and "".join(sink.deltas) == response.content[0]["text"]
    summary = Sink()
    model.converse(request.model_copy(update={"purpose": "summary"}), summary)
    assert summary.deltas == []
