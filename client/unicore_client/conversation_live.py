"""The agents' live text in ``conv show --follow`` (local mode's ``unicore conv`` and ``kubectl agenttask conv``): the
entries of each participating task's live token stream (``unicore.store.token_stream``) as lines that say whose
answer is being written, and that it is live:

    writer (live): Here is a first dra
    critic (live): Looks good, but
    writer (live): ft of the tagline.

Pure. Only ``text`` entries are shown (the answer deltas of the model call in progress); a ``run_command``
command's ``output`` is not (``unicore show TASK --follow`` shows it). Every new line of live text, and every switch
from one agent to another, starts with ``<name> (live): ``; a new try of a call that had shown text prints
``<name> (live): [retrying: the answer starts again]``. A call's ``end`` closes its line. The conversation's posts
are printed by the caller as they are stored, so an answer shows live while it is written and then once as the
``answered`` post (the caller closes an open live line first: ``close_line``). Model text goes through
``unicore.terminal.printable``, as in ``live_view`` and the post renderers: control characters, ESC and bidi
controls are shown as visible escapes, never raw.

``token_event`` is the ``--json`` form of a text entry: ``{"event": "token", "task", "seq", "attempt", "text"}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from unicore.terminal import printable

from unicore_client.live_view import RETRY_MARK

LIVE_MARK = " (live): "
_LINES = re.compile(r"[^\n]*\n|[^\n]+")  # each line with its newline; the last one without when it has none


def _field(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)


def _number(entry: Any, name: str) -> int:
    try:
        return int(_field(entry, name) or 0)
    except (TypeError, ValueError):
        return 0


def live_prefix(name: str) -> str:
    """``<name> (live): `` (the name escaped as one line)."""
    return printable(name, multiline=False) + LIVE_MARK


class LiveLines:
    """Stream entries of several tasks (``StreamEntry`` objects or the task API's dicts) -> live lines to print."""

    def __init__(self) -> None:
        self._calls: dict[str, tuple[int, int]] = {}  # task -> (seq, attempt) of the call shown last
        self._streamed: set[tuple[str, int]] = set()  # (task, seq) whose answer's text was shown
        self._open: str | None = None  # the task whose live line is open (no newline after it yet)

    @property
    def open(self) -> bool:
        """Whether the last text printed was live text without its closing newline."""
        return self._open is not None

    def close_line(self) -> str:
        """A newline when a live line is open (before anything else is printed)."""
        if self._open is None:
            return ""
        self._open = None
        return "\n"

    def forget(self, task: str) -> str:
        """``task`` no longer followed (it left): its open line is closed."""
        self._calls.pop(task, None)
        self._streamed = {item for item in self._streamed if item[0] != task}
        return self.close_line() if self._open == task else ""

    def render(self, task: str, name: str, entry: Any) -> str:
        """The text for ``entry`` of ``task``'s stream (``name``: how the agent is called on the line)."""
        kind = str(_field(entry, "kind"))
        seq, attempt = _number(entry, "seq"), _number(entry, "attempt")
        if kind not in ("attempt", "text", "end"):
            return ""  # turn_end; a command's output
        out = ""
        call = self._calls.get(task)
        if call is None or call[0] != seq:
            if self._open == task:
                out += self.close_line()
            self._calls[task] = (seq, attempt)
        elif attempt > call[1]:  # a new try: what the last try wrote is void
            if (task, seq) in self._streamed:
                out += self.close_line() + live_prefix(name) + RETRY_MARK + "\n"
            self._streamed.discard((task, seq))
            self._calls[task] = (seq, attempt)
        elif attempt < call[1]:
            return ""  # a late entry of a void try
        if kind == "end":
            return out + (self.close_line() if self._open == task else "")
        text = str(_field(entry, "text") or "") if kind == "text" else ""
        for line in _LINES.findall(text):
            if self._open != task:
                out += self.close_line() + live_prefix(name)
            out += printable(line)
            self._open = None if line.endswith("\n") else task
        if text:
            self._streamed.add((task, seq))
        return out


def token_event(task: str, entry: Any) -> dict[str, Any] | None:
    """The ``--json`` line of a text entry of ``task``'s stream; None for any other entry."""
    if str(_field(entry, "kind")) != "text" or not _field(entry, "text"):
        return None
    return {"event": "token", "task": task, "seq": _number(entry, "seq"), "attempt": _number(entry, "attempt"),
            "text": str(_field(entry, "text"))}


__all__ = ["LIVE_MARK", "LiveLines", "live_prefix", "token_event"]
