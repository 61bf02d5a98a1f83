"""Cron expressions for schedules (issue 31): parsing, refusals, next times across month/year ends, leap days, DST."""

from __future__ import annotations

import datetime as dt

import pytest
from unicore import cron as cron_module
from unicore.cron import Cron, CronError, zone

UTC = dt.UTC
BERLIN = zone("Europe/Berlin")
NEW_YORK = zone("America/New_York")


def utc(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def local(tz: dt.tzinfo, *parts: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=tz, fold=fold)  # type: ignore[misc]


def refusal(expression: str) -> str:
    with pytest.raises(CronError) as caught:
        Cron.parse(expression)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- parsing ---


def test_fields_with_steps_ranges_lists_and_names() -> None:
    cron = Cron.parse("*/15 0-6/2 1,15,31 jan-MAR mon-fri")
    assert cron.minutes == {0, 15, 30, 45}
    assert cron.hours == {0, 2, 4, 6}
    assert cron.days == {1, 15, 31}
    assert cron.months == {1, 2, 3}
    assert cron.weekdays == {1, 2, 3, 4, 5}
    assert cron.expression == "*/15 0-6/2 1,15,31 jan-MAR mon-fri"


def test_start_slash_step_runs_to_the_field_maximum() -> None:
    cron = Cron.parse("5/20 22/1 10/10 Nov/1 3/2")
    assert cron.minutes == {5, 25, 45}
    assert cron.hours == {22, 23}
    assert cron.days == {10, 20, 30}
    assert cron.months == {11, 12}
    assert cron.weekdays == {3, 5}


def test_all_the_names_and_their_case() -> None:
    assert Cron.parse("0 0 1 Jan,FEB,mar,apr,may,jun,jul,aug,sep,oct,nov,DEC *").months == set(range(1, 13))
    assert Cron.parse("0 0 * * SUN,mon,Tue,wed,thu,fri,sat").weekdays == set(range(7))
    assert Cron.parse("0 0 * * sun-sat").weekdays == set(range(7))


def test_weekday_seven_is_sunday() -> None:
    assert Cron.parse("0 0 * * 7").weekdays == {0}
    assert Cron.parse("0 0 * * 5-7").weekdays == {5, 6, 0}
    assert Cron.parse("0 0 * * 0-7").weekdays == set(range(7))
    # 2024-06-09 is a Sunday: a weekday-7 schedule fires on it
    assert Cron.parse("0 12 * * 7").next_after(utc(2024, 6, 5), UTC) == utc(2024, 6, 9, 12)


def test_whitespace_around_and_between_fields() -> None:
    cron = Cron.parse("  0\t12  * *   1 ")
    assert (cron.minutes, cron.hours, cron.weekdays) == ({0}, {12}, {1})


@pytest.mark.parametrize(
    ("macro", "expanded"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros(macro: str, expanded: str) -> None:
    parsed, plain = Cron.parse(macro), Cron.parse(expanded)
    assert parsed.expression == macro
    assert parsed.next_after(utc(2023, 5, 17, 13, 7), UTC) == plain.next_after(utc(2023, 5, 17, 13, 7), UTC)
    fields = ("minutes", "hours", "days", "months", "weekdays", "days_restricted", "weekdays_restricted")
    assert [getattr(parsed, f) for f in fields] == [getattr(plain, f) for f in fields]


def test_macro_times() -> None:
    after = utc(2023, 5, 17, 13, 7)
    assert Cron.parse("@hourly").next_after(after, UTC) == utc(2023, 5, 17, 14)
    assert Cron.parse("@daily").next_after(after, UTC) == utc(2023, 5, 18)
    assert Cron.parse("@weekly").next_after(after, UTC) == utc(2023, 5, 21)  # the next Sunday
    assert Cron.parse("@monthly").next_after(after, UTC) == utc(2023, 6, 1)
    assert Cron.parse("@yearly").next_after(after, UTC) == utc(2024, 1, 1)


# --- refusals ---


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0 25 * * *", "cron field 'hour': 25 is out of range 0-23 in '0 25 * * *'"),
        ("60 * * * *", "cron field 'minute': 60 is out of range 0-59"),
        ("0 0 0 * *", "cron field 'day-of-month': 0 is out of range 1-31"),
        ("0 0 32 * *", "cron field 'day-of-month': 32 is out of range 1-31"),
        ("0 0 * 13 *", "cron field 'month': 13 is out of range 1-12"),
        ("0 0 * * 8", "cron field 'day-of-week': 8 is out of range 0-7"),
        ("0 0 * * 1-9", "cron field 'day-of-week': 9 is out of range 0-7"),
        ("*/0 * * * *", "cron field 'minute': step 0 in '*/0' must be at least 1"),
        ("*/x * * * *", "cron field 'minute': step 'x' in '*/x' is not a number"),
        ("5-2 * * * *", "cron field 'minute': range '5-2' goes backwards"),
        ("0 0 * * fri-mon", "cron field 'day-of-week': range 'fri-mon' goes backwards"),
        ("1,,2 * * * *", "cron field 'minute': empty list item"),
        ("jan * * * *", "cron field 'minute': 'jan' is not a number"),
        ("0 0 * * jan", "cron field 'day-of-week': 'jan' is not a number or a name"),
        ("0 0 * mon *", "cron field 'month': 'mon' is not a number or a name"),
        ("0 0 -1 * *", "cron field 'day-of-month': '' is not a number"),
        ("0 0 ² * *", "cron field 'day-of-month': '²' is not a number"),
        ("0 0 ? * 1", "cron field 'day-of-month': '?' is not supported"),
        ("0 0 L * *", "cron field 'day-of-month': 'L' (last day or weekday) is not supported"),
        ("0 0 15W * *", "cron field 'day-of-month': 'W' (nearest weekday) is not supported"),
        ("0 0 LW * *", "cron field 'day-of-month': 'L' (last day or weekday) is not supported"),
        ("0 0 * * 5L", "cron field 'day-of-week': 'L' (last day or weekday) is not supported"),
        ("0 0 * * 1#2", "cron field 'day-of-week': '#' (nth weekday of the month) is not supported"),
        ("0 0 wed * *", "cron field 'day-of-month': 'wed' is not a number"),  # a name, not a 'W' refusal
    ],
)
def test_bad_fields_name_the_field_and_the_part(expression: str, expected: str) -> None:
    message = refusal(expression)
    assert message.startswith(expected)
    assert repr(expression.strip()) in message


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("", "cron expression is empty"),
        ("   ", "cron expression is empty"),
        ("* " * 101, "longer than 200 characters"),
        ("0 0 * *", "has 4 fields, expected 5"),
        ("0", "has 1 fields, expected 5"),
        ("0 0 0 * * *", "has 6 fields, expected 5 (minute hour day-of-month month day-of-week); seconds"),
        ("0 0 * * * * 2024", "has 7 fields"),
        ("@every 5m", "'@every' intervals are not supported"),
        ("@EVERY 1h", "'@every' intervals are not supported"),
        ("@reboot", "'@reboot' is not supported"),
        ("@fortnightly", "unknown cron macro '@fortnightly'"),
        ("@daily 5", "unknown cron macro '@daily 5'"),
        ("CRON_TZ=Europe/Berlin 0 9 * * *", "a time zone inside the cron expression is not supported"),
        ("TZ=UTC 0 9 * * *", "a time zone inside the cron expression is not supported"),
    ],
)
def test_bad_expressions(expression: str, expected: str) -> None:
    assert expected in refusal(expression)


