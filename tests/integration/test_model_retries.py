"""tests/model_retries.py, the real-model tests' report of retries, against a real Redis stream written by the
turn's own writer (TokenStreamSink, as a provider's call announces each try) and read the way the tests read it."""

from __future__ import annotations

import warnings

import pytest
import redis
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import READ_COUNT, StreamSettings, TokenStreamSink, publish

from tests.model_retries import ModelRetry, report_retries


def _call(client: redis.Redis, task_id: str, *, turn: int, call: int, tries: int) -> None:
    with TokenStreamSink(client, task_id, turn=turn, call=call, seq=call + 1) as sink:
        for _ in range(tries):
            sink.attempt_started()
            sink.text(f"answer of call {call}")


def test_a_call_with_a_second_try_is_printed_and_warned(redis_client: redis.Redis,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _call(redis_client, "poet", turn=0, call=0, tries=1)
    _call(redis_client, "poet", turn=0, call=1, tries=2)
    _call(redis_client, "poet-child", turn=1, call=0, tries=1)
    with pytest.warns(ModelRetry, match="poet: turn 0, model call 1: 2 tries") as caught:
        found = report_retries(TaskStore(redis_client), ["poet", "poet-child"])
    assert found == ["poet: turn 0, model call 1: 2 tries"]
    assert len(caught) == 1
    assert capsys.readouterr().out == "a retry was needed (tolerated): poet: turn 0, model call 1: 2 tries\n"


def test_no_retry_reports_nothing_and_other_retries_are_reported_with_the_calls(
    redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    _call(redis_client, "writer", turn=0, call=0, tries=1)
    _call(redis_client, "writer", turn=0, call=1, tries=1)
    store = TaskStore(redis_client)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails here
        assert report_retries(store, ["writer", "never-ran"]) == []
    assert capsys.readouterr().out == ""

    with pytest.warns(ModelRetry, match="TurnFailed: turn 1 failed"):
        found = report_retries(store, ["writer"], also=["TurnFailed: turn 1 failed"])
    assert found == ["TurnFailed: turn 1 failed"]


def test_a_retry_after_more_entries_than_one_read_is_found(redis_client: redis.Redis) -> None:
    fields = {"turn": 0, "call": 0, "seq": 1, "attempt": 1, "kind": "text", "text": "x"}
    publish(redis_client, "long", [{**fields, "kind": "attempt", "text": ""}, *[fields] * (2 * READ_COUNT)],
            StreamSettings())
    with TokenStreamSink(redis_client, "long", turn=0, call=1, seq=2) as sink:
        sink.attempt_started()
        sink.attempt_started()
    with pytest.warns(ModelRetry):
        assert report_retries(TaskStore(redis_client), ["long"]) == ["long: turn 0, model call 1: 2 tries"]
