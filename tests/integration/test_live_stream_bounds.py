"""The live token stream's byte bounds on a real redis-server (issue 24, item 2).

It kept about 2,000 entries whatever their size and published answers over the 256 KiB answer cap whole: ten 1 MB
answers left 10.5 MB in one task's stream, 250 answers of 20 MB ended Redis by the OOM killer. Now one try publishes
at most ``answer_bytes`` (the message cap) and then ``CUT_MARK``, an entry holds at most ``ENTRY_TEXT_BYTES``, and
the stream is trimmed to exactly ``entries`` entries; the followers show the mark as text."""

from __future__ import annotations

from typing import Any

import redis
from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES, TaskSpec
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import (
    CUT_MARK,
    DEFAULT_ENTRIES,
    ENTRY_TEXT_BYTES,
    StreamEntry,
    StreamSettings,
    TokenStreamSink,
    read_after,
)
from unicore_client.live_view import LiveText
from unicore_operator.task_api import answer
from unicore_operator.task_api.lookup import static_lookup
from unicore_operator.task_api.service import TaskApi

MB = 1_000_000
CAP = DEFAULT_MESSAGE_CAP_BYTES
MARK = CUT_MARK.format(limit=CAP)


def publish_answer(client: redis.Redis, task_id: str, call: int, text: str, *, delta: int = 65_536,
                   tries: int = 1) -> TokenStreamSink:
    """One model call's text as a fast endpoint sends it (``delta`` characters per chunk), like a turn's sink."""
    sink = TokenStreamSink(client, task_id, turn=0, call=call, seq=2 * call + 1,
                           settings=StreamSettings(close_wait_seconds=60))
    for _ in range(tries):
        sink.attempt_started()
        for start in range(0, len(text), delta):
            sink.text(text[start:start + delta])
    sink.close()
    assert sink.dropped == 0
    return sink


def kept(client: redis.Redis, task_id: str) -> list[StreamEntry]:
    return read_after(TaskStore(client), task_id, "0", count=1_000_000)


def call_text(entries: list[StreamEntry], call: int, attempt: int = 1) -> str:
    return "".join(e.text for e in entries if e.call == call and e.attempt == attempt and e.kind == "text")


def test_ten_answers_of_1_mb_leave_at_most_the_streams_byte_bound(redis_client: redis.Redis) -> None:
    for call in range(10):
        publish_answer(redis_client, "big", call, "x" * MB)
    entries = kept(redis_client, "big")
    text_bytes = sum(len(e.text.encode()) for e in entries)
    assert text_bytes <= DEFAULT_ENTRIES * ENTRY_TEXT_BYTES == 1_024_000
    assert len(entries) == DEFAULT_ENTRIES  # trimmed exactly
    assert all(len(e.text.encode()) <= ENTRY_TEXT_BYTES for e in entries)
    memory = redis_client.memory_usage(TaskKeys("big").tokens, samples=0)
    assert memory is not None and memory < 2 * 1024 * 1024, memory  # was 10.5 MB
    assert call_text(entries, 9) == "x" * CAP + MARK  # the newest answer: its first 256 KiB, then the mark
    assert entries[-1].kind == "end"


def test_an_answer_of_exactly_the_cap_is_published_whole_and_one_byte_more_is_cut_for_each_try(
    redis_client: redis.Redis
) -> None:
    whole = "\u00e9" * (CAP // 2)  # exactly CAP bytes of UTF-8 (2 bytes a character)
    over = "\u00e9" * (CAP // 2 - 1) + "x" + "\u00e9"  # CAP + 1 bytes: the last character does not fit
    publish_answer(redis_client, "exact", 0, whole)
    publish_answer(redis_client, "exact", 1, over, tries=2)
    entries = kept(redis_client, "exact")
    assert call_text(entries, 0) == whole  # at the cap: whole, no mark
    cut = over[:-1] + MARK
    assert cut.startswith(call_text(entries, 1, attempt=1))  # the first try: what went out before the retry voided it
    assert call_text(entries, 1, attempt=2) == cut  # a new try has its own budget
    assert all(len(e.text.encode()) <= ENTRY_TEXT_BYTES for e in entries)


def test_followers_show_the_mark_and_go_on(redis_client: redis.Redis) -> None:
    """``unicore show --follow`` and the kubectl plugin (``LiveText``), and the task API's stream route."""
    task_id = "team-a/cut"
    TaskStore(redis_client).create_task(TaskSpec(id=task_id, prompt="write a lot"))
    publish_answer(redis_client, task_id, 0, "y" * (CAP + 10))
    publish_answer(redis_client, task_id, 1, "short answer")
    entries = kept(redis_client, task_id)

    live = LiveText()
    printed = "".join(live.render(entry, 0) for entry in entries)
    assert printed == "Assistant: " + "y" * CAP + MARK + "\nAssistant: short answer\n"

    api = TaskApi(TaskStore(redis_client), static_lookup(lambda: [{"metadata": {"namespace": "team-a",
                                                                                "name": "cut"}}]))
    shown: list[dict[str, Any]] = []
    after = "0"
    for _ in range(10):  # the route pages by bytes: follow "next" until nothing is left
        reply = answer(api, "GET", "/apis/tasks.unicore.dev/v1alpha1/namespaces/team-a/agenttasks/cut/stream",
                       f"after={after}", sender="user:alice")
        assert reply.status == 200
        shown += reply.body["entries"]
        after = reply.body["next"]
        if not reply.body["more"]:
            break
    texts = "".join(e["text"] for e in shown if e["call"] == 0 and e["kind"] == "text")
    assert texts == "y" * CAP + MARK
    assert [e["kind"] for e in shown if e["call"] == 1] == ["attempt", "text", "end"]