def test_cron_error_is_a_value_error() -> None:
    assert issubclass(CronError, ValueError)


# --- day of month and day of week ---


def days_matched(expression: str, year: int, month: int) -> list[int]:
    cron = Cron.parse(expression)
    return [d for d in range(1, 32) if _valid(year, month, d) and cron.day_matches(dt.date(year, month, d))]


def _valid(year: int, month: int, day: int) -> bool:
    try:
        dt.date(year, month, day)
    except ValueError:
        return False
    return True


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # September 2023: Fridays are the 1st, 8th, 15th, 22nd, 29th
    assert days_matched("0 0 13 * fri", 2023, 9) == [1, 8, 13, 15, 22, 29]
    assert days_matched("0 0 13 * *", 2023, 9) == [13]
    assert days_matched("0 0 * * fri", 2023, 9) == [1, 8, 15, 22, 29]
    assert days_matched("0 0 1-7 * mon", 2023, 9) == [1, 2, 3, 4, 5, 6, 7, 11, 18, 25]


def test_a_step_restricts_but_star_slash_one_does_not() -> None:
    # as Kubernetes (robfig/cron): `*/1` is unrestricted, `*/2` restricts (so the OR rule applies)
    assert days_matched("0 0 1 * */1", 2023, 9) == [1]
    assert days_matched("0 0 */1 * fri", 2023, 9) == [1, 8, 15, 22, 29]
    assert days_matched("0 0 */10 * fri", 2023, 9) == [1, 8, 11, 15, 21, 22, 29]


