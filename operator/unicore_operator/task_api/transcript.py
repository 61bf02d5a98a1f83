"""Transcript pages as pure functions over what Redis returns (turn headers, turn metadata, a message slice).

A page is a contiguous run of messages by ``seq`` (the message's index in the task's append-only history):
``since`` is the first seq wanted, ``next`` the seq to ask for next; ``turn=N`` restricts the run to turn N.
Turn numbers: ``TurnHeader.number`` and the ``turn`` arguments here are Redis's (from 0); what a page shows (a
message's ``turn``, a turn's ``number``) is the user's (from 1, as in the Job ``<task>-tN``):
``unicore.api.turn_numbers``.
Every page is bounded by a message count (``limit``) and by a byte budget; single blocks are clipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from unicore.api.turn_numbers import shown_turn
from unicore.store.compactions import Compaction
from unicore.store.messages import load_message
from unicore.store.records import TurnHeader, TurnMeta

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
PAGE_BYTE_BUDGET = 1024 * 1024
BLOCK_CHARS = 64 * 1024


def turn_range(headers: Sequence[TurnHeader], turn: int, total: int) -> tuple[int, int] | None:
    """[first, end) seqs of turn ``turn`` (Redis's number); None if there is no such turn."""
    for index, header in enumerate(headers):
        if header.number == turn:
            end = headers[index + 1].first_seq if index + 1 < len(headers) else total
            return header.first_seq, max(header.first_seq, end)
    return None


def page_window(
    headers: Sequence[TurnHeader], total: int, *, since: int, limit: int, turn: int | None
) -> tuple[int, int] | None:
    """The [start, stop) seqs to read (stop - start <= limit); None when ``turn`` (Redis's number) does not exist."""
    first, end = 0, total
    if turn is not None:
        found = turn_range(headers, turn, total)
        if found is None:
            return None
        first, end = found
    start = max(since, first)
    stop = min(end, start + limit)
    return start, max(start, stop)


def clip_text(text: str, limit: int = BLOCK_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit:,} more characters clipped by the task API ...]"


def shape_block(block: Mapping[str, Any], tools: bool) -> dict[str, Any]:
    """One content block for the answer: text clipped; tool details kept only when ``tools``."""
    if "text" in block:
        return {"text": clip_text(str(block["text"]))}
    if "toolUse" in block:
        use = block["toolUse"]
        shaped = {"toolUseId": use.get("toolUseId"), "name": use.get("name")}
        if tools:
            shaped["input"] = use.get("input")
        return {"toolUse": shaped}
    if "toolResult" in block:
        result = block["toolResult"]
        shaped_result: dict[str, Any] = {
            "toolUseId": result.get("toolUseId"),
            "status": result.get("status", "success"),
        }
        if tools:
            content = []
            for item in result.get("content") or []:
                if "text" in item:
                    content.append({"text": clip_text(str(item["text"]))})
                elif "json" in item:
                    content.append({"text": clip_text(json.dumps(item["json"], sort_keys=True, default=str))})
            shaped_result["content"] = content
        return {"toolResult": shaped_result}
    return {"other": sorted(block)}


def shape_message(raw: str, tools: bool) -> dict[str, Any]:
    data = load_message(raw).model_dump()  # an undecodable stored message shows as quarantined, never a 500
    return {
        "seq": int(data.get("seq", 0)),
        "turn": shown_turn(int(data.get("turn_number", 0))),
        "role": data.get("role"),
        "timestamp": data.get("timestamp"),
        "content": [shape_block(block, tools) for block in data.get("content") or []],
    }


def turn_info(header: TurnHeader, next_first_seq: int, meta: Mapping[str, str]) -> dict[str, Any]:
    n = header.number
    end = TurnMeta.of(meta, n)
    return {
        "number": shown_turn(n),
        "startedAt": header.started_at,
        "endedAt": end.ended_at,
        "firstSeq": header.first_seq,
        "messageCount": max(0, next_first_seq - header.first_seq),
        "iterations": end.iterations,
        "summary": clip_text(end.summary, 4096),
        "note": end.note,
    }


def build_page(
    *,
    headers: Sequence[TurnHeader],
    meta: Mapping[str, str],
    total: int,
    start: int,
    raw_messages: Sequence[str],
    tools: bool,
    turn: int | None,
    byte_budget: int = PAGE_BYTE_BUDGET,
    raw_compactions: Sequence[str] = (),
) -> dict[str, Any]:
    """The transcript page for messages ``raw_messages`` read from seq ``start`` (``turn``: Redis's number).
    ``compactions``: the records whose mark falls in the page (before the message with seq ``upto``); their summary
    only with ``tools``."""
    messages: list[dict[str, Any]] = []
    used = 0
    for raw in raw_messages:
        shaped = shape_message(raw, tools)
        size = len(json.dumps(shaped))
        if messages and used + size > byte_budget:
            break
        messages.append(shaped)
        used += size
    next_seq = start + len(messages)
    window_end = total
    if turn is not None:
        found = turn_range(headers, turn, total)
        window_end = found[1] if found else start
    touched = {m["turn"] for m in messages}  # as shown
    turns = []
    for index, header in enumerate(headers):
        following = headers[index + 1].first_seq if index + 1 < len(headers) else total
        if shown_turn(header.number) in touched or (turn is not None and header.number == turn):
            turns.append(turn_info(header, following, meta))
    return {
        "since": start,
        "next": next_seq,
        "more": next_seq < window_end,
        "total": total,
        "turnCount": len(headers),
        "turns": turns,
        "messages": messages,
        "compactions": compaction_marks(raw_compactions, start, next_seq, tools),
    }


def compaction_marks(raw: Sequence[str], start: int, stop: int, tools: bool) -> list[dict[str, Any]]:
    """The compaction records whose ``upto`` is a seq in [start, stop): where the page shows a mark."""
    marks = []
    for record in (Compaction.parse(item) for item in raw):
        if record is None or not start <= record.upto < stop:
            continue
        mark: dict[str, Any] = {"upto": record.upto, "createdAt": record.created_at}
        if tools:
            mark["summary"] = clip_text(record.summary)
        marks.append(mark)
    return marks
