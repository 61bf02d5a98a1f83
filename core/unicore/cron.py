"""Cron expressions for schedules (issue 31): parsing and the scheduled times in a time zone, without dependencies.

Five fields, ``minute hour day-of-month month day-of-week``, as Kubernetes CronJob (robfig/cron) and Vixie cron read
them: ``*``, numbers, ranges ``a-b``, lists ``a,b,c``, steps ``*/n``, ``a-b/n`` and ``a/n`` (``a`` to the field's
maximum by ``n``), month names ``jan``..``dec`` and weekday names ``sun``..``sat`` (any case, also in ranges), weekday
``7`` is Sunday, and the macros ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight`` and
``@hourly``. Refused with a :class:`CronError`: ``@every``, ``@reboot``, seconds or year fields, ``?``, ``L``, ``W``,
``#`` and a ``CRON_TZ=``/``TZ=`` prefix (the time zone is the schedule's own field, see :func:`zone`).

Day of month and day of week: when both are restricted a day matches if either does (the Vixie rule); when one of them
is unrestricted only the other counts. A field is unrestricted when it is ``*`` or ``*/1``, as in Kubernetes
(robfig/cron): ``*/2`` restricts (Vixie would call it unrestricted).

Times are local wall-clock times in the schedule's zone. A local time that does not exist (the clock springs forward
over it) is skipped; one that occurs twice (the clock falls back) is scheduled once, at its first occurrence.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

MAX_EXPRESSION_LENGTH = 200
#: How far :meth:`Cron.next_after` looks before it calls an expression one that never matches; long enough for
#: ``0 0 29 2 *`` across 2100, which is no leap year (2096 to 2104).
HORIZON_DAYS = 366 * 10

_UTC = dt.UTC
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# name, lowest, highest for `*` and `a/n`, highest accepted value, names (index + lowest = value)
_FIELDS: tuple[tuple[str, int, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, 59, ()),
    ("hour", 0, 23, 23, ()),
    ("day-of-month", 1, 31, 31, ()),
    ("month", 1, 12, 12, _MONTHS),
    ("day-of-week", 0, 6, 7, _WEEKDAYS),
)
_UNSUPPORTED = (  # Quartz-style extensions: a regular expression for the token, and why it is refused
    (r"\?", "'?' is not supported (use '*')"),
    (r".*#.*", "'#' (nth weekday of the month) is not supported"),
    (r"\d*LW?", "'L' (last day or weekday) is not supported"),
    (r"\d*W", "'W' (nearest weekday) is not supported"),
)


class CronError(ValueError):
    """A cron expression or time zone that cannot be used; the message is one line naming the field and the bad part."""


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression; build it with :meth:`parse`."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # day of month, 1-31
    months: frozenset[int]  # 1-12
    weekdays: frozenset[int]  # 0-6, Sunday 0
    days_restricted: bool  # day-of-month is not `*` (or `*/1`)
    weekdays_restricted: bool  # day-of-week is not `*` (or `*/1`)

    @classmethod
    def parse(cls, expression: str) -> Cron:
        text = expression.strip()
        if not text:
            raise CronError("cron expression is empty")
        if len(text) > MAX_EXPRESSION_LENGTH:
            raise CronError(f"cron expression is longer than {MAX_EXPRESSION_LENGTH} characters")
        if text.upper().startswith(("CRON_TZ=", "TZ=")):
            raise CronError(
                f"a time zone inside the cron expression is not supported, use the time zone field: {text!r}"
            )
        if text.startswith("@"):
            word = text.split()[0].lower()
            if word == "@every":
                raise CronError(f"'@every' intervals are not supported, use e.g. '*/5 * * * *': {text!r}")
            if word == "@reboot":
                raise CronError(f"'@reboot' is not supported by schedules: {text!r}")
            if word not in _MACROS or len(text.split()) != 1:
                known = ", ".join(_MACROS)
                raise CronError(f"unknown cron macro {text!r} (known: {known})")
            fields = _MACROS[word].split()
        else:
            fields = text.split()
        if len(fields) != 5:
            extra = "; seconds and year fields are not supported" if len(fields) > 5 else ""
            raise CronError(
                f"cron expression has {len(fields)} fields, expected 5 "
                f"(minute hour day-of-month month day-of-week){extra}: {text!r}"
            )
        sets = [_parse_field(field, spec, text) for field, spec in zip(fields, _FIELDS, strict=True)]
        return cls(
            expression=expression,
            minutes=sets[0],
            hours=sets[1],
            days=sets[2],
            months=sets[3],
            weekdays=sets[4],
            days_restricted=fields[2] not in ("*", "*/1"),
            weekdays_restricted=fields[4] not in ("*", "*/1"),
        )

    def day_matches(self, day: dt.date) -> bool:
        """Whether ``day`` (a local date) is a scheduled day: its month and the day-of-month/day-of-week rule."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.weekday() + 1) % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return dom or dow
        return dom and dow

    def next_after(self, after: dt.datetime, tz: dt.tzinfo) -> dt.datetime:
        """The first scheduled time strictly after ``after`` (aware, any zone) in zone ``tz``, as an aware UTC datetime.

        Raises :class:`CronError` when nothing matches within :data:`HORIZON_DAYS` (e.g. ``0 0 31 2 *``)."""
        _require_aware(after, "after")
        last_day = after.astimezone(tz).date() + dt.timedelta(days=HORIZON_DAYS)
        for when in self._times(after, tz, last_day):
            return when
        raise CronError(
            f"cron expression never matches (nothing within {HORIZON_DAYS // 366} years): {self.expression!r}"
        )

    def times_between(
        self, start: dt.datetime, end: dt.datetime, tz: dt.tzinfo, limit: int
    ) -> tuple[list[dt.datetime], int]:
        """The scheduled times ``t`` with ``start < t <= end`` and how many there are: ``(times, total)``.

        ``times`` are aware UTC datetimes, ascending, at most ``limit`` of them: the most recent ``limit`` when there
        are more (``total`` counts them all). The cost grows with the number of scheduled times in the window, so a
        caller bounds the window (e.g. by a starting deadline) for frequent schedules over long gaps."""
        _require_aware(start, "start")
        _require_aware(end, "end")
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        recent: deque[dt.datetime] = deque(maxlen=limit)
        total = 0
        if end <= start:
            return [], 0
        last_day = end.astimezone(tz).date() + dt.timedelta(days=1)
        for when in self._times(start, tz, last_day):
            if when > end:
                break
            total += 1
            recent.append(when)
        return list(recent), total

    def _times(self, after: dt.datetime, tz: dt.tzinfo, last_day: dt.date) -> Iterator[dt.datetime]:
        """Scheduled times strictly after ``after`` on local days up to ``last_day``, ascending, as UTC datetimes."""
        local = after.astimezone(tz)
        first_day = day = local.date()
        hours = sorted(self.hours)
        minutes = sorted(self.minutes)
        while day <= last_day:
            if day.month not in self.months:  # jump to the first of the next month
                day = dt.date(day.year + day.month // 12, day.month % 12 + 1, 1)
                continue
            if self.day_matches(day):
                for hour in hours:
                    # a wall time before `after`'s (fold 0, or skipped) is never later than `after`
                    if day == first_day and hour < local.hour:
                        continue
                    for when in _hour_times(day, hour, minutes, tz):
                        if when > after:
                            yield when
            day += dt.timedelta(days=1)


def zone(name: str | None) -> zoneinfo.ZoneInfo:
    """The time zone called ``name`` (an IANA name such as ``Europe/Berlin``); ``""`` or ``None`` is UTC."""
    key = name or "UTC"
    if len(key) > 255:
        raise CronError(f"unknown time zone {key[:40]!r}... (name too long)")
    try:
        return zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown time zone {key!r}") from None


def _require_aware(value: dt.datetime, name: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")


def _hour_times(day: dt.date, hour: int, minutes: list[int], tz: dt.tzinfo) -> list[dt.datetime]:
    """The UTC instants of local ``day`` ``hour``:``minute`` for each of ``minutes``, leaving out wall times that do not
    exist and taking the first occurrence (fold 0) of those that occur twice."""
    top = dt.datetime(day.year, day.month, day.day, hour, tzinfo=tz)
    bottom = top.replace(minute=59)
    if top.utcoffset() == bottom.utcoffset() and _exists(top) and _exists(bottom):  # no change of offset this hour
        top_utc = top.astimezone(_UTC)
        return [top_utc + dt.timedelta(minutes=minute) for minute in minutes]
    times = []
    for minute in minutes:
        local = top.replace(minute=minute)
        if _exists(local):
            times.append(local.astimezone(_UTC))
    return times


def _exists(local: dt.datetime) -> bool:
    """Whether the wall time of ``local`` (fold 0) occurs in its zone, i.e. is not skipped by a spring forward."""
    back = local.astimezone(_UTC).astimezone(local.tzinfo)
    return back.replace(tzinfo=None) == local.replace(tzinfo=None)


def _parse_field(field: str, spec: tuple[str, int, int, int, tuple[str, ...]], text: str) -> frozenset[int]:
    name, low, high, top, names = spec

    def fail(detail: str) -> CronError:
        return CronError(f"cron field {name!r}: {detail} in {text!r}")

    def number(token: str) -> int:
        lowered = token.lower()
        if lowered in names:
            return names.index(lowered) + low
        if not (token.isascii() and token.isdigit()):
            for pattern, why in _UNSUPPORTED:
                if re.fullmatch(pattern, token, re.IGNORECASE):
                    raise fail(why)
            raise fail(f"{token!r} is not a number" + (" or a name" if names else ""))
        value = int(token)
        if not low <= value <= top:
            raise fail(f"{value} is out of range {low}-{top}")
        return value

    values: set[int] = set()
    for part in field.split(","):
        if not part:
            raise fail(f"empty list item in {field!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()):
                raise fail(f"step {step_text!r} in {part!r} is not a number")
            step = int(step_text)
            if step == 0:
                raise fail(f"step 0 in {part!r} must be at least 1")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            start_text, _, end_text = base.partition("-")
            first, last = number(start_text), number(end_text)
            if first > last:
                raise fail(f"range {part!r} goes backwards")
        else:
            first = number(base)
            last = max(high, first) if slash else first
        values.update(range(first, last + 1, step))
    if name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)
