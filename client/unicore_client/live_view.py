"""Live text for followers (``unicore show --follow``, ``kubectl agenttask logs --follow``): the entries of a task's
live token stream (``unicore.store.token_stream``) as text, and stored messages without the text already shown live.

Pure. A follower prints stored messages in seq order and the stream's entries between them: an entry belongs to the
call whose answer will be stored at ``seq``, so it is printed once every stored message before ``seq`` is (the
follower reads those first) and skipped when that answer is already printed (it was stored before the follower
got there). When the answer is then stored, ``visible`` drops the text the stream already showed and keeps the rest
(tool calls). Model text goes through ``unicore.terminal.printable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unicore.terminal import printable

RETRY_MARK = "[retrying: the answer starts again]"
COMMAND_MARK = "[run_command] "  # before a command's live line and output (``output`` entries)


def _field(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name)


class LiveText:
    """Stream entries (``StreamEntry`` objects or the task API's dicts) -> text to print.

    ``lead`` goes before each live answer (a blank line between paragraphs, for the plugin's layout)."""

    def __init__(self, *, lead: str = "") -> None:
        self.lead = lead
        self.streamed: set[int] = set()  # seqs whose answer's text was shown live
        self._call: tuple[int, int] | None = None  # (seq, attempt) of the call being shown
        self._open = False  # a live line is open (no newline after it yet)

    @property
    def open(self) -> bool:
        """Whether the last text printed was live text without its closing newline."""
        return self._open

    def render(self, entry: Any, printed_next: int) -> str:
        """The text for ``entry``, given that stored messages with seq < ``printed_next`` are printed."""
        kind = str(_field(entry, "kind"))
        seq, attempt = int(_field(entry, "seq")), int(_field(entry, "attempt"))
        if kind == "turn_end" or seq < printed_next:
            return ""  # that answer is stored and was printed from the transcript
        out = ""
        if self._call is None or self._call[0] != seq:
            out += self.close_line()
            self._call = (seq, attempt)
        elif attempt > self._call[1]:  # a new try: what the last try wrote is void
            if seq in self.streamed:
                out += self.close_line() + RETRY_MARK + "\n"
            self.streamed.discard(seq)
            self._call = (seq, attempt)
        elif attempt < self._call[1]:
            return out  # a late entry of a void try
        if kind in ("text", "output"):  # an answer's text; a run_command command's line and output
            text = str(_field(entry, "text"))
            if not text:
                return out
            if seq not in self.streamed:
                out += self.lead + ("Assistant: " if kind == "text" else COMMAND_MARK)
                self.streamed.add(seq)
            self._open = not text.endswith("\n")  # a line it ended itself needs no closing newline
            return out + printable(text)
        if kind == "end":
            out += self.close_line()
        return out

    def close_line(self) -> str:
        """A newline when live text is open (before anything else is printed)."""
        if self._open:
            self._open = False
            return "\n"
        return ""

    def visible(self, message: Mapping[str, Any]) -> dict[str, Any] | None:
        """``message`` (a stored message as a dict: seq, role, content) without the text blocks shown live; None
        when nothing is left to print."""
        seq = int(message.get("seq", -1))
        if message.get("role") != "assistant" or seq not in self.streamed:
            return dict(message)
        rest = [block for block in message.get("content") or [] if "text" not in block]
        return {**message, "content": rest} if rest else None


__all__ = ["RETRY_MARK", "LiveText"]
