"""One agent turn, then exit: lease -> drain -> (model -> tools -> drain)* -> summary -> notify parent -> release.

Exit codes of ``unicore-turn`` (``TurnOutcome.exit_code``):
  0   the turn ended (text-only answer, max_iterations or token budget), or there was nothing to do
  1   the turn failed (model error, bad model/script, unexpected error); ``last_error`` is set on the task
  2   bad command line
  3   another live turn holds the task's lease (nothing done)
  4   no such task
  5   the lease was lost mid-turn (a newer turn owns the task); nothing more was written
  143 cancelled by SIGTERM at a safe point; unanswered tool calls of the last answer got "Cancelled" results

Stalls: the heartbeat renews the lease only while the current step (model call, tool call, drain) has run at
most ``UNICORE_STALL_SECONDS`` (``unicore.turn.progress``); a hung turn stops beating and the watchdog reaps it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from unicore.agent_resolution import resolve_for_turn
from unicore.api.schema import (
    ContentBlock,
    InboxMessage,
    Message,
    is_turn_ending,
    text_block,
    tool_result_block,
    tool_result_message_id,
)
from unicore.api.turn_numbers import shown_turn
from unicore.errors import (
    ConfigError,
    LeaseBusy,
    LeaseLost,
    MessageTooLarge,
    ModelError,
    TaskNotFound,
    TurnCancelled,
)
from unicore.faults import fault_point, set_scope
from unicore.log import get_logger
from unicore.providers.base import Model, ModelRequest, ModelResponse
from unicore.providers.registry import resolve_model
from unicore.settings import RuntimeSettings
from unicore.store.compactions import Compaction, append_compaction, load_request_history, seen_tool_results
from unicore.store.records import Lease, TaskRecord, Turn
from unicore.store.tasks import DEFAULT_LEASE_TTL_MS, TaskStore
from unicore.store.telemetry import Telemetry
from unicore.store.token_stream import StreamSettings, TokenStreamSink, publish_turn_end
from unicore.tools.base import Spawner, Tool, ToolContext
from unicore.tools.mcp_toolbox import McpToolbox, toolbox_for
from unicore.tools.registry import run_tool_call, tool_specs, toolset_for
from unicore.turn.answers import BadAnswer, accept_answer, refusal_text, used_tool_use_ids
from unicore.turn.approvals import ApprovalGate, Prepared
from unicore.turn.budget import BudgetUsedUp, TreeBudget, hold_seconds
from unicore.turn.compaction import SUMMARY_SYSTEM, Compactor, HistoryView, answer_tool_ids
from unicore.turn.context_window import ContextSettings
from unicore.turn.history import CANCELLED_TEXT, build_request_messages, message_text
from unicore.turn.progress import Progress
from unicore.turn.prompts import build_system_prompt
from unicore.turn.reports import completion_message, completion_report, deliver_report
from unicore.turn.signals import Heartbeat

log = get_logger("turn")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUSY = 3
EXIT_NOT_FOUND = 4
EXIT_LEASE_LOST = 5
EXIT_CANCELLED = 143

SUMMARY_PROMPT = (
    "Summarize the turn above in at most three sentences: what was asked, what was done (tools, children), "
    "and the outcome. Answer with the summary only."
)

ModelFactory = Callable[[TaskRecord, redis.Redis], Model]
ToolsetFactory = Callable[[TaskRecord], Sequence[Tool]]
SystemPromptBuilder = Callable[[TaskStore, TaskRecord], str]


@dataclass
class TurnOutcome:
    task_id: str
    exit_code: int
    turn_number: int | None = None
    iterations: int = 0  # model calls made by this process in the turn
    final_text: str = ""
    note: str = ""
    error: str = ""
    tool_calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- default seams


def default_model_factory(record: TaskRecord, client: redis.Redis) -> Model:
    """The task's model through ``unicore.providers.registry.resolve_model`` (scripted, bedrock, openai)."""
    return resolve_model(record.model, redis=client, script=record.script)


def default_toolset_factory(record: TaskRecord) -> Sequence[Tool]:
    return toolset_for(record)


def default_system_prompt(store: TaskStore, record: TaskRecord) -> str:
    return build_system_prompt(store, record)


# The RuntimeSettings fields a turn uses (run_turn reads just these when it is not given settings).
TURN_SETTINGS = frozenset(
    {"stall_seconds", "summarize_turns", "workspace", "home", "live_stream_entries", "live_stream_ttl_seconds",
     "mcp_servers", "spawner"}
)


