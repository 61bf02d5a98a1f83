"""``kubectl agenttask logs``: transcript pages (from the task API) as text, turn by turn. Pure."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from unicore.terminal import printable
from unicore.turn.transcript import compaction_mark, transcribe

from unicore_client.kubectl_plugin.humanize import human_duration, parse_time


def _clock(value: Any) -> str:
    moment = parse_time(value)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ") if moment else "?"


def turn_banner(turn: Mapping[str, Any]) -> str:
    started, ended = turn.get("startedAt"), turn.get("endedAt")
    when = f"started {_clock(started)}"
    if ended is not None and started is not None:
        when += f", ended after {human_duration(float(ended) - float(started))}"
    elif ended is None:
        when += ", not ended"
    return f"=== turn {turn.get('number')} ({when}) ==="


class TranscriptPrinter:
    """Turns pages into text; remembers the turn last printed so a turn split over pages gets one banner."""

    def __init__(self, *, tools: bool) -> None:
        self.tools = tools
        self.current_turn: int | None = None
        self.turns: dict[int, Mapping[str, Any]] = {}

    def render(self, page: Mapping[str, Any]) -> str:
        for turn in page.get("turns") or []:
            self.turns[int(turn["number"])] = turn
        marks = {int(mark["upto"]): mark for mark in page.get("compactions") or []}
        chunks: list[str] = []
        for message in page.get("messages") or []:
            number = int(message.get("turn", 0))
            if number != self.current_turn:
                self.current_turn = number
                banner = turn_banner(self.turns.get(number, {"number": number}))
                chunks.append(("\n" if chunks or message.get("seq", 0) else "") + banner)
            mark = marks.get(int(message.get("seq", -1)))
            if mark is not None:  # requests start here: the messages before are summarized (all still shown)
                chunks.append(compaction_mark(int(mark["upto"])))
                if self.tools and mark.get("summary"):
                    chunks.append(f"[compaction summary] {mark['summary']}")
            text = transcribe([message], include_tool_details=self.tools, tool_result_chars=None)
            if text:
                chunks.append(text)
        return printable("\n\n".join(chunks)) + ("\n" if chunks else "")

    def summary_line(self, number: int) -> str:
        turn = self.turns.get(number) or {}
        summary = str(turn.get("summary") or "").strip()
        return f"[turn {number} summary] {printable(summary)}\n" if summary else ""
