"""A Redis blip in the middle of a turn does not fail it (issue 10, item 11).

Each test runs a turn in process (the integration TurnRunner) on a client made by ``unicore.state.store.connect``
(what turn processes, the CLI and the local supervisor use), against a dedicated real redis-server that a tool of
the turn disturbs; the turn's next Redis command is then the write of that tool's result (``queue_message``, a
script; the model call's metrics in between would be best-effort writes, which swallow errors):

- a connection killed while its command waits on the server (``CLIENT PAUSE`` holds the write, ``CLIENT KILL TYPE
  normal`` drops every client connection, then ``CLIENT UNPAUSE``): the command never ran, so the retry is exact;
- a server restart (AOF on, so the data survives): the server stops, a stand-in socket resets the first
  connection attempt (proving the turn reached for Redis while it was down), then the server starts again.

The lease TTL is long so the heartbeat thread (every TTL/3) stays out of the way: the turn's own write meets the blip.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from pydantic import BaseModel, ConfigDict
from unicore.schema import TaskSpec
from unicore.state.store import TaskStore, connect
from unicore.tools.base import Tool, ToolContext
from unicore.turn import EXIT_OK, TurnOutcome

from tests.integration.conftest import NoteTool, TurnRunner
from tests.waiting import wait_for

SCRIPT = {"tasks": {"blip": [{"tool_use": [{"name": "disturb_redis", "input": {}}]}, {"text": "done after the blip"}]}}
LONG_LEASE_MS = 120_000


class RestartableRedis:
    """A private redis-server on a unix socket that can be stopped and started again with its data (AOF)."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not on PATH")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="uc-blip-"))
        self.socket = self.dir / "redis.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def admin(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), decode_responses=True)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--dir", str(self.dir), "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout=20, what="redis-server to answer PING")

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
        client = self.admin()
        try:
            return bool(client.ping())
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # a clean shutdown: the AOF is complete
            self.proc.wait(timeout=20)
        self.socket.unlink(missing_ok=True)

    def remove(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


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