def test_month_restricts_the_day_rule() -> None:
    cron = Cron.parse("0 0 13 feb fri")
    assert not cron.day_matches(dt.date(2023, 9, 13)) and not cron.day_matches(dt.date(2023, 9, 15))
    assert cron.day_matches(dt.date(2023, 2, 13)) and cron.day_matches(dt.date(2023, 2, 17))


# --- next_after ---


def test_next_after_is_strictly_after() -> None:
    cron = Cron.parse("30 9 * * *")
    assert cron.next_after(utc(2024, 1, 1, 9, 30), UTC) == utc(2024, 1, 2, 9, 30)
    assert cron.next_after(utc(2024, 1, 1, 9, 29, 59, 999999), UTC) == utc(2024, 1, 1, 9, 30)
    assert cron.next_after(utc(2024, 1, 1, 9, 30, 0, 1), UTC) == utc(2024, 1, 2, 9, 30)


def test_next_after_within_the_same_hour_and_day() -> None:
    cron = Cron.parse("*/10 8-17 * * *")
    assert cron.next_after(utc(2024, 1, 1, 8, 1), UTC) == utc(2024, 1, 1, 8, 10)
    assert cron.next_after(utc(2024, 1, 1, 8, 55), UTC) == utc(2024, 1, 1, 9)
    assert cron.next_after(utc(2024, 1, 1, 17, 50), UTC) == utc(2024, 1, 2, 8)
    assert cron.next_after(utc(2024, 1, 1, 3), UTC) == utc(2024, 1, 1, 8)


def test_next_after_across_month_and_year_ends() -> None:
    assert Cron.parse("0 0 1 * *").next_after(utc(2024, 1, 31, 12), UTC) == utc(2024, 2, 1)
    assert Cron.parse("59 23 31 12 *").next_after(utc(2024, 12, 31, 23, 59), UTC) == utc(2025, 12, 31, 23, 59)
    assert Cron.parse("0 0 1 1 *").next_after(utc(2024, 12, 31, 23, 59), UTC) == utc(2025, 1, 1)
    # the 31st skips the months without one
    assert Cron.parse("0 0 31 * *").next_after(utc(2024, 4, 1), UTC) == utc(2024, 5, 31)
    assert Cron.parse("0 0 31 * *").next_after(utc(2024, 5, 31), UTC) == utc(2024, 7, 31)
    # a month list that wraps into the next year
    assert Cron.parse("0 6 15 mar,sep *").next_after(utc(2024, 9, 20), UTC) == utc(2025, 3, 15, 6)


def test_next_after_leap_days() -> None:
    cron = Cron.parse("0 0 29 2 *")
    assert cron.next_after(utc(2023, 1, 1), UTC) == utc(2024, 2, 29)
    assert cron.next_after(utc(2024, 2, 29), UTC) == utc(2028, 2, 29)
    assert cron.next_after(utc(2096, 3, 1), UTC) == utc(2104, 2, 29)  # 2100 is no leap year


def test_next_after_takes_any_zone_and_answers_in_utc() -> None:
    after = dt.datetime(2024, 1, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))  # 09:00 UTC
    result = Cron.parse("30 9 * * *").next_after(after, UTC)
    assert result == utc(2024, 1, 1, 9, 30) and result.tzinfo is UTC
    # local schedule in Berlin (CET, +1 in January): 09:30 local is 08:30 UTC
    assert Cron.parse("30 9 * * *").next_after(utc(2024, 1, 1, 8), BERLIN) == utc(2024, 1, 1, 8, 30)
    # the local day decides: 23:30 UTC on Dec 31 is already Jan 1 in Berlin
    assert Cron.parse("0 6 1 1 *").next_after(utc(2023, 12, 31, 23, 30), BERLIN) == utc(2024, 1, 1, 5)


def test_next_after_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Cron.parse("* * * * *").next_after(dt.datetime(2024, 1, 1), UTC)


@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 30 feb *", "0 0 31 4,6,9,11 *"])
def test_never_matching_expression(expression: str) -> None:
    cron = Cron.parse(expression)  # each field is valid on its own
    with pytest.raises(CronError, match="never matches"):
        cron.next_after(utc(2024, 1, 1), UTC)
    assert cron.times_between(utc(2024, 1, 1), utc(2026, 1, 1), UTC, 10) == ([], 0)


