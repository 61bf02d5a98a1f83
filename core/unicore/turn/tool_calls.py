"""The tool calls of the turn's answer: run one at a time in order, each result queued on the task's inbox, fenced
by the lease (a zombie's late result is refused). The calls a cancelled turn leaves unanswered get "Cancelled"
results, so the next model request still pairs every call with a result."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from unicore.api.schema import ContentBlock, InboxMessage, tool_result_block, tool_result_message_id
from unicore.errors import MessageTooLarge
from unicore.store.tasks import TaskStore
from unicore.tools.base import Tool, ToolContext
from unicore.tools.registry import run_tool_call
from unicore.turn.checkpoints import Checkpoints
from unicore.turn.history import CANCELLED_TEXT
from unicore.turn.lease import TurnLease
from unicore.turn.outcome import TurnOutcome


class ToolCalls:
    """The tool calls of one turn; ``check_cancel`` (a safe point) raises when the turn must stop, ``outcome``
    counts the calls made."""

    def __init__(self, store: TaskStore, lease: TurnLease, checkpoints: Checkpoints, outcome: TurnOutcome,
                 check_cancel: Callable[[], None]) -> None:
        self.store = store
        self.lease = lease
        self.checkpoints = checkpoints
        self.outcome = outcome
        self.check_cancel = check_cancel
        self.pending: list[ContentBlock] = []  # tool calls of the last answer still without a result

    def run(self, ctx: ToolContext, tools: Sequence[Tool], tool_uses: Sequence[ContentBlock]) -> None:
        """Run the answer's ``tool_uses`` in order, each result queued before the next call starts."""
        self.pending = list(tool_uses)
        while self.pending:
            self.check_cancel()
            block = self.pending[0]
            self.checkpoints.begin(f"tool {block['toolUse'].get('name')}")
            result = run_tool_call(ctx, tools, block)
            self.checkpoints.end("after tool")
            self.queue_result(result)
            self.checkpoints.fault_point("after tool result")
            self.pending.pop(0)
            self.outcome.tool_calls += 1

    def cancel_pending(self) -> None:
        """The turn was cancelled: each call still without a result gets a "Cancelled" one."""
        for block in self.pending:
            self.queue_result(tool_result_block(block["toolUse"]["toolUseId"], CANCELLED_TEXT, error=True))

    def queue_result(self, result: ContentBlock) -> None:
        tool_id = result["toolResult"]["toolUseId"]
        message = InboxMessage(
            id=tool_result_message_id(tool_id), type="tool_result", content=result, sender=self.outcome.task_id,
            tool_use_id=tool_id,
        )
        lease = self.lease.held
        try:
            self.store.queue_own_result(lease, message)  # fenced: a zombie's late result is refused
        except MessageTooLarge as exc:
            message.content = tool_result_block(
                tool_id, f"Error: the tool result was too large to keep ({exc})", error=True
            )
            self.store.queue_own_result(lease, message)
