"""``unicore conv show NAME --follow``: new posts as they are stored and, while they are written, the answers of the
participating agents from their tasks' live token streams (``unicore.store.token_stream``; the lines:
``unicore_client.conversation_live``), until the conversation is closed (or ``--timeout``, or Ctrl-C).

One loop, in rounds: the participants are read (a task that joins is followed from its call in progress, one that
leaves is no longer followed), each present task's stream is read up to now and printed, then the posts after the
last one printed. A call's entries, its end included, are written before its answer is stored and posted, so an
answer's live text comes before its ``answered`` post. Between rounds the follower waits at most ``poll_seconds``:
on the stream of a task that is busy (a blocking read, so its text shows as it comes), else plainly.
``tokens=False`` (``--no-tokens``): posts only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO

from unicore import conversations as rules
from unicore.store import conversations
from unicore.store.tasks import TaskStore
from unicore.store.token_stream import StreamEntry, current_call, live_state, read_after
from unicore.terminal import printable

from unicore_client.conversation_live import LiveLines

POLL_SECONDS = 0.3  # the longest wait between rounds
CATCH_UP_READS = 8  # stream reads of one task per round, at most (each up to READ_COUNT entries)
LABELS = {"answer": "answered", "post": "posted", "note": "note", "joined": "joined", "left": "left"}


def post_line(item: rules.Post) -> str:
    """``#<seq> <who> <what>: <text>`` (escaped, without the newline): a person by name, a task as ``<name>
    (agent)``."""
    who = {"user": item.sender, "task": f"{item.sender} (agent)"}.get(item.sender_kind, "-")
    what = LABELS.get(item.kind, item.kind)
    return f"#{item.seq} {printable(who, multiline=False)} {printable(what, multiline=False)}: {printable(item.text)}"


class ConversationFollower:
    """Prints a conversation's new posts and its agents' live text to ``out`` (module doc)."""

    def __init__(self, store: TaskStore, name: str, *, after: int, out: IO[str] | None = None, tokens: bool = True,
                 poll_seconds: float = POLL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.name = name
        self.after = after  # posts with a seq up to this one are printed
        self.out = out or sys.stdout
        self.tokens = tokens
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.sleep = sleep
        self.live = LiveLines()
        self.cursors: dict[str, str] = {}  # followed task -> the stream entry id read up to
        self.names: dict[str, str] = {}  # followed task -> its name on a live line
        self.pending: dict[str, list[StreamEntry]] = {}  # entries read while waiting, not printed yet

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()

    def sync_participants(self) -> None:
        """Follow the tasks that take part now: a new one from its call in progress; forget those that left."""
        members = conversations.members(self.store, self.name)
        present = {m.id: m.name for m in members if m.kind == "task" and not m.left}
        for task in [task for task in self.cursors if task not in present]:
            self._write(self.live.forget(task))
            del self.cursors[task]
            self.pending.pop(task, None)
        for task, name in present.items():
            self.names[task] = name
            if task not in self.cursors:
                entries, self.cursors[task] = current_call(self.store, task)
                self.pending[task] = entries

    def print_tokens(self) -> None:
        """Each followed task's stream up to now (what a wait read first)."""
        for task, after in self.cursors.items():
            entries = self.pending.pop(task, [])
            for _ in range(CATCH_UP_READS):
                more = read_after(self.store, task, after)
                if not more:
                    break
                entries += more
                after = more[-1].id
            self.cursors[task] = after
            self._write("".join(self.live.render(task, self.names[task], entry) for entry in entries))

    def print_posts(self) -> None:
        items = conversations.posts(self.store, self.name, after=self.after)
        if items:
            self._write(self.live.close_line() + "".join(post_line(item) + "\n" for item in items))
            self.after = items[-1].seq

    def wait(self, seconds: float) -> None:
        """Up to ``seconds``: on the stream of a busy task (its next entries are printed next round), else a sleep."""
        busy = [task for task in self.cursors if live_state(self.store, task).busy]
        if not busy or int(seconds * 1000) < 1:  # (a blocking read of 0 ms would wait for ever)
            self.sleep(seconds)
            return
        task = busy[0]
        entries = read_after(self.store, task, self.cursors[task], wait_seconds=seconds)
        if entries:
            self.pending[task] = self.pending.get(task, []) + entries
            self.cursors[task] = entries[-1].id

    def run(self, timeout: float | None = None) -> None:
        """Follow until the conversation is closed or ``timeout`` seconds have passed (Ctrl-C: the caller's)."""
        deadline = None if timeout is None else self.clock() + timeout
        try:
            while True:
                if self.tokens:
                    self.sync_participants()
                    self.print_tokens()
                self.print_posts()
                if conversations.read_meta(self.store, self.name).status == "closed":
                    return
                left = self.poll_seconds if deadline is None else min(self.poll_seconds, deadline - self.clock())
                if left <= 0:
                    return
                self.wait(left)
        finally:
            self._write(self.live.close_line())


__all__ = ["ConversationFollower", "post_line"]