def test_or_rule_rescues_an_impossible_day_of_month() -> None:
    # the 31st of February never comes, but Mondays in February do (2024-02-05)
    assert Cron.parse("0 0 31 2 mon").next_after(utc(2024, 1, 1), UTC) == utc(2024, 2, 5)


# --- daylight saving time ---


def test_berlin_spring_forward_skips_the_missing_time() -> None:
    # 2024-03-31: 02:00 CET jumps to 03:00 CEST, 02:30 does not exist that day
    cron = Cron.parse("30 2 * * *")
    assert cron.next_after(local(BERLIN, 2024, 3, 30, 3), BERLIN) == utc(2024, 4, 1, 0, 30)
    assert Cron.parse("0 3 * * *").next_after(utc(2024, 3, 30, 12), BERLIN) == utc(2024, 3, 31, 1)
    times, total = Cron.parse("*/30 * * * *").times_between(utc(2024, 3, 31, 0), utc(2024, 3, 31, 2), BERLIN, 10)
    # 01:30 CET (00:30 UTC), then 03:00 CEST (01:00 UTC): no 02:00 or 02:30
    assert times == [utc(2024, 3, 31, 0, 30), utc(2024, 3, 31, 1), utc(2024, 3, 31, 1, 30), utc(2024, 3, 31, 2)]
    assert total == 4


def test_berlin_fall_back_runs_a_repeated_time_once_at_its_first_occurrence() -> None:
    # 2024-10-27: 03:00 CEST falls back to 02:00 CET, 02:30 happens at 00:30 and 01:30 UTC
    cron = Cron.parse("30 2 * * *")
    assert cron.next_after(utc(2024, 10, 26, 12), BERLIN) == utc(2024, 10, 27, 0, 30)
    assert cron.next_after(utc(2024, 10, 27, 0, 30), BERLIN) == utc(2024, 10, 28, 1, 30)
    # from inside the second 02:xx hour the first occurrence is past
    assert cron.next_after(local(BERLIN, 2024, 10, 27, 2, 10, fold=1), BERLIN) == utc(2024, 10, 28, 1, 30)
    times, total = Cron.parse("*/30 * * * *").times_between(utc(2024, 10, 26, 23), utc(2024, 10, 27, 2), BERLIN, 10)
    assert times == [utc(2024, 10, 26, 23, 30), utc(2024, 10, 27, 0), utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 2)]
    assert total == 4


def test_new_york_spring_forward_and_fall_back() -> None:
    # 2024-03-10: 02:00 EST jumps to 03:00 EDT; 2024-11-03: 02:00 EDT falls back to 01:00 EST
    assert Cron.parse("30 2 * * *").next_after(utc(2024, 3, 9), NEW_YORK) == utc(2024, 3, 9, 7, 30)  # 02:30 EST
    assert Cron.parse("30 2 * * *").next_after(utc(2024, 3, 9, 7, 30), NEW_YORK) == utc(2024, 3, 11, 6, 30)  # EDT
    cron = Cron.parse("30 1 * * *")
    assert cron.next_after(utc(2024, 11, 2, 12), NEW_YORK) == utc(2024, 11, 3, 5, 30)  # 01:30 EDT
    assert cron.next_after(utc(2024, 11, 3, 5, 30), NEW_YORK) == utc(2024, 11, 4, 6, 30)  # not 06:30 UTC on the 3rd
    hourly, total = Cron.parse("0 * * * *").times_between(utc(2024, 11, 3, 3), utc(2024, 11, 3, 8), NEW_YORK, 10)
    # 00:00 EDT, 01:00 EDT, (01:00 EST skipped), 02:00 EST, 03:00 EST
    assert hourly == [utc(2024, 11, 3, 4), utc(2024, 11, 3, 5), utc(2024, 11, 3, 7), utc(2024, 11, 3, 8)]
    assert total == 4


def reference(expression: str, start: dt.datetime, end: dt.datetime, tz: dt.tzinfo) -> list[dt.datetime]:
    """Minute by minute in UTC: a minute is scheduled when its local wall time matches and is its first occurrence."""
    cron = Cron.parse(expression)
    found, minute = [], start.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    while minute <= end:
        wall = minute.astimezone(tz)
        if wall.fold == 0 and wall.minute in cron.minutes and wall.hour in cron.hours and cron.day_matches(wall.date()):
            found.append(minute)
        minute += dt.timedelta(minutes=1)
    return found


