"""``unicore show TASK --follow``: after the transcript, what comes next as it comes: the model's answers token by
token from the task's live stream (``unicore.store.token_stream``), the stored messages (tool calls, tool results,
new user messages) in order, until the task settles: no turn running or queued for it or any of its descendants.

The order is the history's: a live answer is printed after every stored message before it
(``unicore_client.live_view``),
its stored message later only with what the stream did not show (tool calls). A new try of a model call (a retried
or cut stream) prints a line saying the answer starts again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import IO, Any

from unicore.api.turn_numbers import shown_turn
from unicore.commands.result import result_lines
from unicore.store.messages import load_message
from unicore.store.reads import busy, read_message_slice
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import StreamEntry, current_call, live_state, read_after
from unicore.terminal import printable

from unicore_client.live_view import LiveText

WAIT_SECONDS = 1.0  # one blocking read of the stream; the task's state is checked between reads


def block_lines(block: dict[str, Any]) -> list[str]:
    """The lines ``unicore show`` prints for one content block (not yet escaped)."""
    if "text" in block:
        return [str(block["text"])]
    if "toolUse" in block:
        use = block["toolUse"]
        return [f"[tool call {use.get('name')} {use.get('toolUseId')}] {json.dumps(use.get('input'))}"]
    if "toolResult" in block:
        result = block["toolResult"]
        items = result.get("content") or []
        shown = result_lines(items[0].get("json")) if len(items) == 1 else None
        if shown is not None:  # a run_command result: how it ended and its output's tails, line by line
            return [f"[tool result {result.get('toolUseId')} {result.get('status', 'success')}] {shown[0]}",
                    *shown[1:]]
        body = " ".join(str(c.get("text", json.dumps(c.get("json")))) for c in result.get("content", []))
        status = result.get("status", "success")
        return [f"[tool result {result.get('toolUseId')} {status}] {body}"]
    return [json.dumps(block)]


def message_text(message: dict[str, Any]) -> str:
    """A stored message as ``unicore show`` prints it (escaped, one line per block, each ending in a newline)."""
    who = "User" if message.get("role") == "user" else "Assistant"
    lines = [line for block in message.get("content") or [] for line in block_lines(block)]
    return "".join(printable(f"{who}: {line}") + "\n" for line in lines)


def tree_busy(store: TaskStore, task_id: str, *, limit: int = 1000) -> bool:
    """Whether the task or one of its descendants (at most ``limit`` looked at) has a turn running or queued."""
    todo, seen = [task_id], 0
    while todo and seen < limit:
        current = todo.pop()
        seen += 1
        if busy(store, current):
            return True
        todo.extend(store.children(current))
    return False


class Follower:
    """Prints one task's live answers and new stored messages to ``out`` until it settles."""

    def __init__(self, store: TaskStore, task_id: str, *, printed_next: int, turn: int | None,
                 out: IO[str] | None = None, wait_seconds: float = WAIT_SECONDS,
                 settled: Callable[[], bool] | None = None) -> None:
        self.store = store
        self.task_id = task_id
        self.printed_next = printed_next  # stored messages with a smaller seq are printed
        self.turn = turn  # the turn (Redis's number) whose messages were printed last
        self.out = out or sys.stdout
        self.wait_seconds = wait_seconds
        self.live = LiveText()
        self.settled = settled or (lambda: not tree_busy(self.store, self.task_id))

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()

    def print_stored(self, upto: int) -> None:
        """Print the stored messages with ``printed_next <= seq < upto``."""
        if upto <= self.printed_next:
            return
        raws = read_message_slice(self.store, self.task_id, self.printed_next, upto)
        chunks = [self.live.close_line()]
        for raw in raws:
            message = load_message(raw)
            if message.turn_number != self.turn:
                self.turn = message.turn_number
                chunks.append(f"\n=== Turn {shown_turn(message.turn_number)} ===\n")
            shown = self.live.visible(message.model_dump(mode="json"))
            if shown is not None:
                chunks.append(message_text(shown))
        self.printed_next += len(raws)
        self._write("".join(chunks))

    def show(self, entries: list[StreamEntry]) -> None:
        for entry in entries:
            if entry.seq > self.printed_next and entry.kind != "turn_end":
                self.print_stored(entry.seq)  # the messages before this answer come first
            self._write(self.live.render(entry, self.printed_next))

    def run(self) -> None:
        entries, after = current_call(self.store, self.task_id)
        while True:
            # The state first, then the stream up to now: a call's entries (its end included) are written before
            # its answer is stored, so every live text of the messages counted here is read before they are printed.
            state = live_state(self.store, self.task_id)
            while more := read_after(self.store, self.task_id, after):
                entries += more
                after = more[-1].id
            self.show(entries)
            self.print_stored(state.messages)
            if not state.busy and self.settled():
                self._write(self.live.close_line())
                return
            entries = read_after(self.store, self.task_id, after, wait_seconds=self.wait_seconds)
            if entries:
                after = entries[-1].id


__all__ = ["Follower", "block_lines", "message_text", "tree_busy"]
