"""Progress-aware heartbeat: the stall limit, its env knob, and the heartbeat skipping beats while stalled."""

from __future__ import annotations

import threading

import pytest
from unicore.errors import ConfigError
from unicore.turn.progress import DEFAULT_STALL_SECONDS, Progress, stall_seconds_from_env
from unicore.turn.signals import Heartbeat

from tests.waiting import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_step_is_stalled_only_after_the_limit_and_a_new_mark_resets_it() -> None:
    clock = Clock()
    progress = Progress(10.0, clock=clock)
    progress.mark("model call (turn)")
    clock.now += 10.0
    assert progress.current() == ("model call (turn)", 10.0)
    assert not progress.stalled()
    clock.now += 0.5
    assert progress.stalled()
    progress.mark("after model call")
    assert not progress.stalled() and progress.current() == ("after model call", 0.0)


def test_stall_seconds_from_env() -> None:
    assert stall_seconds_from_env({}) == DEFAULT_STALL_SECONDS == 900.0
    assert stall_seconds_from_env({"UNICORE_STALL_SECONDS": " "}) == 900.0
    assert stall_seconds_from_env({"UNICORE_STALL_SECONDS": "2.5"}) == 2.5
    for bad in ("soon", "0", "-3", "inf", "nan"):
        with pytest.raises(ConfigError, match="UNICORE_STALL_SECONDS"):
            stall_seconds_from_env({"UNICORE_STALL_SECONDS": bad})
    with pytest.raises(ValueError):
        Progress(0)


def test_heartbeat_skips_beats_while_unhealthy_and_resumes_after() -> None:
    healthy = threading.Event()
    beats: list[int] = []
    failures: list[BaseException] = []
    heartbeat = Heartbeat(lambda: beats.append(1), 0.01, failures.append, healthy=healthy.is_set)
    heartbeat.start()
    try:
        wait_for(lambda: heartbeat.skipped >= 5, timeout=10, what="skipped beats while stalled")
        assert beats == [] and heartbeat.beats == 0
        healthy.set()
        wait_for(lambda: len(beats) >= 3, timeout=10, what="beats after progress resumed")
    finally:
        heartbeat.stop()
    assert not failures


def test_heartbeat_reports_a_failing_beat_and_stops() -> None:
    failures: list[BaseException] = []

    def beat() -> None:
        raise RuntimeError("lease gone")

    heartbeat = Heartbeat(beat, 0.01, failures.append)
    heartbeat.start()
    wait_for(lambda: failures, timeout=10, what="the failure callback")
    heartbeat.stop()
    assert [str(f) for f in failures] == ["lease gone"] and heartbeat.beats == 0
