"""A turn attempt's spans (``unicore.traces``): ``invoke_agent <agent>`` under the task's anchor (its spawn call, or
its root ``task`` span), with its queue wait, inbox drains, compactions and summary inside, and links to the child
reports its drains brought.

An attempt is marked on the task's record while its span is open (``store.trace_marks``). A process that dies
(SIGKILL, eviction, out of memory) never exports its span, but the spans it already exported name it as their parent:
the next attempt finds the mark and emits the lost span under the same id, from the lost attempt's start to its own
(status ERROR, ``error.type`` ``TurnLost``). So the retry shows and nothing is orphaned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from unicore.api.turn_numbers import shown_turn
from unicore.log import get_logger
from unicore.store import trace_marks
from unicore.store.records import DrainResult, TaskRecord
from unicore.store.tasks import TaskStore
from unicore.traces import anchors, genai, spans
from unicore.turn.outcome import EXIT_OK, TurnOutcome, exit_reason

log = get_logger("turn")

LOST = ("TurnLost", "the attempt's process ended before its turn did (killed, evicted or out of memory)")


def agent_name(record: TaskRecord) -> str:
    return record.agent or record.name or record.id


class TurnTrace:
    """The spans of one turn attempt of ``task_id``; every method is a no-op while tracing is off."""

    def __init__(self, store: TaskStore, task_id: str) -> None:
        self.store = store
        self.task_id = task_id
        self.opened = spans.OpenSpan()
        self.traceparent = ""  # the attempt's own span
        self.begun = 0.0  # when the attempt's span started (unix time)

    @property
    def span(self) -> spans.NoSpan:
        return self.opened.live

    def begin(self, record: TaskRecord) -> None:
        """Open the attempt's ``invoke_agent`` span (after the lease is held), first emitting a lost attempt's."""
        if not spans.active():
            return
        self.begun = time.time()
        try:
            parent = self._anchor(record)
            attributes = self._attributes(record)
            lost = spans.parse(record.trace_turn)
            if lost is not None and record.trace_turn_started > 0:
                spans.emit(f"{genai.INVOKE_AGENT} {agent_name(record)}", start=record.trace_turn_started,
                           end=self.begun, parent=parent, span_id=lost.span_id, error=LOST,
                           attributes={**attributes, "unicore.turn.lost": True})
            self.opened = spans.start(f"{genai.INVOKE_AGENT} {agent_name(record)}", attributes, parent=parent)
            ref = self.span.ref
            if ref is not None:
                self.traceparent = ref.traceparent
                trace_marks.begin_attempt(self.store, self.task_id, self.traceparent, time.time())
        except redis.RedisError as exc:  # a turn never fails for its trace
            log.warning("task %s: trace marks not written: %s", self.task_id, exc)

    def end(self, outcome: TurnOutcome) -> None:
        """Close the attempt's span with its outcome, and unmark it."""
        if not spans.active() or not self.traceparent:
            self.opened.close()
            return
        span = self.span
        if outcome.turn_number is not None:
            span.set(genai.TURN_NUMBER, shown_turn(outcome.turn_number))
        else:
            span.set("unicore.turn.idle", True)  # nothing to do: no turn ran
        span.set_many({"unicore.turn.model_calls": outcome.iterations, "unicore.turn.tool_calls": outcome.tool_calls})
        if outcome.exit_code != EXIT_OK:
            reason = exit_reason(outcome.exit_code)
            span.set(genai.TURN_EXIT, reason)
            span.fail(reason, outcome.error or reason)
        self.opened.close()
        try:
            trace_marks.end_attempt(self.store, self.task_id, self.traceparent)
        except redis.RedisError as exc:
            log.warning("task %s: trace mark not cleared: %s", self.task_id, exc)

    def queue_wait(self, oldest: float | None, start_kind: str) -> None:
        """The wait from the oldest drained message's queuing to this attempt (pod start and scheduling included)."""
        if oldest is None or not self.traceparent:
            return
        spans.emit(genai.QUEUE_WAIT, start=min(oldest, self.begun), end=self.begun, parent=self.traceparent,
                   attributes={genai.START_KIND: start_kind, genai.TASK_ID: self.task_id})

    @contextmanager
    def drain(self) -> Iterator[list[DrainResult]]:
        """An ``inbox_drain`` span around a drain; the caller appends the result, whose links the turn's span gets."""
        results: list[DrainResult] = []
        with spans.span(genai.INBOX_DRAIN, {genai.TASK_ID: self.task_id}) as span:
            yield results
            for result in results:
                span.set(genai.MESSAGES_DRAINED, result.drained)
                for link in result.trace_links:
                    self.span.link(link)
                    span.link(link)

    def _anchor(self, record: TaskRecord) -> str:
        """The task's stored anchor; a task created untraced gets a ``task`` span now, stored once."""
        if spans.parse(record.trace_parent) is not None:
            return record.trace_parent
        emitted = anchors.root_span(self.task_id, record.name or self.task_id, record.created_at or None)
        stored = trace_marks.anchor(self.store, self.task_id, emitted) if emitted else ""
        return stored or emitted

    def _attributes(self, record: TaskRecord) -> dict[str, str | int | None]:
        return {
            genai.OPERATION: genai.INVOKE_AGENT,
            genai.AGENT_NAME: agent_name(record),
            genai.AGENT_ID: self.task_id,
            genai.CONVERSATION_ID: record.root or self.task_id,
            genai.REQUEST_MODEL: record.model,
            genai.TASK_ID: self.task_id,
            genai.TASK_PARENT: record.parent,
            "unicore.task.depth": record.depth,
        }


__all__ = ["TurnTrace", "agent_name"]