def default_workspace(task_id: str, settings: RuntimeSettings | None = None) -> Path:
    """The workspace folder of a task tree (pass the ROOT id: a tree shares one workspace, so children with
    read-only tools can read what their parent and siblings wrote): ``$UNICORE_WORKSPACE``, else
    ``$UNICORE_HOME/workspaces/<root>`` (``settings`` None: read from the environment now)."""
    if settings is None:
        settings = RuntimeSettings.from_env(only={"workspace", "home"})
    if settings.workspace is not None:
        return settings.workspace
    return settings.home / "workspaces" / task_id.replace("/", "__")


# --------------------------------------------------------------------------- the runner


class _Turn:
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
        self.holder = holder
        self.lease_ttl_ms = lease_ttl_ms
        self.summarize = summarize
        self.settings = settings
        self.system_prompt_builder = system_prompt_builder
        self.lease: Lease | None = None
        self.lease_lost = threading.Event()
        self.progress = Progress(stall_seconds)
        self._stall_reported = False
        self.outcome = TurnOutcome(task_id=task_id, exit_code=EXIT_OK)
        self.pending_tool_uses: list[
            ContentBlock
        ] = []  # tool calls of the last answer still without a result
        self.live = StreamSettings(entries=settings.live_stream_entries, ttl_seconds=settings.live_stream_ttl_seconds)
        self.answer_seq = 0  # the seq the next model answer gets when stored (the live stream names calls by it)
        self.context = context
        self.view = HistoryView(None)  # the newest compaction and the messages after it (unicore.turn.compaction)
        self.compactor: Compactor | None = None
        self.mcp = McpToolbox()  # the MCP servers' tools of this turn (tools.mcp_toolbox), closed when it ends
        self.budget: TreeBudget | None = None  # the tree's token budget: a reservation per model call (turn_budget)

    # ---- lifecycle

    def run(self) -> TurnOutcome:
        try:
            record = self.store.get_task(self.task_id)
        except TaskNotFound as exc:
            return self._finish(EXIT_NOT_FOUND, str(exc))
        try:
            self.lease = self.store.acquire_lease(self.task_id, holder=self.holder, ttl_ms=self.lease_ttl_ms)
        except LeaseBusy as exc:
            log.warning("%s", exc)
            return self._finish(EXIT_BUSY, str(exc))
        self.progress.mark("lease acquired")
        heartbeat = Heartbeat(
            lambda: self.store.renew_lease(self.lease, ttl_ms=self.lease_ttl_ms),  # type: ignore[arg-type]
            self.lease_ttl_ms / 3000,
            self._on_heartbeat_failure,
            healthy=self._making_progress,
        )
        heartbeat.start()
        set_scope(f"{self.task_id}#{record.turns}")
        fault_point("after lease")
        started = time.monotonic()
        try:
            self._run_leased(record, started)
        except TurnCancelled as exc:
            self._cancelled(str(exc))
        except LeaseLost as exc:
            log.error("task %s: %s; stopping without writing", self.task_id, exc)
            self.outcome.exit_code, self.outcome.error = EXIT_LEASE_LOST, str(exc)
            self.lease = None  # not ours any more: never release it
        except (ModelError, ConfigError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the turn must release its lease and say why it failed
            log.exception("task %s: turn failed", self.task_id)
            self._failed(f"unexpected {type(exc).__name__}: {exc}")
        finally:
            heartbeat.stop()
            if self.lease is not None:
                try:
                    self.store.release_lease(self.lease)
                except redis.RedisError as exc:
                    log.error("task %s: could not release the lease: %s", self.task_id, exc)
                fault_point("after release")
            self.mcp.close()
            if self.budget is not None:
                self.budget.release_quietly()
        if self.outcome.turn_number is not None and self.outcome.exit_code != EXIT_LEASE_LOST:
            publish_turn_end(self.redis, self.task_id, self.outcome.turn_number, self.live)  # wakes live readers
        if self.outcome.turn_number is not None:
            self.telemetry.observe("turn_duration_seconds", time.monotonic() - started)
        if self.outcome.exit_code == EXIT_OK and self.outcome.turn_number is not None:
            self.telemetry.incr("turns_finished_total")
        elif self.outcome.exit_code not in (EXIT_OK, EXIT_BUSY, EXIT_NOT_FOUND):
            self.telemetry.incr("turns_failed_total", {"reason": _exit_reason(self.outcome.exit_code)})
        return self.outcome

    def _finish(self, code: int, error: str) -> TurnOutcome:
        self.outcome.exit_code, self.outcome.error = code, error
        return self.outcome

    def _on_heartbeat_failure(self, exc: BaseException) -> None:
        log.error("task %s: heartbeat failed (%s); stopping at the next safe point", self.task_id, exc)
        if isinstance(exc, LeaseLost):
            self.lease_lost.set()
        self.cancel.set()

    def _making_progress(self) -> bool:
        """Heartbeat gate: False while the current step has run longer than the stall limit."""
        step, age = self.progress.current()
        if age <= self.progress.stall_seconds:
            self._stall_reported = False
            return True
        if not self._stall_reported:
            self._stall_reported = True
            log.error(
                "task %s: step %r has run %.0fs (> UNICORE_STALL_SECONDS=%.0f): the turn looks hung; "
                "heartbeat stopped, the lease expires and the watchdog reaps the turn",
                self.task_id,
                step,
                age,
                self.progress.stall_seconds,
            )
        return False

    def _end_step(self, next_step: str) -> None:
        """A step boundary. A step that overran the stall limit first proves the lease is still ours
        (renewing it): meanwhile the watchdog may have reaped the turn, and a zombie must not write."""
        overdue = self.progress.stalled()
        self.progress.mark(next_step)
        if overdue and self.lease is not None:
            log.warning("task %s: a stalled step returned; checking the lease", self.task_id)
            self.store.renew_lease(self.lease, ttl_ms=self.lease_ttl_ms)

    def _check_cancel(self) -> None:
        if self.lease_lost.is_set():
            raise LeaseLost(f"lease of {self.task_id} lost (heartbeat)")
        if self.cancel.is_set():
            raise TurnCancelled("cancel requested")

    def _failed(self, error: str) -> None:
        log.error("task %s: turn failed: %s", self.task_id, error)
        self.outcome.exit_code, self.outcome.error = EXIT_FAILED, error
        if self.lease is not None:
            try:
                self.store.record_error(self.lease, error)
            except (LeaseLost, redis.RedisError) as exc:
                log.error("task %s: could not record the error: %s", self.task_id, exc)

    def _cancelled(self, why: str) -> None:
        if self.lease_lost.is_set():
            self.outcome.exit_code, self.outcome.error = EXIT_LEASE_LOST, "lease lost"
            self.lease = None
            return
        log.warning("task %s: turn cancelled (%s)", self.task_id, why)
        self.outcome.exit_code, self.outcome.error = EXIT_CANCELLED, f"cancelled: {why}"
        try:
            for block in self.pending_tool_uses:
                self._queue_result(
                    tool_result_block(block["toolUse"]["toolUseId"], CANCELLED_TEXT, error=True)
                )
            if self.lease is not None:
                self.store.record_error(self.lease, "turn cancelled (SIGTERM) at a safe point")
        except (LeaseLost, redis.RedisError) as exc:
            log.error("task %s: could not record the cancellation: %s", self.task_id, exc)

    # ---- the turn

    def _run_leased(self, record: TaskRecord, started: float) -> None:
        assert self.lease is not None
        record = resolve_for_turn(self.store, self.lease, record)  # its agent's definition as of now
        self._check_cancel()
        self.budget = TreeBudget(self.redis, self.task_id, record.root or self.task_id,
                                 hold_seconds=hold_seconds(self.progress.stall_seconds, self.lease_ttl_ms),
                                 cancel=self.cancel, check_cancel=self._check_cancel, mark=self.progress.mark)
        model = self.model_factory(record, self.redis)
        if hasattr(model, "set_cancel_event"):
            model.set_cancel_event(self.cancel)
        tools = list(self.toolset_factory(record))
        workspace = self.workspace or default_workspace(record.root or self.task_id, self.settings)
        workspace.mkdir(parents=True, exist_ok=True)
        if record.mcp_servers:
            self.progress.mark("MCP servers")  # connect and list tools, each server bounded by its timeout
            self.mcp = toolbox_for(record, self.settings, workspace, os.environ, [tool.name for tool in tools])
            tools += self.mcp.tools
        specs = tool_specs(tools)
        ctx = ToolContext(
            task_id=self.task_id,
            store=self.store,
            spawner=self.spawner or _no_spawner(),
            workspace=workspace,
            cancel=self.cancel,
            explain_unavailable=self.mcp.explain,
            telemetry=self.telemetry,  # tool_calls_total / tool_call_duration_seconds, counted by run_tool_call
        )

        if deliver_report(self.store, self.task_id):
            # The last turn ended but its process died before its report reached the parent: deliver it before
            # this turn (whose end would store the next report) starts.
            log.info("task %s: the report of the last turn was owed; delivered now", self.task_id)
            fault_point("after notify")
        gate = ApprovalGate(self.redis, self.lease, record, ctx, tools, self.progress.mark)  # approvals_turn
        if gate.prepare() is Prepared.WAITING:  # a person has still to decide: no drain, no model call
            self._end_waiting(record, gate.note)
            return
        self.progress.mark("drain")
        drained = self.store.drain(self.lease, first_drain=True)
        self.progress.mark("after drain")
        loaded = load_request_history(self.redis, self.task_id)  # reads only from the newest compaction on
        self.view = view = HistoryView(loaded.compaction, loaded.messages)
        if loaded.turn is None or not view.messages:
            log.info("task %s: nothing to do (no messages)", self.task_id)
            return
        current = loaded.turn
        window, limit = self.context.limit_for(record.model, getattr(model, "context_window", None))
        self.compactor = Compactor(view, task_id=self.task_id, window=window, limit=limit,
                                   summarize=lambda request: self._summary_call(model, request),
                                   write=self._write_compaction)
        self.outcome.turn_number = current.turn_number
        set_scope(f"{self.task_id}#{current.turn_number}")
        fault_point("after drain")
        if not drained.messages and is_turn_ending(view.messages[-1]):
            if current.ended_at is None:
                log.info(
                    "task %s: turn %d was answered but not finished; finishing it",
                    self.task_id,
                    shown_turn(current.turn_number),
                )
                self._end_turn(model, record, current, message_text(view.messages[-1].content), "", 0)
            else:
                log.info("task %s: nothing to do", self.task_id)
            return
        self.telemetry.incr("turns_started_total")
        log.info(
            "task %s: turn %d (%s, %d new messages)",
            self.task_id,
            shown_turn(current.turn_number),
            "new" if drained.new_turn else "continued",
            len(drained.messages),
        )

        max_iterations = record.limits.max_iterations
        final_text, note, waiting = "", "", False
        used_ids = used_tool_use_ids(view.messages)  # tool-use ids are unique over the task's history (answers.py)
        for _ in range(max_iterations):
            self._check_cancel()
            system = self.system_prompt_builder(self.store, record)
            try:
                request = ModelRequest(
                    task_id=self.task_id,
                    system=system,
                    messages=self.compactor.fit(system, specs),  # compacts first when the history passes the limit
                    tools=specs,
                    purpose="turn",
                    earlier_answers=view.earlier_answers,
                )
                self.answer_seq = view.messages[-1].seq + 1
                response = self._call_model(model, request)
            except BudgetUsedUp as exc:  # the tree's token budget: no call was made
                note = final_text = str(exc)
                log.info("task %s: %s", self.task_id, note)
                break
            fault_point("after model call")
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
                    self.lease, "user", [text_block(refusal_text(str(exc)))], usage=response.usage
                )
                self._usage_counted()
                view.messages.append(refusal)
                continue
            answer = self.store.append_message(self.lease, "assistant", content, usage=response.usage)
            self._usage_counted()
            fault_point("after answer")
            view.messages.append(answer)
            tool_uses = [block for block in content if "toolUse" in block]
            if not tool_uses:
                final_text = message_text(content)
                break
            if gate.wait(current.turn_number, tool_uses, time.time()) is not None:  # some calls wait for a person
                final_text = note = gate.note
                waiting = True
                break
            self.pending_tool_uses = list(tool_uses)
            while self.pending_tool_uses:
                self._check_cancel()
                block = self.pending_tool_uses[0]
                self.progress.mark(f"tool {block['toolUse'].get('name')}")
                result = run_tool_call(ctx, tools, block)
                self._end_step("after tool")
                self._queue_result(result)
                fault_point("after tool result")
                self.pending_tool_uses.pop(0)
                self.outcome.tool_calls += 1
            self._check_cancel()
            self.progress.mark("drain")
            drained = self.store.drain(self.lease, first_drain=False)
            self.progress.mark("after drain")
            fault_point("after drain")
            view.messages.extend(drained.messages)
        else:
            note = f"stopped after max_iterations={max_iterations} model calls without a text-only answer"
            log.warning("task %s: %s", self.task_id, note)
            last = view.messages[-1]
            final_text = message_text(last.content) if last.role == "assistant" else ""
            final_text = final_text or note
        self._end_turn(model, record, current, final_text, note, self.outcome.iterations, report=not waiting)

    def _usage_counted(self) -> None:
        """The last call's usage is stored (and rolled up on the root): its budget reservation goes back."""
        if self.budget is not None:
            self.budget.release()

    def _call_model(self, model: Model, request: ModelRequest) -> ModelResponse:
        """One model call, once the tree's token budget admits it (BudgetUsedUp: not made). The caller stores its
        usage, then calls ``_usage_counted``."""
        # The model's metrics (model_calls_total, model_tokens_total, model_call_duration_seconds) have one owner,
        # the provider's CallRunner (unicore.providers.calling), so a call is counted once.
        if self.budget is not None:
            self.budget.admit(request)
        self.progress.mark(f"model call ({request.purpose})")
        sink = self._answer_sink(request)
        try:
            response = model.converse(request, sink)
        except (TurnCancelled, ModelError, ConfigError):
            self._usage_counted()  # nothing to count
            raise
        except Exception as exc:  # a provider bug is a model failure of this turn
            self._usage_counted()
            raise ModelError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if sink is not None:
                sink.close()
        self._end_step("after model call")
        if not response.content and request.purpose != "turn":
            raise ModelError("the model returned an empty message")
        return response  # an empty turn answer is refused by accept_answer: the model is told and asked again

    def _answer_sink(self, request: ModelRequest) -> TokenStreamSink | None:
        """The live stream of a turn's model call (``unicore.store.token_stream``); None for summaries or when off."""
        if request.purpose != "turn" or self.live.entries <= 0 or self.outcome.turn_number is None:
            return None
        return TokenStreamSink(self.redis, self.task_id, turn=self.outcome.turn_number,
                               call=self.outcome.iterations, seq=self.answer_seq, settings=self.live)

    def _queue_result(self, result: ContentBlock) -> None:
        tool_id = result["toolResult"]["toolUseId"]
        message = InboxMessage(
            id=tool_result_message_id(tool_id), type="tool_result", content=result, sender=self.task_id,
            tool_use_id=tool_id,
        )
        assert self.lease is not None
        try:
            self.store.queue_own_result(self.lease, message)  # fenced: a zombie's late result is refused
        except MessageTooLarge as exc:
            message.content = tool_result_block(
                tool_id, f"Error: the tool result was too large to keep ({exc})", error=True
            )
            self.store.queue_own_result(self.lease, message)

    def _end_turn(
        self, model: Model, record: TaskRecord, turn: Turn, final_text: str, note: str, iterations: int,
        *, report: bool = True,
    ) -> None:
        """End the turn; ``report`` False (the task waits for a person): its parent is told nothing yet."""
        assert self.lease is not None
        summary = self._summary(model, record, turn) if report else ""
        self.progress.mark("end turn")
        record = self.store.get_task(self.task_id)
        owed = (
            completion_report(record, turn.turn_number, final_text, note, self.store.message_cap_bytes)
            if record.parent and report
            else None
        )
        self.store.end_turn(
            self.lease,
            turn.turn_number,
            last_response=final_text,
            summary=summary,
            iterations=iterations,
            note=note,
            report=owed,
        )
        fault_point("after end turn")
        self.outcome.final_text, self.outcome.note = final_text, note
        deliver_report(self.store, self.task_id)  # owed until delivered: a crash here is redelivered later
        fault_point("after notify")
        log.info("task %s: turn %d ended after %d model calls", self.task_id, shown_turn(turn.turn_number), iterations)

    def _end_waiting(self, record: TaskRecord, note: str) -> None:
        """Still waiting for a person: end the last turn if its process died before it could (nothing else)."""
        assert self.lease is not None
        last = record.turns - 1
        if last >= 0 and not self.store.turn_meta(self.task_id, last).get("ended_at"):
            self.store.end_turn(self.lease, last, last_response=note, note=note)
            self.outcome.turn_number = last
        self.outcome.note = note
        log.info("task %s: still %s", self.task_id, note)

    def _summary(self, model: Model, record: TaskRecord, turn: Turn) -> str:
        enabled = self.summarize
        if enabled is None:
            enabled = record.limits.summarize_turns and self.settings.summarize_turns
        if not enabled or not self.view.turn_messages(turn.turn_number, turn.first_seq):
            return ""
        prompt = {"role": "user", "content": [{"text": SUMMARY_PROMPT}]}
        try:
            if self.compactor is not None:  # the turn's messages fit: compacted first if the history does not
                self.compactor.fit(SUMMARY_SYSTEM, (), [prompt])
            messages = build_request_messages(self.view.turn_messages(turn.turn_number, turn.first_seq))
            messages.append(prompt)
            request = ModelRequest(
                task_id=self.task_id,
                system=SUMMARY_SYSTEM,
                messages=build_request_messages(messages),
                purpose="summary",
                max_tokens=512,
            )
            response = self._summary_call(model, request)
        except (ModelError, ConfigError) as exc:
            log.warning("task %s: turn summary failed: %s", self.task_id, exc)
            return ""
        return message_text(response.content)

    def _summary_call(self, model: Model, request: ModelRequest) -> ModelResponse:
        """A model call with purpose "summary" (the turn's, a compaction's); its usage counts for the task."""
        response = self._call_model(model, request)
        assert self.lease is not None
        self.store.record_usage(self.lease, response.usage)
        self._usage_counted()
        return response

    def _write_compaction(self, record: Compaction) -> bool:
        """Store a compaction record (fenced, append-only); counted once, when it is written."""
        assert self.lease is not None
        written = append_compaction(self.redis, self.lease, record)
        if written:
            self.telemetry.incr("compactions_total")
            log.info("task %s: compacted: messages 1-%d summarized", self.task_id, record.upto)
        fault_point("after compaction")
        return written


