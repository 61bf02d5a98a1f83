"""One agent turn of a task, run by this process: lease -> drain -> (model -> tools -> drain)* -> summary -> notify
parent -> release. ``AgentTurn.run`` returns its ``TurnOutcome`` (exit codes: ``unicore.turn.outcome``).

The steps live beside it: the lease and its heartbeat (``unicore.turn.lease``), the model calls
(``unicore.turn.model_calls``), the tool calls (``unicore.turn.tool_calls``), the end of the turn
(``unicore.turn.ending``); progress marks and fault points are their hooks (``unicore.turn.checkpoints``).

Stalls: the heartbeat renews the lease only while the current step (model call, tool call, drain) has run at
most ``UNICORE_STALL_SECONDS`` (``unicore.turn.progress``); a hung turn stops beating and the watchdog reaps it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from unicore.agent_resolution import resolve_for_turn
from unicore.api.schema import ContentBlock, Message, is_turn_ending, text_block
from unicore.api.turn_numbers import shown_turn
from unicore.errors import ConfigError, LeaseBusy, LeaseLost, ModelError, TaskNotFound, TurnCancelled
from unicore.log import get_logger
from unicore.providers.base import Model, ModelRequest, ToolSpec, Usage
from unicore.settings import RuntimeSettings
from unicore.store.compactions import Compaction, append_compaction, load_request_history, seen_tool_results
from unicore.store.records import DrainResult, TaskRecord, Turn
from unicore.store.tasks import TaskStore
from unicore.store.telemetry import Telemetry
from unicore.store.token_stream import StreamSettings, publish_turn_end
from unicore.tools import conversation_tools
from unicore.tools.base import Spawner, Tool, ToolContext
from unicore.tools.mcp_toolbox import McpToolbox
from unicore.tools.registry import tool_specs, toolbox_for
from unicore.turn.answers import BadAnswer, accept_answer, refusal_text, used_tool_use_ids
from unicore.turn.approvals import ApprovalGate, Prepared
from unicore.turn.budget import BudgetUsedUp, TreeBudget, hold_seconds
from unicore.turn.checkpoints import Checkpoints
from unicore.turn.commands import command_fields, live_output
from unicore.turn.compaction import Compactor, HistoryView, answer_tool_ids
from unicore.turn.context_window import ContextSettings
from unicore.turn.defaults import (
    ModelFactory,
    NoSpawner,
    SystemPromptBuilder,
    ToolsetFactory,
    default_workspace,
    start_kind,
)
from unicore.turn.ending import TurnEnding
from unicore.turn.history import message_text
from unicore.turn.lease import TurnLease
from unicore.turn.model_calls import ModelCalls
from unicore.turn.outcome import (
    EXIT_BUSY,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_LEASE_LOST,
    EXIT_NOT_FOUND,
    EXIT_OK,
    TurnOutcome,
    exit_reason,
)
from unicore.turn.reports import settle_owed
from unicore.turn.tool_calls import ToolCalls
from unicore.turn.tracing import TurnTrace

log = get_logger("turn")


@dataclass
class Equipment:
    """What a turn works with, set up once it holds the lease."""

    model: Model
    tools: list[Tool]
    specs: list[ToolSpec]
    ctx: ToolContext


class AgentTurn:
    """One turn of ``task_id`` (see the module doc); ``run`` it once."""

    def __init__(
        self,
        task_id: str,
        client: redis.Redis,
        *,
        model_factory: ModelFactory,
        toolset_factory: ToolsetFactory,
        spawner: Spawner | None,
        workspace: Path | None,
        cancel: threading.Event,
        holder: str | None,
        lease_ttl_ms: int,
        summarize: bool | None,
        system_prompt_builder: SystemPromptBuilder,
        stall_seconds: float,
        settings: RuntimeSettings,
        context: ContextSettings,
    ) -> None:
        self.task_id = task_id
        self.redis = client
        self.store = TaskStore(client)
        self.telemetry = Telemetry(client)
        self.model_factory = model_factory
        self.toolset_factory = toolset_factory
        self.spawner = spawner
        self.workspace = workspace
        self.cancel = cancel
        self.settings = settings
        self.started_at = time.monotonic()
        self.system_prompt_builder = system_prompt_builder
        self.context = context
        self.outcome = TurnOutcome(task_id=task_id, exit_code=EXIT_OK)
        self.lease = TurnLease(self.store, task_id, holder=holder, ttl_ms=lease_ttl_ms, cancel=cancel)
        self.checkpoints = Checkpoints(task_id, stall_seconds, self.lease.confirm_after_stall)
        self.live = StreamSettings(entries=settings.live_stream_entries, ttl_seconds=settings.live_stream_ttl_seconds)
        self.models = ModelCalls(client, self.store, self.lease, self.checkpoints, self.outcome, self.live)
        self.tool_calls = ToolCalls(self.store, self.lease, self.checkpoints, self.outcome, self.check_cancel)
        self.ending = TurnEnding(self.store, self.lease, self.checkpoints, self.models, self.outcome,
                                 summarize=summarize, settings_summarize=settings.summarize_turns)
        self.view = HistoryView(None)  # the newest compaction and the messages after it (unicore.turn.compaction)
        self.compactor: Compactor | None = None
        self.mcp = McpToolbox()  # the MCP servers' tools of this turn (tools.mcp_toolbox), closed when it ends
        self.trace = TurnTrace(self.store, task_id)  # its spans (unicore.turn.tracing)

    # ---- lifecycle: the lease around the turn, failures to exit codes

    def run(self) -> TurnOutcome:
        try:
            record = self.store.get_task(self.task_id)
        except TaskNotFound as exc:
            return self._finish(EXIT_NOT_FOUND, str(exc))
        try:
            self.lease.acquire()
        except LeaseBusy as exc:
            log.warning("%s", exc)
            return self._finish(EXIT_BUSY, str(exc))
        self.checkpoints.begin("lease acquired")
        self.lease.start_heartbeat(self.checkpoints.making_progress)
        self.checkpoints.scope(record.turns)
        self.checkpoints.fault_point("after lease")
        self.trace.begin(record)
        started = time.monotonic()
        try:
            self._run_leased(record)
        except TurnCancelled as exc:
            self._cancelled(str(exc))
        except LeaseLost as exc:
            log.error("task %s: %s; stopping without writing", self.task_id, exc)
            self.outcome.exit_code, self.outcome.error = EXIT_LEASE_LOST, str(exc)
            self.lease.give_up()
        except (ModelError, ConfigError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the turn must release its lease and say why it failed
            log.exception("task %s: turn failed", self.task_id)
            self._failed(f"unexpected {type(exc).__name__}: {exc}")
        finally:
            self.trace.end(self.outcome)
            self.lease.stop_heartbeat()
            if self.lease.release():
                self.checkpoints.fault_point("after release")
            self.mcp.close()
            self.models.release_budget()
        self._count(started)
        return self.outcome

    def _count(self, started: float) -> None:
        """Tell live readers the turn ended, and count it."""
        if self.outcome.turn_number is not None and self.outcome.exit_code != EXIT_LEASE_LOST:
            publish_turn_end(self.redis, self.task_id, self.outcome.turn_number, self.live)  # wakes live readers
        if self.outcome.turn_number is not None:
            self.telemetry.observe("turn_duration_seconds", time.monotonic() - started, trace=self.trace.traceparent)
        if self.outcome.exit_code == EXIT_OK and self.outcome.turn_number is not None:
            self.telemetry.incr("turns_finished_total")
        elif self.outcome.exit_code not in (EXIT_OK, EXIT_BUSY, EXIT_NOT_FOUND):
            self.telemetry.incr("turns_failed_total", {"reason": exit_reason(self.outcome.exit_code)})

    def _finish(self, code: int, error: str) -> TurnOutcome:
        self.outcome.exit_code, self.outcome.error = code, error
        return self.outcome

    def check_cancel(self) -> None:
        """A safe point: stop here if the lease was lost or the turn was cancelled."""
        if self.lease.lost.is_set():
            raise LeaseLost(f"lease of {self.task_id} lost (heartbeat)")
        if self.cancel.is_set():
            raise TurnCancelled("cancel requested")

    def _failed(self, error: str) -> None:
        log.error("task %s: turn failed: %s", self.task_id, error)
        self.outcome.exit_code, self.outcome.error = EXIT_FAILED, error
        if self.lease.current is not None:
            try:
                self.store.record_error(self.lease.current, error)
            except (LeaseLost, redis.RedisError) as exc:
                log.error("task %s: could not record the error: %s", self.task_id, exc)

    def _cancelled(self, why: str) -> None:
        if self.lease.lost.is_set():
            self.outcome.exit_code, self.outcome.error = EXIT_LEASE_LOST, "lease lost"
            self.lease.give_up()
            return
        log.warning("task %s: turn cancelled (%s)", self.task_id, why)
        self.outcome.exit_code, self.outcome.error = EXIT_CANCELLED, f"cancelled: {why}"
        try:
            self.tool_calls.cancel_pending()
            if self.lease.current is not None:
                self.store.record_error(self.lease.current, "turn cancelled (SIGTERM) at a safe point")
        except (LeaseLost, redis.RedisError) as exc:
            log.error("task %s: could not record the cancellation: %s", self.task_id, exc)

    # ---- the turn

    def _run_leased(self, record: TaskRecord) -> None:
        record = resolve_for_turn(self.store, self.lease.held, record)  # its agent's definition as of now
        self.check_cancel()
        self.models.budget = TreeBudget(
            self.redis, self.task_id, record.root or self.task_id,
            hold_seconds=hold_seconds(self.checkpoints.stall_seconds, self.lease.ttl_ms),
            cancel=self.cancel, check_cancel=self.check_cancel, mark=self.checkpoints.begin,
        )
        kit = self._equip(record)
        settle_owed(self.store, self.task_id, self.checkpoints)  # its last turn's report and conversation posts
        gate = ApprovalGate(self.redis, self.lease.held, record, kit.ctx, kit.tools, self.checkpoints.begin)
        if gate.prepare() is Prepared.WAITING:  # a person has still to decide: no drain, no model call
            self.ending.end_waiting(record, gate.note)
            return
        current, drained = self._first_drain(kit.model, record)
        if current is None:
            return
        if not drained.messages and is_turn_ending(self.view.messages[-1]):
            self._settle_answered(kit.model, record, current)
            return
        self.telemetry.incr("turns_started_total")
        if drained.oldest is not None:  # from the oldest message it drained being queued to now
            self.telemetry.observe("turn_start_seconds", max(0.0, time.time() - drained.oldest),
                                   {"start": start_kind(self.settings)})
            self.trace.queue_wait(drained.oldest, start_kind(self.settings))
        log.info(
            "task %s: turn %d (%s, %d new messages)",
            self.task_id,
            shown_turn(current.turn_number),
            "new" if drained.new_turn else "continued",
            len(drained.messages),
        )
        final_text, note, waiting = self._iterate(kit, record, current, gate)
        self.ending.end(kit.model, record, current, final_text, note, self.outcome.iterations,
                        view=self.view, compactor=self.compactor, report=not waiting)

    def _equip(self, record: TaskRecord) -> Equipment:
        """The task's model, its tools (its MCP servers' included) and what its tools run with."""
        model = self.model_factory(record, self.redis)
        if hasattr(model, "set_cancel_event"):
            model.set_cancel_event(self.cancel)
        tools = list(self.toolset_factory(record))
        tools += conversation_tools.for_task(self.store, self.task_id, tools)  # post_message, in a conversation
        workspace = self.workspace or default_workspace(record.root or self.task_id, self.settings)
        workspace.mkdir(parents=True, exist_ok=True)
        if record.mcp_servers:
            self.checkpoints.begin("MCP servers")  # connect and list tools, each server bounded by its timeout
            self.mcp = toolbox_for(record, self.settings, workspace, os.environ, [tool.name for tool in tools])
            tools += self.mcp.tools
        specs = tool_specs(tools)
        ctx = ToolContext(
            task_id=self.task_id,
            store=self.store,
            spawner=self.spawner or NoSpawner(),
            workspace=workspace,
            cancel=self.cancel,
            explain_unavailable=self.mcp.explain,
            telemetry=self.telemetry,  # tool_calls_total / tool_call_duration_seconds, counted by run_tool_call
            lease=lambda: self.lease.held,
            max_job_gpus=record.limits.max_job_gpus,
            **command_fields(record, tools, self.settings, workspace,
                             deadline=self.started_at + record.limits.turn_timeout_seconds),
        )
        if ctx.command_runner is not None:
            ctx.command_output = live_output(self.redis, self.task_id, ctx, self.live)
        return Equipment(model, tools, specs, ctx)

    def _first_drain(self, model: Model, record: TaskRecord) -> tuple[Turn | None, DrainResult]:
        """The inbox drained into the history, which is loaded from the newest compaction on: the turn it is
        (None: nothing to do) and what the drain brought."""
        drained = self._drain(first=True)
        loaded = load_request_history(self.redis, self.task_id)  # reads only from the newest compaction on
        self.view = HistoryView(loaded.compaction, loaded.messages)
        if loaded.turn is None or not self.view.messages:
            log.info("task %s: nothing to do (no messages)", self.task_id)
            return None, drained
        current = loaded.turn
        window, limit = self.context.limit_for(record.model, getattr(model, "context_window", None))
        self.compactor = Compactor(self.view, task_id=self.task_id, window=window, limit=limit,
                                   summarize=lambda request: self.models.summary_call(model, request),
                                   write=self._write_compaction)
        self.outcome.turn_number = current.turn_number
        self.checkpoints.scope(current.turn_number)
        self.checkpoints.fault_point("after drain")
        return current, drained

    def _drain(self, *, first: bool) -> DrainResult:
        self.checkpoints.begin("drain")
        with self.trace.drain() as results:  # its span links the child reports it brings
            drained = self.store.drain(self.lease.held, first_drain=first)
            results.append(drained)
        self.checkpoints.begin("after drain")
        return drained

    def _settle_answered(self, model: Model, record: TaskRecord, current: Turn) -> None:
        """Nothing new, and the last message ends the turn: finish the turn if its process died before it could."""
        if current.ended_at is None:
            log.info(
                "task %s: turn %d was answered but not finished; finishing it",
                self.task_id,
                shown_turn(current.turn_number),
            )
            self.ending.end(model, record, current, message_text(self.view.messages[-1].content), "", 0,
                            view=self.view, compactor=self.compactor)
        else:
            log.info("task %s: nothing to do", self.task_id)

    def _iterate(self, kit: Equipment, record: TaskRecord, current: Turn, gate: ApprovalGate) -> tuple[str, str, bool]:
        """(model -> tools -> drain)* until a text-only answer, the token budget, a call that waits for a person,
        or max_iterations: (final text, note, waiting for a person)."""
        view, compactor = self.view, self.compactor
        assert compactor is not None
        max_iterations = record.limits.max_iterations
        used_ids = used_tool_use_ids(view.messages)  # tool-use ids are unique over the task's history (answers.py)
        for _ in range(max_iterations):
            self.check_cancel()
            system = self.system_prompt_builder(self.store, record)
            try:
                request = ModelRequest(
                    task_id=self.task_id,
                    system=system,
                    messages=compactor.fit(system, kit.specs),  # compacts first when the history passes the limit
                    tools=kit.specs,
                    purpose="turn",
                    earlier_answers=view.earlier_answers,
                )
                response = self.models.answer(kit.model, request, seq=view.messages[-1].seq + 1)
            except BudgetUsedUp as exc:  # the tree's token budget: no call was made
                log.info("task %s: %s", self.task_id, exc)
                return str(exc), str(exc), False
            self.outcome.iterations += 1
            try:
                if response.refused:  # e.g. a failed tool call written as text: never the final answer
                    raise BadAnswer(response.refused)
                if view.compaction is not None:  # ids used before it are no longer in the view: ask the inbox
                    used_ids |= seen_tool_results(self.redis, self.task_id, answer_tool_ids(response.content))
                content = accept_answer(response.content, used_ids, max_bytes=self.store.message_cap_bytes)
            except BadAnswer as exc:  # never stored: the model is told why and asked again
                log.warning("task %s: model answer refused: %s", self.task_id, exc)
                refusal = self.store.append_message(
                    self.lease.held, "user", [text_block(refusal_text(str(exc)))], usage=response.usage
                )
                self.models.usage_counted()
                view.messages.append(refusal)
                continue
            view.messages.append(self._store_answer(content, response.usage))
            tool_uses = [block for block in content if "toolUse" in block]
            if not tool_uses:
                return message_text(content), "", False
            if gate.wait(current.turn_number, tool_uses, time.time()) is not None:  # some calls wait for a person
                return gate.note, gate.note, True
            kit.ctx.turn_number, kit.ctx.result_seq = current.turn_number, view.messages[-1].seq + 1
            self.tool_calls.run(kit.ctx, kit.tools, tool_uses)
            self.check_cancel()
            drained = self._drain(first=False)
            self.checkpoints.fault_point("after drain")
            view.messages.extend(drained.messages)
        note = f"stopped after max_iterations={max_iterations} model calls without a text-only answer"
        log.warning("task %s: %s", self.task_id, note)
        last = view.messages[-1]
        final_text = message_text(last.content) if last.role == "assistant" else ""
        return final_text or note, note, False

    def _store_answer(self, content: list[ContentBlock], usage: Usage) -> Message:
        answer = self.store.append_message(self.lease.held, "assistant", content, usage=usage)
        self.models.usage_counted()
        self.checkpoints.fault_point("after answer")
        return answer

    def _write_compaction(self, record: Compaction) -> bool:
        """Store a compaction record (fenced, append-only); counted once, when it is written."""
        written = append_compaction(self.redis, self.lease.held, record)
        if written:
            self.telemetry.incr("compactions_total")
            log.info("task %s: compacted: messages 1-%d summarized", self.task_id, record.upto)
        self.checkpoints.fault_point("after compaction")
        return written
