"""A wrong or rotated Redis password fails at once: the client's retry window (30 s of reconnects) is for blips,
and no reconnect mends a credential. Counted on a real redis-server with a password: the connections it received."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from unicore.store.client import build_async_client, build_client

from tests.waiting import wait_for

PASSWORD = "right-password"
# Connections the server receives between the two counts: this count's own, the client's one refused attempt, and
# at most one more when that attempt timed out connecting on a loaded machine (a blip, retried). The 30 s retry
# window made 27.
MOST = 3


@pytest.fixture
def protected_redis(tmp_path: Path) -> Iterator[Path]:
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not on PATH (make bootstrap installs it)"
    socket = tmp_path / "redis.sock"
    proc = subprocess.Popen([binary, "--port", "0", "--unixsocket", str(socket), "--save", "", "--appendonly", "no",
                             "--requirepass", PASSWORD], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    admin = redis.Redis(unix_socket_path=str(socket), password=PASSWORD)
    try:
        wait_for(lambda: socket.exists() and admin.ping(), timeout=10, what="redis-server with a password")
        yield socket
    finally:
        admin.close()
        proc.terminate()
        proc.wait(10)


def connections(socket: Path) -> int:
    admin = redis.Redis(unix_socket_path=str(socket), password=PASSWORD)
    try:
        return int(admin.info("stats")["total_connections_received"])
    finally:
        admin.close()


def test_a_wrong_password_fails_on_the_first_connection(protected_redis: Path) -> None:
    before = connections(protected_redis)
    client = build_client(f"unix://:wrong@{protected_redis}", retry_for=30)
    with pytest.raises(AuthenticationError):
        client.ping()
    client.close()
    assert connections(protected_redis) - before <= MOST


def test_the_async_client_too(protected_redis: Path) -> None:
    import asyncio

    before = connections(protected_redis)

    async def ping() -> None:
        client = build_async_client(f"unix://:wrong@{protected_redis}", retry_for=30)
        try:
            await client.ping()
        finally:
            await client.aclose()  # type: ignore[attr-defined]  # types-redis 4.6 lacks aclose()

    # redis.asyncio raises a ConnectionError from the AuthenticationError
    with pytest.raises(RedisConnectionError) as caught:
        asyncio.run(ping())
    assert isinstance(caught.value.__cause__ or caught.value, AuthenticationError)
    assert connections(protected_redis) - before <= MOST