def _exit_reason(code: int) -> str:
    return {EXIT_FAILED: "failed", EXIT_LEASE_LOST: "lease_lost", EXIT_CANCELLED: "cancelled"}.get(
        code, str(code)
    )


class _NoSpawner:
    def spawn(self, parent_id: str, name: str, prompt: str, tools: list[str] | None,
              agent: str | None = None) -> tuple[str, bool]:
        from unicore.errors import ToolError

        raise ToolError("spawning is not available in this process")


def _no_spawner() -> Spawner:
    return _NoSpawner()


def run_turn(
    task_id: str,
    *,
    redis: redis.Redis,
    model_factory: ModelFactory | None = None,
    toolset_factory: ToolsetFactory | None = None,
    spawner: Spawner | None = None,
    workspace: Path | None = None,
    cancel: threading.Event | None = None,
    holder: str | None = None,
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
    summarize: bool | None = None,
    system_prompt_builder: SystemPromptBuilder | None = None,
    stall_seconds: float | None = None,
    settings: RuntimeSettings | None = None,
    context: ContextSettings | None = None,
) -> TurnOutcome:
    """Run exactly one turn of ``task_id`` and return its outcome (``exit_code`` as documented above).

    ``redis`` must decode responses. ``spawner`` defaults to the local spawner (Redis + activation).
    ``summarize`` None = ``limits.summarize_turns`` and ``$UNICORE_SUMMARIZE_TURNS`` (default on).
    ``stall_seconds`` None = ``$UNICORE_STALL_SECONDS`` (default 900; ConfigError if malformed): a step
    running longer stops the heartbeat, so the lease expires and the watchdog reaps the hung turn.
    ``settings`` None = the turn's variables (:data:`TURN_SETTINGS`) read from the environment now; ``context``
    None = the context-window variables (``unicore.turn.context_window``) read from the environment now.
    """
    if settings is None:
        settings = RuntimeSettings.from_env(only=TURN_SETTINGS)
    stall = settings.stall_seconds if stall_seconds is None else stall_seconds
    if spawner is None:
        from unicore.launch.local_spawner import LocalSpawner

        spawner = LocalSpawner(TaskStore(redis))
    return _Turn(
        task_id,
        redis,
        model_factory=model_factory or default_model_factory,
        toolset_factory=toolset_factory or default_toolset_factory,
        spawner=spawner,
        workspace=workspace,
        cancel=cancel or threading.Event(),
        holder=holder,
        lease_ttl_ms=lease_ttl_ms,
        summarize=summarize,
        system_prompt_builder=system_prompt_builder or default_system_prompt,
        stall_seconds=stall,
        settings=settings,
        context=context if context is not None else ContextSettings.from_env(),
    ).run()


__all__ = [
    "run_turn",
    "TurnOutcome",
    "completion_message",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_BUSY",
    "EXIT_NOT_FOUND",
    "EXIT_LEASE_LOST",
    "EXIT_CANCELLED",
    "Message",
]
