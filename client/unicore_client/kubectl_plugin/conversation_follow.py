"""``kubectl agenttask conv show NAME --follow``: new posts as they are stored (the long poll of the task API's
``conversations/<name>/posts``) and, while they are written, the participating agents' answers from their tasks'
``stream`` subresource (``task_api/stream.py``, as ``kubectl agenttask logs --follow`` reads it; the lines:
``unicore_client.conversation_live``), until the conversation is closed (or ``--timeout``, or Ctrl-C).

One loop, in rounds: each present task participant's stream is read up to now (the first read without ``after``:
its call in progress), then the posts after the last one printed. When a participant is busy (a turn running or
queued) the posts are read without waiting and the round waits instead on that task's stream for about a second
(long polls, ``wait`` 1 s: its text shows as it comes, and the other reads happen about once a second, not once per
batch of text); else the round waits on the posts (``wait`` up to 20 s). A call's entries are written
before its answer is stored and posted, so an answer's live text comes before its ``answered`` post. A ``joined``
or ``left`` post reads the participants again. A participant whose stream cannot be read (no right to ``get
agenttasks/stream``, an operator that does not serve it, a task deleted) is followed no more: one note on stderr,
and its posts still come. ``--json``: one JSON object a line, the posts as the task API gives them and each text
entry as ``{"event": "token", "task", "seq", "attempt", "text"}``; ``--no-tokens``: posts only.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from unicore.terminal import printable

from unicore_client.conversation_live import LiveLines, token_event
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.proxy import TaskApiClient, conversation_path, task_path

WAIT_SECONDS = 20  # one long poll of the posts (the server holds it at most 30 s; the API server allows 60 s)
BUSY_WAIT_SECONDS = 1  # one long poll of a busy participant's stream (posts then show within this)
CATCH_UP_READS = 8  # stream reads of one task per round while the answer says there is more


def present_tasks(participants: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The task participants that have not left: task id (``<namespace>/<name>``) -> name."""
    return {str(m.get("id") or ""): str(m.get("name") or m.get("id") or "")
            for m in participants if m.get("kind") == "task" and not m.get("left") and m.get("id")}


class ConversationFollower:
    """Prints a conversation's new posts and its agents' live text to ``out`` (module doc)."""

    def __init__(self, api: TaskApiClient, namespace: str, name: str, *, after: int,
                 participants: Sequence[Mapping[str, Any]], out: IO[str],
                 render_post: Callable[[Mapping[str, Any]], str], as_json: bool = False, tokens: bool = True,
                 wait_seconds: int = WAIT_SECONDS, busy_wait_seconds: int = BUSY_WAIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.after = after  # posts with a seq up to this one are printed
        self.out = out
        self.render_post = render_post
        self.as_json = as_json
        self.tokens = tokens
        self.wait_seconds = wait_seconds
        self.busy_wait_seconds = busy_wait_seconds
        self.clock = clock
        self.live = LiveLines()
        self.streams: dict[str, str | None] = {}  # followed task -> the entry id read up to (None: not read yet)
        self.names: dict[str, str] = {}
        self.unreadable: set[str] = set()
        if tokens:
            self.set_participants(participants)

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()

    def set_participants(self, participants: Sequence[Mapping[str, Any]]) -> None:
        present = present_tasks(participants)
        for task in [task for task in self.streams if task not in present]:
            self._write(self.live.forget(task))
            del self.streams[task]
        for task, name in present.items():
            if task not in self.unreadable:
                self.names[task] = name
                self.streams.setdefault(task, None)

    def stream_path(self, task: str) -> str:
        namespace, _, name = task.rpartition("/")
        return task_path(namespace or self.namespace, name, "stream")

    def show(self, task: str, entries: Sequence[Mapping[str, Any]]) -> None:
        if self.as_json:
            events = [event for event in (token_event(task, entry) for entry in entries) if event is not None]
            self._write("".join(json.dumps(event) + "\n" for event in events))
        else:
            self._write("".join(self.live.render(task, self.names[task], entry) for entry in entries))

    def read_stream(self, task: str, wait: int = 0) -> bool:
        """Print ``task``'s entries after its cursor (``wait``: a long poll for the first); whether it is busy."""
        for _ in range(CATCH_UP_READS):
            after = self.streams[task]
            query: list[tuple[str, Any]] = [] if after is None else [("after", after)]
            if wait and after is not None:
                query.append(("wait", wait))
            try:
                answer = self.api.get(self.stream_path(task), query)
            except PluginError as exc:
                sys.stderr.write(printable(f"note: no live answers of {task} ({exc.message}); its posts still come",
                                           multiline=False) + "\n")
                self.unreadable.add(task)
                del self.streams[task]
                self._write(self.live.forget(task))
                return False
            self.show(task, answer.get("entries") or [])
            self.streams[task] = str(answer.get("next") or after or "0")
            if not answer.get("more"):
                return bool((answer.get("state") or {}).get("busy"))
            wait = 0
        return True

    def print_posts(self, wait: int | None) -> str | None:
        """Print the posts after the last one printed (``wait``: a long poll); the conversation's status."""
        query: list[tuple[str, Any]] = [("after", self.after)]
        if wait is not None:
            query.append(("wait", wait))
        answer = self.api.get(conversation_path(self.namespace, self.name, "posts"), query)
        posts = answer.get("posts") or []
        if posts:
            self._write(self.live.close_line() + "".join(
                json.dumps(post) + "\n" if self.as_json else self.render_post(post) for post in posts))
            self.after = max([self.after, *(int(post.get("seq") or 0) for post in posts)])
        if self.tokens and any(post.get("kind") in ("joined", "left") for post in posts):
            conversation = self.api.get(conversation_path(self.namespace, self.name), [("after", self.after)])
            self.set_participants(conversation.get("participants") or [])
        status = answer.get("status")
        return None if status is None else str(status)

    def run(self, timeout: float | None = None) -> None:
        """Follow until the conversation is closed or ``timeout`` seconds have passed (Ctrl-C: the caller's)."""
        deadline = None if timeout is None else self.clock() + timeout

        def seconds(limit: int) -> int | None:  # a wait within the deadline; None: the deadline passed
            left = None if deadline is None else deadline - self.clock()
            if left is not None and left <= 0:
                return None
            return limit if left is None else max(1, min(limit, math.ceil(left)))

        try:
            while True:
                busy = [task for task in list(self.streams) if self.read_stream(task)]
                wait = seconds(self.wait_seconds)
                if wait is None:
                    return
                if self.print_posts(None if busy else wait) == "closed":
                    return
                until = self.clock() + self.busy_wait_seconds
                while busy and busy[0] in self.streams and self.clock() < until:  # its text as it comes
                    wait = seconds(self.busy_wait_seconds)
                    if wait is None:
                        return
                    if not self.read_stream(busy[0], wait):
                        break  # its call ended: its answer may be posted now
        finally:
            self._write(self.live.close_line())


__all__ = ["BUSY_WAIT_SECONDS", "WAIT_SECONDS", "ConversationFollower", "present_tasks"]
