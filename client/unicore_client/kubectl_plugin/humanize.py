"""Small pure formatters shared by the plugin's views."""

from __future__ import annotations

import datetime
from typing import Any


def parse_time(value: Any) -> datetime.datetime | None:
    """An RFC 3339 string, a unix time or a datetime -> an aware datetime (None if absent or unreadable)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if isinstance(value, int | float):
        return datetime.datetime.fromtimestamp(float(value), tz=datetime.UTC)
    try:
        parsed = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def human_duration(seconds: float | None) -> str:
    """kubectl-like short durations: 42s, 3m5s, 17m, 2h5m, 20h, 3d4h, 12d, 1y20d."""
    if seconds is None:
        return "-"
    total = max(0, int(seconds))
    if total < 120:
        return f"{total}s"
    minutes, hours, days = total // 60, total // 3600, total // 86400
    if minutes < 10:
        return f"{minutes}m{total % 60}s" if total % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"


def human_count(value: Any) -> str:
    """1234 -> 1.2k, 3400000 -> 3.4M; small numbers unchanged; missing -> 0."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError):
        return "?"
    if number < 1000:
        return str(number)
    if number < 1_000_000:
        return f"{number / 1000:.1f}k".replace(".0k", "k")
    return f"{number / 1_000_000:.1f}M".replace(".0M", "M")


def one_line(text: Any, limit: int, *, utf8: bool = True) -> str:
    """``text`` on one line (whitespace collapsed), cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(str(text or "").split())
    if limit <= 0:
        return ""
    if len(flat) <= limit:
        return flat
    ellipsis = "…" if utf8 else "..."
    if limit <= len(ellipsis):
        return flat[:limit]
    return flat[: limit - len(ellipsis)].rstrip() + ellipsis
