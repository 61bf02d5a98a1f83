"""The Redis throttle coordinator against a real redis-server: limiter maths, multiplier, and 3 real
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.providers.throttle import ThrottleCoordinator, ThrottleLimits, throttle_keys
from unicore.store.keys import METRICS_COUNTERS, METRICS_GAUGES

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


class FakeClock:
    """Milliseconds clock for the Lua scripts; sleeping advances it (no real waiting)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += int(round(seconds * 1000))


def coordinator(client: redis.Redis, clock: FakeClock, **limits: Any) -> ThrottleCoordinator:
    return ThrottleCoordinator(
        client,
        "test-model",
        ThrottleLimits(**limits),
        sleep=clock.sleep,
        uniform=lambda lo, hi: lo,
        clock_ms=clock,
    )


def test_request_limit_sliding_window(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    coord = coordinator(redis_client, clock, max_requests=3, window_seconds=1.0)
    for _ in range(3):
        assert coord.try_acquire(0)[0]
        clock.now += 100
    ok, wait, _, _ = coord.try_acquire(0)  # 3 admitted at +0, +100, +200; now +300
    assert not ok and wait == pytest.approx(0.7)  # the oldest leaves the window at +1000
    clock.now += 700
    assert coord.try_acquire(0)[0]
    ok, wait, _, _ = coord.try_acquire(0)
    assert not ok and wait == pytest.approx(0.1)  # next: the +100 entry leaves at +1100


def test_token_limit_uses_estimates_then_real_usage(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    coord = coordinator(redis_client, clock, max_tokens=100, window_seconds=60)
    first = coord.acquire(60)
    assert first.waited_seconds == 0
    clock.now += 1000
    ok, wait, _, _ = coord.try_acquire(50)
    assert not ok and wait == pytest.approx(59.0)
    coord.commit(first, 30)  # the call really used 30 tokens: 30 + 50 fits
    assert coord.try_acquire(50)[0]
    ok, wait, _, _ = coord.try_acquire(30)
    assert not ok  # 80 used; dropping the first (30) frees enough
    assert wait == pytest.approx(59.0)
    # a single call larger than the whole budget is admitted once the window is empty (never blocks forever)
    clock.now += 60_000
    assert coord.try_acquire(1000)[0]


def test_acquire_waits_with_the_injected_sleeper(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    coord = coordinator(redis_client, clock, max_requests=2, window_seconds=2.0)
    admissions = [coord.acquire() for _ in range(5)]
    times = [a.admitted_at_ms - admissions[0].admitted_at_ms for a in admissions]
    # pairs: 0,0 | 2001,2001 | 4002 (each wait = time to the window edge + 1 ms)
    assert times == [0, 0, 2001, 2001, 4002]
    assert [a.waited_seconds > 0 for a in admissions] == [False, False, True, False, True]
    assert sum(clock.sleeps) == pytest.approx(4.002)


def test_multiplier_rises_on_throttling_decays_on_success(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    coord = coordinator(redis_client, clock, max_requests=4, window_seconds=10.0, cooldown_seconds=0)
    other = coordinator(redis_client, clock, max_requests=4, window_seconds=10.0, cooldown_seconds=0)
    assert coord.multiplier() == 1.0
    assert coord.throttled(2.0) == pytest.approx(1.5)
    assert other.multiplier() == pytest.approx(1.5)  # shared by every coordinator of the model
    # the throttled process's backoff is a pause for everyone
    ok, wait, _, _ = other.try_acquire(0)
    assert not ok and wait == pytest.approx(2.0)
    for expected in (2.25, 3.0, 3.0):
        assert other.throttled(0) == pytest.approx(expected)  # capped at 3x
    clock.now += 2000
    # limits are divided by the multiplier: 4 requests / 3.0 -> 1 per window
    assert coord.try_acquire(0)[0]
    ok, wait, _, _ = coord.try_acquire(0)
    assert not ok and wait == pytest.approx(10.0)
    values = [coord.succeeded() for _ in range(12)]
    assert values[0] == pytest.approx(2.7) and values[1] == pytest.approx(2.43)
    assert values[-1] == 1.0 and all(a >= b for a, b in zip(values, values[1:], strict=False))
    counters = redis_client.hgetall(METRICS_COUNTERS)
    assert float(counters["throttle_events_total|model=test-model"]) == 4
    assert float(str(redis_client.hget(METRICS_GAUGES, "throttle_multiplier|model=test-model"))) == 1.0


def test_multiplier_spaces_calls_without_limits(redis_client: redis.Redis) -> None:
    clock = FakeClock()
    coord = coordinator(redis_client, clock, cooldown_seconds=2.0)  # no rpm/tpm configured
    assert coord.try_acquire(0)[0] and coord.try_acquire(0)[0]  # unlimited while the multiplier is 1
    coord.throttled(0)
    ok, wait, _, _ = coord.try_acquire(0)
    assert not ok and wait == pytest.approx(1.0)  # 2 s x (1.5 - 1) after the last admission
    clock.now += 1000
    assert coord.try_acquire(0)[0]
    ok, wait, _, _ = coord.try_acquire(0)
    assert not ok and wait == pytest.approx(1.0)


def test_keys_share_one_hash_tag_and_expire(redis_client: redis.Redis) -> None:
    keys = throttle_keys("us.anthropic.claude-sonnet-4-20250514-v1:0")
    assert {k.split("}")[0] for k in keys} == {"uc:throttle:{us.anthropic.claude-sonnet-4-20250514-v1:0"}
    clock = FakeClock()
    coord = ThrottleCoordinator(redis_client, "m{x}", ThrottleLimits(max_requests=1), clock_ms=clock)
    coord.try_acquire(5)
    assert all(0 < redis_client.pttl(k) for k in throttle_keys("m{x}"))


def test_redis_outage_lets_calls_through(redis_url: str, tmp_path: Path) -> None:
    dead = redis.Redis(unix_socket_path=str(tmp_path / "nothing.sock"))
    coord = ThrottleCoordinator(dead, "m", ThrottleLimits(max_requests=1))
    admission = coord.acquire(10)
    assert admission.id is None
    coord.commit(admission, 10)
    assert coord.throttled(1.0) == 1.0 and coord.succeeded() == 1.0


WORKER = r"""
import json, sys, time
import redis
from unicore.providers.throttle import ThrottleCoordinator, ThrottleLimits

url, model, limits_json, calls, tokens, name = sys.argv[1:7]
client = redis.Redis.from_url(url)
coord = ThrottleCoordinator(client, model, ThrottleLimits.model_validate_json(limits_json))
client.incr("test:ready")
client.blpop(["test:go"], timeout=60)
records = []
for _ in range(int(calls)):
    admission = coord.acquire(int(tokens))
    called_at = time.time()  # the fake, instant model call
    coord.commit(admission, int(tokens))
    coord.succeeded()
    records.append({"admitted_ms": admission.admitted_at_ms, "called_at": called_at,
                    "waited": admission.waited_seconds, "worker": name})
print(json.dumps(records))
"""


def max_in_window(times: list[float], width: float) -> int:
    """The largest number of ``times`` inside any half-open interval [t, t + width)."""
    ordered = sorted(times)
    best, j = 0, 0
    for i in range(len(ordered)):
        while ordered[i] - ordered[j] >= width:
            j += 1
        best = max(best, i - j + 1)
    return best


@pytest.mark.parametrize(
    ("limits", "calls", "tokens", "per_window"),
    [
        pytest.param({"max_requests": 4, "window_seconds": 0.5}, 8, 10, 4, id="requests-per-window"),
        pytest.param({"max_tokens": 300, "window_seconds": 0.5}, 6, 100, 3, id="tokens-per-window"),
    ],
)
def test_three_processes_sharing_a_limiter_never_exceed_its_rate(
    redis_url: str,
    redis_client: redis.Redis,
    limits: dict[str, Any],
    calls: int,
    tokens: int,
    per_window: int,
) -> None:
    window = limits["window_seconds"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), str(ROOT)])}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                redis_url,
                "shared-model",
                json.dumps(limits),
                str(calls),
                str(tokens),
                f"w{i}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(3)
    ]
    try:
        wait_for(lambda: int(redis_client.get("test:ready") or 0) == 3, timeout=60, what="3 workers ready")
        redis_client.rpush("test:go", *["go"] * 3)
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    records = [r for output in outputs for r in output]
    assert len(records) == 3 * calls
    assert {r["worker"] for r in records} == {"w0", "w1", "w2"}

    # 1. admissions (Redis server clock, ms): no window of the configured length holds more than the limit
    admitted = [r["admitted_ms"] / 1000 for r in records]
    assert max_in_window(admitted, window) == per_window
    # 2. the calls themselves (client clock): shrink the window by the spread of admission->call latency, which
    #    keeps the check exact: calls in [t, t + window - spread) were all admitted within one window
    latency = [r["called_at"] - r["admitted_ms"] / 1000 for r in records]
    spread = max(latency) - min(latency)
    assert spread < window / 2, (
        f"admission-to-call latency spread {spread:.3f}s too large for a meaningful check"
    )
    assert max_in_window([r["called_at"] for r in records], window - spread) <= per_window
    # 3. the limiter really held processes back, and the run lasted as long as the rate demands
    assert any(r["waited"] > 0 for r in records)
    assert max(admitted) - min(admitted) >= (3 * calls / per_window - 1) * window - 0.01
