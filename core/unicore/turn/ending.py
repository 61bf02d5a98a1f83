"""How a turn ends: its summary (a model call, when enabled), the end-of-turn record with the report its parent is
owed, then the report's delivery. A turn whose answer waits for a person ends without a report: its parent is told
once the task's work is done."""

from __future__ import annotations

from unicore.api.turn_numbers import shown_turn
from unicore.errors import ConfigError, ModelError
from unicore.log import get_logger
from unicore.providers.base import Model, ModelRequest
from unicore.store.records import TaskRecord, Turn
from unicore.store.tasks import TaskStore
from unicore.traces import genai, spans
from unicore.turn.checkpoints import Checkpoints
from unicore.turn.compaction import SUMMARY_SYSTEM, Compactor, HistoryView
from unicore.turn.history import build_request_messages, message_text
from unicore.turn.lease import TurnLease
from unicore.turn.model_calls import ModelCalls
from unicore.turn.outcome import TurnOutcome
from unicore.turn.reports import completion_report, deliver_report, post_to_conversations

log = get_logger("turn")

SUMMARY_PROMPT = (
    "Summarize the turn above in at most three sentences: what was asked, what was done (tools, children), "
    "and the outcome. Answer with the summary only."
)


class TurnEnding:
    """The end of one turn. ``summarize``: summarize turns (None: when the task's limits and the runtime
    settings both say so)."""

    def __init__(self, store: TaskStore, lease: TurnLease, checkpoints: Checkpoints, models: ModelCalls,
                 outcome: TurnOutcome, *, summarize: bool | None, settings_summarize: bool) -> None:
        self.store = store
        self.task_id = outcome.task_id
        self.lease = lease
        self.checkpoints = checkpoints
        self.models = models
        self.outcome = outcome
        self.summarize = summarize
        self.settings_summarize = settings_summarize

    def end(self, model: Model, record: TaskRecord, turn: Turn, final_text: str, note: str, iterations: int, *,
            view: HistoryView, compactor: Compactor | None, report: bool = True) -> None:
        """End the turn; ``report`` False (the task waits for a person): its parent is told nothing yet."""
        lease = self.lease.held
        summary = self._summary(model, record, turn, view, compactor) if report else ""
        self.checkpoints.begin("end turn")
        record = self.store.get_task(self.task_id)
        owed = (
            completion_report(record, turn.turn_number, final_text, note, self.store.message_cap_bytes)
            if record.parent and report
            else None
        )
        self.store.end_turn(
            lease,
            turn.turn_number,
            last_response=final_text,
            summary=summary,
            iterations=iterations,
            note=note,
            report=owed,
        )
        self.checkpoints.fault_point("after end turn")
        self.outcome.final_text, self.outcome.note = final_text, note
        deliver_report(self.store, self.task_id)  # owed until delivered: a crash here is redelivered later
        self.checkpoints.fault_point("after notify")
        if report:  # its answer to the conversations it takes part in (found again after a crash: catch_up)
            post_to_conversations(self.store, self.task_id)
        log.info("task %s: turn %d ended after %d model calls", self.task_id, shown_turn(turn.turn_number), iterations)

    def end_waiting(self, record: TaskRecord, note: str) -> None:
        """Still waiting for a person: end the last turn if its process died before it could (nothing else)."""
        lease = self.lease.held
        last = record.turns - 1
        if last >= 0 and not self.store.turn_meta(self.task_id, last).get("ended_at"):
            self.store.end_turn(lease, last, last_response=note, note=note)
            self.outcome.turn_number = last
        self.outcome.note = note
        log.info("task %s: still %s", self.task_id, note)

    def _summary(self, model: Model, record: TaskRecord, turn: Turn, view: HistoryView,
                 compactor: Compactor | None) -> str:
        enabled = self.summarize
        if enabled is None:
            enabled = record.limits.summarize_turns and self.settings_summarize
        if not enabled or not view.turn_messages(turn.turn_number, turn.first_seq):
            return ""
        prompt = {"role": "user", "content": [{"text": SUMMARY_PROMPT}]}
        try:
            if compactor is not None:  # the turn's messages fit: compacted first if the history does not
                compactor.fit(SUMMARY_SYSTEM, (), [prompt])
            messages = build_request_messages(view.turn_messages(turn.turn_number, turn.first_seq))
            messages.append(prompt)
            request = ModelRequest(
                task_id=self.task_id,
                system=SUMMARY_SYSTEM,
                messages=build_request_messages(messages),
                purpose="summary",
                max_tokens=512,
            )
            with spans.span(genai.SUMMARY, {genai.TASK_ID: self.task_id}):
                response = self.models.summary_call(model, request)
        except (ModelError, ConfigError) as exc:
            log.warning("task %s: turn summary failed: %s", self.task_id, exc)
            return ""
        return message_text(response.content)
