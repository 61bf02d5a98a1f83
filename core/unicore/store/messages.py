"""Stored messages (``uc:{T}:messages``, written by ``lua.py``) loaded back: ``load_message`` never fails a load.

A message that cannot be decoded (e.g. stored before answers were checked, ``unicore.turn.answers``) is quarantined:
a stand-in keeps its place (seq, turn, role, read from the prefix the store's Lua writes) and says why it was left
out, so the rest of the history loads and the next request is still valid.
"""

from __future__ import annotations

import hashlib
import re

from unicore.api.schema import Message

__all__ = ["load_message", "quarantined_message"]


_HEADER_RE = re.compile(  # the prefix the store's Lua writes before "content" (whitespace tolerated)
    r'^\{\s*"seq":\s*(?P<seq>-?\d+),\s*"turn_number":\s*(?P<turn>-?\d+),\s*"message_number":\s*(?P<num>-?\d+),'
    r'\s*"role":\s*"(?P<role>user|assistant)",\s*"timestamp":\s*(?P<ts>[-0-9.eE+]+),'
)


def quarantined_message(raw: str, error: Exception) -> Message:
    """A stand-in for a stored message that cannot be decoded (e.g. stored before answers were checked).

    The stored bytes stay in Redis untouched; the stand-in keeps the message's place (seq, turn, role) and says
    why it was set aside, so the rest of the history loads and the next request is still valid."""
    digest = hashlib.sha256(raw.encode(errors="replace")).hexdigest()[:12]
    reason = type(error).__name__
    match = _HEADER_RE.match(raw)
    text = f"[quarantined message {digest}: it could not be loaded ({reason}) and was left out]"
    if match is None:
        return Message(role="user", content=[{"text": text}], seq=-1)
    return Message(
        role=match["role"],  # type: ignore[arg-type]
        content=[{"text": text}],
        seq=int(match["seq"]),
        turn_number=int(match["turn"]),
        message_number=int(match["num"]),
        timestamp=float(match["ts"]),
    )


def load_message(raw: str) -> Message:
    """``Message.model_validate_json`` that never raises: an undecodable message is quarantined."""
    try:
        return Message.model_validate_json(raw)
    except (ValueError, RecursionError) as exc:
        return quarantined_message(raw, exc)
