"""The Redis client builder (unicore.state.client): retries within a bounded time, configuration, options.

The turn-level behaviour (a blip in the middle of a turn) is tested against a real redis-server in
tests/integration/test_redis_blips.py; here the "server" is a unix socket that accepts and drops every
connection, so each attempt fails at once and the attempts can be counted.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from unicore.errors import ConfigError
from unicore.state.client import (
    BoundedRetry,
    build_async_client,
    build_client,
    client_options,
    retry_seconds,
)
from unicore.state.store import connect


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
