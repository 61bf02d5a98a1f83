"""A Redis blip in the middle of a turn does not fail it (issue 10, item 11).

Each test runs a turn in process (the integration TurnRunner) on a client made by ``unicore.store.tasks.connect``
(what turn processes, the CLI and the local supervisor use), against a dedicated real redis-server that a tool of
the turn disturbs; the turn's next Redis command is then the write of that tool's result (``queue_message``, a
script; the model call's metrics in between would be best-effort writes, which swallow errors):

- a connection killed while its command waits on the server (``CLIENT PAUSE`` holds the write, ``CLIENT KILL TYPE
  normal`` drops every client connection, then ``CLIENT UNPAUSE``): the command never ran, so the retry is exact;
- a server restart (AOF on, so the data survives): the server stops, a stand-in socket resets the first
  connection attempt (proving the turn reached for Redis while it was down), then the server starts again.

The lease TTL is long so the heartbeat thread (every TTL/3) stays out of the way: the turn's own write meets the blip.
The tool-call metric (``tools.call_metrics``, a best-effort write between the tool and its result's write) is left
out here, so the command that meets the blip is the turn's own state write; tests/integration/test_tool_call_metrics.py
covers the metric, including a Redis that cannot be reached.

At the end, without a turn: a client (sync and asyncio) whose idle connection is killed while Redis refuses new
connections reconnects hundreds of times without its stack growing (it used to end in RecursionError).
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, cast

import pytest
import redis
import redis.asyncio as aioredis
import unicore.store.client as client_module
from pydantic import BaseModel, ConfigDict
from unicore.api.schema import TaskSpec
from unicore.store.client import build_async_client, build_client
from unicore.store.tasks import TaskStore, connect
from unicore.tools import call_metrics
from unicore.tools.base import Tool, ToolContext
from unicore.turn.outcome import EXIT_OK, TurnOutcome

from tests.integration.conftest import NoteTool, TurnRunner
from tests.redis_server import RestartableRedis
from tests.waiting import wait_for

SCRIPT = {"tasks": {"blip": [{"tool_use": [{"name": "disturb_redis", "input": {}}]}, {"text": "done after the blip"}]}}
LONG_LEASE_MS = 120_000


@pytest.fixture(autouse=True)
def no_tool_call_metric(monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn's next command after the tool is then its result's write (see the module docstring)."""
    monkeypatch.setattr(call_metrics, "record", lambda *args, **kwargs: None)


@pytest.fixture
def server() -> Iterator[RestartableRedis]:
    instance = RestartableRedis()
    instance.start()
    yield instance
    instance.remove()


@pytest.fixture
def runner(server: RestartableRedis, tmp_path: Path) -> Iterator[TurnRunner]:
    client = connect(server.url)
    yield TurnRunner(client, tmp_path, extra_tools=[NoteTool()])
    client.close()


