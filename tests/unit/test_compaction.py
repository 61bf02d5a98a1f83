"""The compactor without Redis: cut points, folding a summary's input into parts, clipping, clear failure."""

from __future__ import annotations

import pytest
from unicore.api.schema import Message
from unicore.providers.base import ModelRequest, ModelResponse
from unicore.providers.calling import estimate_input_tokens
from unicore.store.compactions import Compaction
from unicore.turn.compaction import COMPACTION_PROMPT, Compactor, ContextTooLarge, HistoryView, cut_points


def msg(seq: int, role: str, text: str = "", use: str = "", result: str = "") -> Message:
    if use:
        content = [{"toolUse": {"toolUseId": use, "name": "note", "input": {"text": text}}}]
    elif result:
        content = [{"toolResult": {"toolUseId": result, "status": "success", "content": [{"text": text}]}}]
    else:
        content = [{"text": text}]
    return Message(role=role, content=content, seq=seq)  # type: ignore[arg-type]


def exchange_history(pairs: int, size: int = 200) -> list[Message]:
    out = [msg(0, "user", "start")]
    for i in range(pairs):
        out.append(msg(len(out), "assistant", "x" * size, use=f"t{i}"))
        out.append(msg(len(out), "user", "y" * size, result=f"t{i}"))
    return out


def test_cut_points_never_follow_a_tool_call() -> None:
    history = exchange_history(3)
    cuts = cut_points(history)
    assert cuts == [1, 3, 5]  # after the prompt and after each result message; never between a call and result
    text_answer = [msg(0, "user", "q"), msg(1, "assistant", "a"), msg(2, "user", "q2")]
    assert cut_points(text_answer) == [1, 2]


class Recorder:
    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.records: list[Compaction] = []

    def summarize(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(content=[{"text": f"summary #{len(self.requests)}"}], stop_reason="end_turn")

    def write(self, record: Compaction) -> bool:
        self.records.append(record)
        return True


def test_a_large_history_is_summarized_in_parts_that_each_fit() -> None:
    history = exchange_history(60)
    recorder = Recorder()
    view = HistoryView(None, list(history))
    compactor = Compactor(view, task_id="t", window=1600, limit=1200, summarize=recorder.summarize,
                          write=recorder.write)

    messages = compactor.fit("system", ())

    assert estimate_input_tokens(ModelRequest(task_id="t", system="system", messages=messages)) <= 1200
    assert len(recorder.records) == 1 and len(recorder.requests) > 1  # one record, folded over several calls
    for request in recorder.requests:
        assert estimate_input_tokens(request) <= 1200
        assert COMPACTION_PROMPT in request.messages[-1]["content"][-1]["text"]
    assert "summary #1" in recorder.requests[1].messages[0]["content"][0]["text"]  # each part builds on the last
    record = recorder.records[0]
    assert record.summary == f"summary #{len(recorder.requests)}"
    assert view.messages[0].seq == record.upto and record.answers == sum(
        1 for m in history[: record.upto] if m.role == "assistant")
    assert messages[0]["content"][0]["text"].startswith("[Summary of the conversation before this point")


def test_an_oversized_old_message_is_clipped_for_the_summary_only() -> None:
    history = [msg(0, "user", "z" * 20_000), msg(1, "assistant", "ok"), *[
        msg(i, "user" if i % 2 == 0 else "assistant", "small") for i in range(2, 8)]]
    recorder = Recorder()
    compactor = Compactor(HistoryView(None, history), task_id="t", window=2000, limit=1500,
                          summarize=recorder.summarize, write=recorder.write)
    compactor.fit("system", ())
    assert recorder.records and all(estimate_input_tokens(r) <= 1500 for r in recorder.requests)
    assert "characters clipped for the summary" in str(recorder.requests[0].messages)


def test_the_newest_message_alone_too_large_fails_without_looping() -> None:
    history = [msg(0, "user", "hi"), msg(1, "assistant", "ok"), msg(2, "user", "w" * 40_000)]
    recorder = Recorder()
    compactor = Compactor(HistoryView(None, history), task_id="t", window=2000, limit=1500,
                          summarize=recorder.summarize, write=recorder.write)
    with pytest.raises(ContextTooLarge, match="context window of 2,000 tokens"):
        compactor.fit("system", ())
    assert recorder.records == []
