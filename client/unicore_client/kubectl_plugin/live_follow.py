"""``kubectl agenttask logs NAME --follow``: the transcript, then the model's answers token by token as they are
written, from the task API's ``stream`` subresource (a long poll, ``task_api/stream.py``), and the stored messages
(tool calls, results, new messages) from ``transcript`` pages, in history order (``unicore_client.live_view``), until
the task settles. Without the right to ``get agenttasks/stream`` (an older role) or with an operator that does not serve
it, ``run`` says so and returns False: the caller then polls the transcript as before."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import IO, Any

from unicore_client.kubectl_plugin.errors import Forbidden, Unreachable
from unicore_client.kubectl_plugin.logs_view import TranscriptPrinter
from unicore_client.kubectl_plugin.proxy import TaskApiClient
from unicore_client.live_view import LiveText

WAIT_SECONDS = 5  # one long poll; a stored message that no live text announces shows within this


class LiveFollower:
    def __init__(self, api: TaskApiClient, *, transcript_path: str, stream_path: str, printer: TranscriptPrinter,
                 out: IO[str], tools: bool, page_size: int,
                 finished: Callable[[Mapping[str, Any]], bool], wait_seconds: int = WAIT_SECONDS) -> None:
        self.api = api
        self.transcript_path = transcript_path
        self.stream_path = stream_path
        self.printer = printer
        self.out = out
        self.tools = tools
        self.page_size = page_size
        self.finished = finished  # (the stream answer's state) -> the task settled
        self.wait_seconds = wait_seconds
        self.live = LiveText(lead="\n")
        self.since = 0  # transcript messages with a smaller seq are printed
        self.printed = 0
        self._written = False

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._written = True

    def print_transcript(self, upto: int) -> None:
        """Print the stored messages with ``since <= seq < upto``, page by page."""
        while self.since < upto:
            page = self.api.get(self.transcript_path, [("since", self.since),
                                                       ("limit", min(self.page_size, upto - self.since)),
                                                       ("tools", self.tools)])
            messages = page.get("messages") or []
            if not messages:
                return
            shown = [m for m in (self.live.visible(message) for message in messages) if m is not None]
            text = self.printer.render({**page, "messages": shown})
            if text and self._written and not text.startswith("\n"):
                text = "\n" + text  # a blank line between paragraphs, as within a page
            self._write(self.live.close_line() + text)
            self.printed += len(messages)
            self.since = int(page.get("next", self.since + len(messages)))

    def show(self, entries: list[Mapping[str, Any]]) -> None:
        for entry in entries:
            if int(entry.get("seq", 0)) > self.since and entry.get("kind") != "turn_end":
                self.print_transcript(int(entry["seq"]))  # the messages before this answer come first
            self._write(self.live.render(entry, self.since))

    def run(self) -> bool:
        """Follow until the task settles; False (nothing printed) when the stream cannot be read."""
        try:
            answer = self.api.get(self.stream_path)
        except (Forbidden, Unreachable) as exc:
            sys.stderr.write(f"note: no live answers ({exc.message}); following the transcript instead\n")
            return False
        while True:
            self.show(answer.get("entries") or [])
            after = str(answer.get("next") or "0")
            if answer.get("more"):
                answer = self.api.get(self.stream_path, [("after", after)])
                continue
            state = answer.get("state") or {}
            self.print_transcript(int(state.get("messages") or 0))
            if not state.get("busy") and self.finished(state):
                self._write(self.live.close_line())
                return True
            answer = self.api.get(self.stream_path, [("after", after), ("wait", self.wait_seconds)])
