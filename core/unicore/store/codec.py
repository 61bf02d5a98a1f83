"""Text to and from Redis: the one owner of what the state package writes as text and how it reads replies back.

Writing: every text that reaches Redis is valid Unicode, whatever a model, a tool, an MCP server or a person sent.
A lone surrogate (``"\\ud800"``: JSON escapes decode to them, and Python turns undecodable command-line bytes into
them) cannot be encoded as UTF-8, and Python's ``json.dumps`` writes it as a ``\\ud800`` escape that Redis' cjson
refuses ("invalid unicode escape code"): one such answer stored failed every later turn of its task. So

- ``dumps`` is how the state package writes JSON: ``valid`` text first (``valid_text``: every lone surrogate becomes
  U+FFFD; a surrogate pair is joined into its character), then ``json.dumps``;
- every client ``state.client`` builds encodes plain string values (task fields, answers' texts, the live stream)
  with the ``ENCODING_ERRORS`` handler, which writes ``valid_text`` of what UTF-8 cannot encode, and decodes a reply
  that is not UTF-8 with U+FFFD in place of the bad bytes (instead of failing the read).

Reading: clients made with ``decode_responses=False`` (the operator's asyncio client, the metrics collectors'
pipelines) get bytes, the others str; every reader goes through ``text`` and the functions below it."""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

T = TypeVar("T")

REPLACEMENT = "\ufffd"
ENCODING_ERRORS = "unicore-valid-text"  # the codec error handler of every client state.client builds


def valid_text(value: str) -> str:
    """``value`` as valid Unicode (what UTF-8 and cjson accept): every lone surrogate replaced by U+FFFD, a surrogate
    pair (two code units) joined into its character. ``value`` itself when it is valid already (the common case)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def valid(value: T) -> T:
    """``value`` (anything ``json.dumps`` takes) with all its text valid (``valid_text``, keys included): ``value``
    itself when it is, else a copy (as JSON decodes it)."""
    written = json.dumps(value, ensure_ascii=False)
    fixed = valid_text(written)
    return value if fixed is written else json.loads(fixed)  # type: ignore[no-any-return]


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps(valid(value), **options)``: the JSON text the state package stores (module doc)."""
    return json.dumps(valid(value), **options)


def model_json(model: BaseModel) -> str:
    """A pydantic model's compact JSON as stored (``model_dump_json`` fails on a lone surrogate; this writes U+FFFD)."""
    return dumps(model.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))


def _valid_text_errors(error: UnicodeError) -> tuple[str | bytes, int]:
    """The ``ENCODING_ERRORS`` handler: ``valid_text`` of what UTF-8 cannot encode (as UTF-8 bytes: the encoder takes
    only ASCII text from a handler); U+FFFD for bytes it cannot decode."""
    if isinstance(error, UnicodeEncodeError):
        return valid_text(error.object[error.start:error.end]).encode("utf-8"), error.end
    if isinstance(error, UnicodeDecodeError):
        return REPLACEMENT, error.end
    raise error


codecs.register_error(ENCODING_ERRORS, _valid_text_errors)


def text(value: Any) -> str:
    """``value`` as str: bytes decoded as UTF-8 (bad bytes as U+FFFD), None as ""."""
    if value is None:
        return ""
    return value.decode("utf-8", ENCODING_ERRORS) if isinstance(value, bytes) else str(value)


def text_hash(raw: Mapping[Any, Any] | None) -> dict[str, str]:
    """A hash reply with keys and values as str."""
    return {text(key): text(value) for key, value in (raw or {}).items()}


def to_int(value: Any, default: int = 0) -> int:
    """A stored number (bytes, str, int or float; "3" and "3.0" alike) as int; ``default`` when it is not one."""
    try:
        return int(float(text(value)))
    except (TypeError, ValueError):
        return default


def to_float(value: Any) -> float:
    """A stored number as float; 0.0 when it is not one."""
    try:
        return float(text(value))
    except (TypeError, ValueError):
        return 0.0


__all__ = ["ENCODING_ERRORS", "REPLACEMENT", "dumps", "model_json", "text", "text_hash", "to_float", "to_int", "valid",
           "valid_text"]
