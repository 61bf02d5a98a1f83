"""Readable transcripts of a conversation; bounding that keeps the newest part."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

DEFAULT_TOOL_RESULT_CHARS = 4000


def _as_dict(message: Any) -> Mapping[str, Any]:
    if isinstance(message, BaseModel):
        return message.model_dump()
    if isinstance(message, Mapping):
        return message
    raise TypeError(f"not a message: {type(message).__name__}")


def flatten(history: Iterable[Any]) -> list[Mapping[str, Any]]:
    """Messages in order, from a list of messages or of turns (objects/dicts with ``messages``)."""
    messages: list[Mapping[str, Any]] = []
    for item in history:
        data = _as_dict(item)
        if "role" in data:
            messages.append(data)
        elif "messages" in data:
            messages.extend(_as_dict(message) for message in data["messages"])
    return messages


def _clip(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit:,} more characters ...]"


def _result_text(result: Mapping[str, Any], limit: int | None) -> str:
    parts: list[str] = []
    for item in result.get("content") or []:
        if "text" in item:
            parts.append(str(item["text"]))
        elif "json" in item:
            parts.append(json.dumps(item["json"], sort_keys=True, default=str))
    return _clip("\n".join(parts), limit)


def transcribe(
    history: Iterable[Any],
    include_tool_details: bool = True,
    *,
    tool_result_chars: int | None = DEFAULT_TOOL_RESULT_CHARS,
    include_ids: bool = True,
) -> str:
    """Seed 000 format: ``User: ...`` / ``Assistant: ...`` paragraphs; tool uses with their input JSON and
    tool results when ``include_tool_details``, else ``[Used <name> tool]``. Joined by blank lines. Without
    ``include_ids`` the tool-use ids (random, from the model server) are left out: a child's prompt then depends
    only on what its parent said and did."""
    lines: list[str] = []
    for message in flatten(history):
        role = message.get("role")
        for block in message.get("content") or []:
            if "text" in block:
                speaker = "Assistant" if role == "assistant" else "User"
                lines.append(f"{speaker}: {block['text']}")
            elif "toolUse" in block:
                use = block["toolUse"]
                if include_tool_details:
                    payload = json.dumps(use.get("input"), sort_keys=True, default=str)
                    ident = f" (id {use.get('toolUseId')})" if include_ids else ""
                    lines.append(f"Assistant used tool {use.get('name')}{ident} with input: {payload}")
                else:
                    lines.append(f"[Used {use.get('name')} tool]")
            elif "toolResult" in block and include_tool_details:
                result = block["toolResult"]
                status = result.get("status", "success")
                text = _result_text(result, tool_result_chars)
                ident = f"id {result.get('toolUseId')}, " if include_ids else ""
                lines.append(f"Tool result ({ident}{status}): {text}")
    return "\n\n".join(lines)


def compaction_mark(upto: int) -> str:
    """The line transcripts print where a compaction record starts requests (``unicore.turn.compaction``): the stored
    messages 1..``upto`` (as users count them) are summarized; every message is still shown."""
    return f"── compacted: messages 1-{upto:,} summarized ──"


def omitted_marker(count: int, what: str = "conversation") -> str:
    return f"[... {count:,} earlier characters of the {what} omitted ...]"


def bound_tail(text: str, max_chars: int, what: str = "conversation") -> str:
    """``text`` if it fits in ``max_chars``; else its NEWEST part with a marker saying how much was cut.

    The result (marker included) is at most ``max_chars`` long; the cut moves forward to a paragraph start
    when one is near, so the kept part starts cleanly.
    """
    if len(text) <= max_chars:
        return text
    reserve = len(omitted_marker(len(text), what)) + 2
    keep = max(0, max_chars - reserve)
    start = len(text) - keep
    boundary = text.find("\n\n", start)
    if boundary != -1 and boundary - start < keep // 4:
        start = boundary + 2
    return f"{omitted_marker(start, what)}\n\n{text[start:]}"
