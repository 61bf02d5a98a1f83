"""The Redis client builder (unicore.store.client): retries within a bounded time, configuration, options.

The turn-level behaviour (a blip in the middle of a turn) is tested against a real redis-server in
tests/integration/test_redis_blips.py; here the "server" is a unix socket that accepts and drops every
connection, so each attempt fails at once and the attempts can be counted.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from unicore.errors import ConfigError
from unicore.store.client import (
    AsyncBoundedRetry,
    BoundedRetry,
    build_async_client,
    build_client,
    client_options,
    retry_seconds,
)
from unicore.store.tasks import connect


@dataclass
class DroppingServer:
    path: Path
    accepted: int = 0

    @property
    def url(self) -> str:
        return f"unix://{self.path}"


@pytest.fixture
def dropping_server() -> Iterator[DroppingServer]:
    folder = Path(tempfile.mkdtemp(prefix="uc-drop-"))
    server = DroppingServer(folder / "drop.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(server.path))
    listener.listen(64)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            server.accepted += 1
            conn.close()

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    yield server
    stop.set()
    worker.join(5)
    listener.close()
    server.path.unlink(missing_ok=True)
    folder.rmdir()


def test_a_failing_command_is_retried_until_the_budget_is_spent(dropping_server: DroppingServer) -> None:
    client = build_client(dropping_server.url, retry_for=0.8)
    began = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    elapsed = time.monotonic() - began
    assert 0.75 <= elapsed < 5, elapsed  # bounded by the budget (plus one attempt), not by a count
    assert dropping_server.accepted >= 3  # it did reconnect and retry, with backoff in between


def test_a_zero_budget_fails_on_the_first_attempt(dropping_server: DroppingServer) -> None:
    client = build_client(dropping_server.url, retry_for=0)
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert dropping_server.accepted == 1


def test_the_async_client_retries_the_same_way(dropping_server: DroppingServer) -> None:
    async def ping_once() -> float:
        client = build_async_client(dropping_server.url, retry_for=0.8)
        began = time.monotonic()
        try:
            with pytest.raises(redis.ConnectionError):
                await client.ping()
            return time.monotonic() - began
        finally:
            await client.aclose()  # type: ignore[attr-defined]

    elapsed = asyncio.run(ping_once())
    assert 0.75 <= elapsed < 5, elapsed
    assert dropping_server.accepted >= 3


def test_no_server_at_all_is_retried_within_the_budget(tmp_path: Path) -> None:
    client = build_client(f"unix://{tmp_path}/nothing.sock", retry_for=0.5)
    began = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    assert 0.45 <= time.monotonic() - began < 5


def test_the_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNICORE_REDIS_RETRY_SECONDS", raising=False)
    assert retry_seconds() == 30.0
    monkeypatch.setenv("UNICORE_REDIS_RETRY_SECONDS", "7.5")
    client = connect("redis://localhost:1/0")  # nothing is contacted until a command runs
    retry = client.connection_pool.connection_kwargs["retry"]
    assert isinstance(retry, BoundedRetry) and retry.seconds == 7.5
    for bad in ("soon", "-1"):
        monkeypatch.setenv("UNICORE_REDIS_RETRY_SECONDS", bad)
        with pytest.raises(ConfigError, match="UNICORE_REDIS_RETRY_SECONDS"):
            connect("redis://localhost:1/0")


def test_connection_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICORE_REDIS_SOCKET_TIMEOUT", "12")
    tcp = client_options("redis://redis:6379/0", retry_for=1)
    assert tcp["socket_timeout"] == 12 and tcp["socket_keepalive"] is True
    assert tcp["health_check_interval"] > 0 and tcp["socket_connect_timeout"] > 0
    assert tcp["retry_on_error"] == [redis.ConnectionError, redis.TimeoutError]
    assert "socket_keepalive" not in client_options("unix:///tmp/r.sock", retry_for=1)  # TCP only
    client = connect("redis://redis:6379/0")
    assert client.connection_pool.connection_kwargs["decode_responses"] is True
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 12


class Flaky:
    """An operation that fails with ConnectionError ``failures`` times, then returns "ok"."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise redis.ConnectionError(f"down (attempt {self.calls})")
        return "ok"


def _ignore(_error: Exception) -> None:
    return None


def test_a_nested_retrying_call_makes_one_attempt_and_the_outermost_loop_retries() -> None:
    """redis-py nests retries (a command's retry -> reconnect -> health-check PING's retry -> reconnect -> ...):
    one loop per call, or the nesting recursed once per failed attempt (tests/integration/test_redis_blips.py)."""
    retry = BoundedRetry(5, NoBackoff())
    inner = Flaky(2)
    outer_calls = 0
    cleaned_up: list[str] = []

    def outer() -> str:
        nonlocal outer_calls
        outer_calls += 1
        return retry.call_with_retry(inner, lambda error: cleaned_up.append(str(error)))

    assert retry.call_with_retry(outer, _ignore) == "ok"
    assert (outer_calls, inner.calls) == (3, 3)  # each inner failure went up to the outer loop
    assert cleaned_up == ["down (attempt 1)", "down (attempt 2)"]  # the inner level's clean-up still ran


def test_the_async_retry_nests_the_same_way() -> None:
    retry = AsyncBoundedRetry(5, NoBackoff())
    inner = Flaky(2)
    outer_calls = 0

    async def attempt() -> str:
        return inner()

    async def outer() -> str:
        nonlocal outer_calls
        outer_calls += 1
        return await retry.call_with_retry(attempt, _async_ignore)

    assert asyncio.run(retry.call_with_retry(outer, _async_ignore)) == "ok"
    assert (outer_calls, inner.calls) == (3, 3)


async def _async_ignore(_error: Exception) -> None:
    return None


def test_a_failure_handler_that_cannot_reconnect_is_one_more_failed_attempt() -> None:
    """PubSub's handler reconnects; its reconnect (now one attempt) failing must not end the retrying."""
    retry = BoundedRetry(5, NoBackoff())
    work = Flaky(2)

    def reconnect(_error: Exception) -> None:
        raise redis.ConnectionError("still down")

    assert retry.call_with_retry(work, reconnect) == "ok"
    assert work.calls == 3


def test_a_failure_handler_that_reraises_ends_the_retrying() -> None:
    """redis-py's handlers re-raise the error itself for errors the connection must not retry."""
    retry = BoundedRetry(5, NoBackoff())
    work = Flaky(10)

    def give_up(error: Exception) -> None:
        raise error

    with pytest.raises(redis.ConnectionError, match="attempt 1"):
        retry.call_with_retry(work, give_up)
    assert work.calls == 1


def test_a_context_copied_inside_a_call_retries_on_its_own_once_the_call_ended() -> None:
    retry = BoundedRetry(5, NoBackoff())
    copied = retry.call_with_retry(contextvars.copy_context, _ignore)  # e.g. a task started inside a call
    work = Flaky(2)
    assert copied.run(retry.call_with_retry, work, _ignore) == "ok"
    assert work.calls == 3