TRANSITIONS = [  # (zone, a day on which its clocks change)
    ("Europe/Berlin", dt.date(2024, 3, 31)),
    ("Europe/Berlin", dt.date(2024, 10, 27)),
    ("America/New_York", dt.date(2024, 3, 10)),
    ("America/New_York", dt.date(2024, 11, 3)),
    ("Australia/Lord_Howe", dt.date(2024, 4, 7)),  # half an hour back: 02:00 to 01:30
    ("Australia/Lord_Howe", dt.date(2024, 10, 6)),  # half an hour forward: 02:00 to 02:30
    ("UTC", dt.date(2024, 2, 29)),
]


@pytest.mark.parametrize(("tz_name", "day"), TRANSITIONS)
@pytest.mark.parametrize("expression", ["*/7 * * * *", "0,30 1-3 * * *", "15 2 * * sun", "* 0-2 * * *", "59 */3 * * *"])
def test_agrees_with_a_minute_by_minute_reference_across_transitions(
    tz_name: str, day: dt.date, expression: str
) -> None:
    tz = zone(tz_name)
    start = dt.datetime(day.year, day.month, day.day, tzinfo=UTC) - dt.timedelta(days=1, hours=14)
    end = start + dt.timedelta(days=3)
    expected = reference(expression, start, end, tz)
    times, total = Cron.parse(expression).times_between(start, end, tz, 10_000)
    assert times == expected and total == len(expected)
    cron, after, chained = Cron.parse(expression), start, []
    while (following := cron.next_after(after, tz)) <= end:
        chained.append(following)
        after = following
    assert chained == expected


# --- times_between ---


def test_times_between_keeps_the_most_recent_and_counts_all() -> None:
    cron = Cron.parse("0 * * * *")
    times, total = cron.times_between(utc(2024, 1, 1), utc(2024, 1, 2), UTC, 3)
    assert total == 24
    assert times == [utc(2024, 1, 1, 22), utc(2024, 1, 1, 23), utc(2024, 1, 2)]  # start excluded, end included


def test_times_between_edges() -> None:
    cron = Cron.parse("0 * * * *")
    assert cron.times_between(utc(2024, 1, 1, 5), utc(2024, 1, 1, 5), UTC, 5) == ([], 0)
    assert cron.times_between(utc(2024, 1, 1, 6), utc(2024, 1, 1, 5), UTC, 5) == ([], 0)
    assert cron.times_between(utc(2024, 1, 1, 5), utc(2024, 1, 1, 7, 30), UTC, 0) == ([], 2)
    assert cron.times_between(utc(2024, 1, 1, 4, 59), utc(2024, 1, 1, 6), UTC, 5) == (
        [utc(2024, 1, 1, 5), utc(2024, 1, 1, 6)],
        2,
    )
    with pytest.raises(ValueError, match="negative"):
        cron.times_between(utc(2024, 1, 1), utc(2024, 1, 2), UTC, -1)


def test_every_minute_for_a_day_works_an_hour_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[dt.date, int]] = []
    real = cron_module._hour_times

    def counting(day: dt.date, hour: int, minutes: list[int], tz: dt.tzinfo) -> list[dt.datetime]:
        calls.append((day, hour))
        return real(day, hour, minutes, tz)

    monkeypatch.setattr(cron_module, "_hour_times", counting)
    times, total = Cron.parse("* * * * *").times_between(utc(2024, 3, 30, 12), utc(2024, 3, 31, 12), BERLIN, 100)
    # every UTC minute has a wall time of its own (the missing 02:xx wall times have no instant to miss)
    assert total == 24 * 60
    assert times[-1] == utc(2024, 3, 31, 12) and times[0] == utc(2024, 3, 31, 10, 21) and len(times) == 100
    assert len(calls) <= 26
    calls.clear()
    Cron.parse("0 0 29 2 *").next_after(utc(2096, 3, 1), UTC)
    assert calls == [(dt.date(2104, 2, 29), 0)]  # days that cannot match are not looked at hour by hour


# --- time zones ---


def test_zone_names() -> None:
    assert zone(None).key == "UTC" and zone("").key == "UTC"
    assert zone("Europe/Berlin").key == "Europe/Berlin"


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "Europe", "../etc/passwd", "/etc/localtime", " UTC", "x" * 300])
def test_unknown_zone(name: str) -> None:
    with pytest.raises(CronError, match="unknown time zone"):
        zone(name)
    if len(name) < 100:
        with pytest.raises(CronError) as caught:
            zone(name)
        assert str(caught.value) == f"unknown time zone {name!r}"