class Background:
    """A helper thread whose failure is reported by ``join`` (so the test says what went wrong in it)."""

    def __init__(self, target: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self.thread.start()

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def join(self) -> None:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the disturbing thread did not finish"
        if self.error is not None:
            raise self.error


class DisturbRedis(Tool):
    """The test's tool: runs the disturbance inside the turn, right before the turn writes the tool's result."""

    name = "disturb_redis"
    description = "Disturb Redis (test only)."

    class Input(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        self.action()
        return "disturbed"


def run_blip_turn(runner: TurnRunner, disturb: Callable[[], None]) -> TurnOutcome:
    store = TaskStore(runner.client)
    store.create_task(TaskSpec(id="blip", prompt="disturb redis once", script=SCRIPT))
    runner.extra_tools.append(DisturbRedis(disturb))
    return runner("blip", lease_ttl_ms=LONG_LEASE_MS)


def assert_turn_completed_once(outcome: TurnOutcome, url: str) -> None:
    assert (outcome.exit_code, outcome.error) == (EXIT_OK, ""), outcome
    assert outcome.final_text == "done after the blip"
    store = TaskStore(connect(url))
    roles = [
        (m.role, any("toolUse" in b for b in m.content), any("toolResult" in b for b in m.content))
        for m in store.messages("blip")
    ]
    assert roles == [  # every write landed exactly once
        ("user", False, False),
        ("assistant", True, False),
        ("user", False, True),
        ("assistant", False, False),
    ]
    record = store.get_task("blip")
    assert record.status == "idle" and record.last_response == "done after the blip"
    assert not store.redis.exists(store.keys("blip").lease)


def test_a_turn_survives_its_connection_killed_mid_command(server: RestartableRedis, runner: TurnRunner) -> None:
    admin = server.admin()
    holder: list[Background] = []

    def blocked_clients() -> list[dict[str, str]]:
        return [c for c in admin.client_list() if "b" in c["flags"] and c["cmd"] in ("evalsha", "eval")]

    def kill_then_unpause() -> None:
        try:
            wait_for(blocked_clients, timeout=20, what="the turn's write (a script) to wait on the paused server")
            killed = admin.client_kill_filter(_type="normal", skipme=True)
            assert int(killed) >= 1
        finally:
            admin.client_unpause()

    def disturb() -> None:
        admin.client_pause(30_000, all=False)  # writes wait on the server (at most 30 s) until unpaused
        holder.append(Background(kill_then_unpause))

    outcome = run_blip_turn(runner, disturb)
    holder[0].join()
    admin.close()
    assert_turn_completed_once(outcome, server.url)


def test_a_turn_survives_a_server_restart(server: RestartableRedis, runner: TurnRunner) -> None:
    holder: list[Background] = []

    def stand_in_then_restart(listener: socket.socket) -> None:
        try:
            listener.settimeout(30)
            conn, _ = listener.accept()  # the turn reached for Redis while it was down (to write the tool result)
            conn.close()  # ... and got its connection reset
        finally:
            listener.close()
            server.socket.unlink(missing_ok=True)
        server.start()

    def disturb() -> None:
        server.stop()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(server.socket))
        listener.listen(8)
        holder.append(Background(lambda: stand_in_then_restart(listener)))

    outcome = run_blip_turn(runner, disturb)
    holder[0].join()
    assert_turn_completed_once(outcome, server.url)


def test_without_retries_the_same_blip_fails_fast(
    server: RestartableRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UNICORE_REDIS_RETRY_SECONDS=0 turns the retries off: the blip then fails the turn (the test above is real)."""
    monkeypatch.setenv("UNICORE_REDIS_RETRY_SECONDS", "0")
    client = connect(server.url)
    admin = server.admin()
    holder: list[Background] = []

    def kill_then_unpause() -> None:
        try:
            wait_for(lambda: any(c["cmd"] == "evalsha" and "b" in c["flags"] for c in admin.client_list()),
                     timeout=20, what="the turn's write to wait on the paused server")
            admin.client_kill_filter(_type="normal", skipme=True)
        finally:
            admin.client_unpause()

    def disturb() -> None:
        admin.client_pause(30_000, all=False)
        holder.append(Background(kill_then_unpause))

    outcome = run_blip_turn(TurnRunner(client, tmp_path, extra_tools=[NoteTool()]), disturb)
    holder[0].join()
    admin.close()
    client.close()
    assert outcome.exit_code != EXIT_OK and "Connection" in outcome.error, outcome


# A client's reconnect while Redis refuses new connections (here: maxclients reached; the same shape as a server
# still loading its data, a proxy accepting for a stopped server, or NOAUTH after a password was set): a connection
# idle past its health check reconnects, and the first command of its handshake (CLIENT SETINFO) PINGs it first.
# That PING failed, its retry reconnected, whose handshake PINGed again under a new retry loop, ... one level of
# Python stack per failed attempt until RecursionError (the async client wraps that in a ConnectionError and retries
# on at the top of the stack). The backoff is made tiny so that the hundreds of attempts that used to overflow the
# stack take a fraction of a second, and the health check is due after 0.1 s idle instead of 15 s.
REFUSALS = 300  # failed reconnects before Redis accepts clients again (the stack overflowed after about 110)
FAST_HEALTH_CHECK = 0.1
STACK_SLACK = 60  # frames: reconnects made from different call sites differ by a few; a recursion adds ~10 each


def _stack_depth() -> int:
    depth, frame = 0, cast(FrameType | None, sys._getframe(1))
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth


@pytest.fixture
def connect_depths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A fast backoff, and the Python stack depth of every connection attempt (sync and async clients)."""
    monkeypatch.setattr(client_module, "BACKOFF_BASE", 0.0005)
    monkeypatch.setattr(client_module, "BACKOFF_CAP", 0.002)
    depths: list[int] = []
    sync_connect = redis.UnixDomainSocketConnection._connect  # type: ignore[attr-defined]
    async_connect = aioredis.UnixDomainSocketConnection._connect  # type: ignore[attr-defined]

    def recorded_sync(self: redis.UnixDomainSocketConnection) -> Any:
        depths.append(_stack_depth())
        return sync_connect(self)

    async def recorded_async(self: aioredis.UnixDomainSocketConnection) -> Any:
        depths.append(_stack_depth())
        return await async_connect(self)

    monkeypatch.setattr(redis.UnixDomainSocketConnection, "_connect", recorded_sync)
    monkeypatch.setattr(aioredis.UnixDomainSocketConnection, "_connect", recorded_async)
    return depths


def refuse_new_connections(server: RestartableRedis) -> tuple[threading.Event, Background]:
    """Kill every client connection and refuse new ones until Redis has turned away REFUSALS (or ``stop`` is set)."""
    admin = server.admin()  # its one connection is the only client Redis keeps serving
    before = int(admin.info("stats")["rejected_connections"])
    admin.config_set("maxclients", 1)
    admin.client_kill_filter(_type="normal", skipme=True)
    stop = threading.Event()

    def refused_enough() -> bool:
        return stop.is_set() or int(admin.info("stats")["rejected_connections"]) - before >= REFUSALS

    def accept_again() -> None:
        try:
            wait_for(refused_enough, timeout=30, interval=0.01, what=f"Redis to refuse {REFUSALS} connections")
        finally:
            admin.config_set("maxclients", 10_000)
            admin.close()

    return stop, Background(accept_again)


def assert_flat_stack(depths: list[int]) -> None:
    assert len(depths) > REFUSALS, depths  # the client did retry through every refusal
    grew = max(depths) - min(depths)
    assert grew < STACK_SLACK, f"the stack grew by {grew} frames over {len(depths)} connection attempts"


def test_an_idle_client_rides_out_refused_reconnects_without_recursing(
    server: RestartableRedis, connect_depths: list[int]
) -> None:
    client = build_client(server.url, retry_for=20, health_check_interval=FAST_HEALTH_CHECK)
    client.set("k", "v")
    (conn,) = client.connection_pool._available_connections  # type: ignore[attr-defined]
    wait_for(lambda: time.time() > conn.next_health_check, timeout=5, what="the connection to be due a health check")
    stop, helper = refuse_new_connections(server)
    try:
        assert client.get("k") == "v"
    finally:
        stop.set()
        helper.join()
        client.close()
    assert_flat_stack(connect_depths)


def test_an_idle_async_client_rides_out_refused_reconnects_without_recursing(
    server: RestartableRedis, connect_depths: list[int]
) -> None:
    async def scenario() -> None:
        client = build_async_client(server.url, retry_for=20, health_check_interval=FAST_HEALTH_CHECK)
        try:
            await client.set("k", "v")
            (conn,) = client.connection_pool._available_connections
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5
            while loop.time() <= conn.next_health_check:  # until the connection is due a health check
                assert loop.time() < deadline, "the connection never became due a health check"
                await asyncio.sleep(0.01)
            stop, helper = refuse_new_connections(server)
            try:
                assert await client.get("k") == b"v"
            finally:
                stop.set()
                await asyncio.to_thread(helper.join)
        finally:
            await client.aclose()  # type: ignore[attr-defined]

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert_flat_stack(connect_depths)
