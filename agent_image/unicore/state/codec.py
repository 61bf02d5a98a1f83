"""Decoding what Redis returns: clients made with ``decode_responses=False`` (the operator's asyncio client, the
metrics collectors' pipelines) get bytes, the others str; every reader goes through these functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def text(value: Any) -> str:
    """``value`` as str: bytes decoded as UTF-8, None as ""."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


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


__all__ = ["text", "text_hash", "to_float", "to_int"]
