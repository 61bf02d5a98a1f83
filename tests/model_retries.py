"""Retries in the real-model tests: tolerated, never hidden.

A real-model test lets a model call take a second try (tests/model: ``UNICORE_OPENAI_MAX_ATTEMPTS=2``; a turn pod:
the provider's default tries) and a turn pod a second attempt (``UNICORE_MAX_TURN_RETRIES``), so that one refused
connection or timeout on a loaded machine does not fail the run. It does not fail on a retry, but it says so:
``report_retries`` prints what was retried (shown with ``-rA``, or with a failure's captured output) and warns with
``ModelRetry`` (in pytest's warnings summary of every run).

A model call's tries are read from the task's live stream (``unicore.store.token_stream``): every try of a call
publishes an ``attempt`` entry numbered from 1, so a call whose highest try is above 1 was retried.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from unicore.store.tasks import TaskStore
from unicore.store.token_stream import StreamEntry, read_after


class ModelRetry(UserWarning):
    """A real-model test's model call or turn needed more than one try; the test went on (its output says so)."""


def retried_calls(task_id: str, entries: Iterable[StreamEntry]) -> list[str]:
    """The model calls in ``entries`` (a task's live stream) that took more than one try, one line each."""
    tries: dict[tuple[int, int], int] = {}
    for entry in entries:
        if entry.kind == "attempt":
            key = (entry.turn, entry.call)
            tries[key] = max(tries.get(key, 0), entry.attempt)
    return [f"{task_id}: turn {turn}, model call {call}: {count} tries"
            for (turn, call), count in sorted(tries.items()) if count > 1]


def stream_entries(store: TaskStore, task_id: str) -> list[StreamEntry]:
    """Every entry of the task's live stream still kept (the stream is capped; the tests' answers are far below)."""
    entries: list[StreamEntry] = []
    after = "0"
    while batch := read_after(store, task_id, after):
        entries.extend(batch)
        after = batch[-1].id
    return entries


def report_retries(store: TaskStore, task_ids: Iterable[str], *, also: Iterable[str] = ()) -> list[str]:
    """Print and warn (``ModelRetry``) about every model call of ``task_ids`` that needed a retry, and the lines of
    ``also`` (other retries the caller saw, e.g. a turn pod's TurnFailed Events); the lines reported."""
    found = [line for task_id in task_ids for line in retried_calls(task_id, stream_entries(store, task_id))]
    found += list(also)
    if found:
        message = "a retry was needed (tolerated): " + "; ".join(found)
        print(message)
        warnings.warn(ModelRetry(message), stacklevel=2)
    return found
