"""A Redis primary with a replica, the primary SIGKILLed mid-turn, a sentinel promotes the replica (issue 27, item 5).

Real redis-server processes on 127.0.0.1: a primary, a replica and three sentinels (``redis-server --sentinel``,
quorum 2, ``down-after-milliseconds`` 400, so a failover takes about 2 s). Every client is built from the
``redis+sentinel://`` URL by ``unicore.store.client`` (what turn processes, the CLI and the operator do with
``REDIS_URL``), and real turns run in process (``unicore.turn.run.run_turn`` with the scripted model, as in
tests/integration/test_crash_safety.py). What a failover loses, and what the tests hold the system to
(docs/architecture.md, "Redis failover"):

- replication is asynchronous: a write the old primary acknowledged but had not sent to the replica is lost. The new
  primary's data is the old one's at an earlier instant (the replica applies the primary's writes in order);
- a failover with the replica caught up loses nothing: turns in flight wait in their clients' retry window while no
  primary answers, reconnect to the promoted replica and finish exactly once; a blocking read in flight (sync, and
  the operator's asyncio client) reconnects there too (redis-py's Sentinel connection went back to the dead
  primary's address for the whole window);
- when writes are lost, a turn process that goes on after the failover holds state the new primary no longer has.
  Its next write of the conversation (or the turn's end) finds that its own earlier write is missing and voids its
  lease instead of writing on top of the gap: the turn stops as if it had crashed at the instant of the cut, and the
  next turn runs it again from what survived (its tool calls run again); nothing is stored twice, no tool result is
  stored without its call (before that check the turn went on and ended with exit 0: its tool result stored without
  the call, or its turn ended and reported with its final answer missing from the conversation). A message whose
  queueing was lost is gone; sent again with the same message id it is queued once.

The lost writes are made deterministic, not a race: the replica replicates as its own ACL user, and at the chosen
instant the test disables that user on the primary and drops the replication link (the replica cannot reconnect), so
every write after it stays on the old primary only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import BaseModel, ConfigDict
from unicore.api.schema import TaskSpec
from unicore.store.client import build_async_client
from unicore.store.tasks import TaskStore, connect
from unicore.tools.base import Tool, ToolContext
from unicore.turn.outcome import EXIT_LEASE_LOST, EXIT_OK

from tests.converse_check import converse_problems
from tests.integration.conftest import TurnRunner
from tests.unicore_cli import unicore
from tests.waiting import wait_for

MASTER = "uc"
REPLICATION_PASSWORD = "replication-secret"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Node:
    """One redis-server process on a TCP port of 127.0.0.1."""

    def __init__(self, name: str, args: list[str], folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH; run hack/bootstrap.sh (it installs Debian's package)")
        self.name = name
        self.log = folder / f"{name}.log"
        for _attempt in range(3):  # a free port can be taken by another process before the server binds it
            self.port = free_port()
            with self.log.open("wb") as log:
                self.proc = subprocess.Popen([binary, *args, "--port", str(self.port), "--bind", "127.0.0.1"],
                                             stdout=log, stderr=subprocess.STDOUT)
            self.client = redis.Redis(port=self.port, decode_responses=True, socket_timeout=5)
            wait_for(self._started, timeout=20, what=f"{name} (port {self.port}) to answer PING or exit")
            if self.proc.poll() is None:
                return
            if "Address already in use" not in self.log.read_text():
                break
        raise RuntimeError(f"{name} exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")

    def _started(self) -> bool:
        return self.proc.poll() is not None or bool(self.client.ping())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.client.close()


class ReplicatedRedis:
    """A primary, its replica (replicating as ACL user ``replication``) and three sentinels watching them."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="uc-failover-"))
        data = ["--save", "", "--appendonly", "no", "--dir", str(self.dir), "--repl-diskless-sync-delay", "0"]
        self.primary = Node("primary", data, self.dir)
        self.primary.client.acl_setuser("replication", enabled=True, passwords=[f"+{REPLICATION_PASSWORD}"],
                                        commands=["+psync", "+replconf", "+ping"])
        self.replica = Node("replica", [*data, "--replicaof", "127.0.0.1", str(self.primary.port),
                                        "--masteruser", "replication", "--masterauth", REPLICATION_PASSWORD], self.dir)
        wait_for(self.in_sync, timeout=20, what="the replica to finish its first sync")
        self.sentinels = []
        for i in range(3):
            conf = self.dir / f"sentinel-{i}.conf"  # a sentinel rewrites its file: one each
            conf.write_text(
                f"dir {self.dir}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 400\n"
                f"sentinel failover-timeout {MASTER} 4000\n"
            )
            self.sentinels.append(Node(f"sentinel-{i}", [str(conf), "--sentinel"], self.dir))
        wait_for(self._watched, timeout=30, what="every sentinel to see the replica and the two other sentinels")
        self.url = f"redis+sentinel://{','.join(f'127.0.0.1:{s.port}' for s in self.sentinels)}/{MASTER}"

    def _watched(self) -> bool:
        for sentinel in self.sentinels:
            reply = sentinel.client.execute_command("SENTINEL", "MASTER", MASTER)  # field, value, ...
            state = dict(zip(reply[::2], reply[1::2], strict=True))
            if int(state["num-slaves"]) != 1 or int(state["num-other-sentinels"]) != 2:
                return False
        return True

    def in_sync(self) -> bool:
        """The replica has applied every write the primary has made (their replication offsets agree)."""
        primary = self.primary.client.info("replication")
        replica = self.replica.client.info("replication")
        return (replica.get("master_link_status") == "up" and int(primary["connected_slaves"]) == 1
                and int(replica["slave_repl_offset"]) == int(primary["master_repl_offset"]))

    def cut_replication(self) -> None:
        """From now on the primary's writes reach no replica: the replica's user is disabled and its link dropped."""
        self.primary.client.execute_command("ACL", "SETUSER", "replication", "off")
        self.primary.client.client_kill_filter(_type="slave")
        wait_for(lambda: int(self.primary.client.info("replication")["connected_slaves"]) == 0, timeout=10,
                 what="the replica's link to be gone")

    def kill_primary(self) -> None:
        self.primary.kill()

    def promoted(self) -> bool:
        """Every sentinel names the replica as the primary, and the replica says it is one."""
        for sentinel in self.sentinels:
            address = sentinel.client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            if address is None or int(address[1]) != self.replica.port:
                return False
        return self.replica.client.info("replication")["role"] == "master"

    def stop(self) -> None:
        for node in [*self.sentinels, self.replica, self.primary]:
            node.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def replicated(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReplicatedRedis]:
    # A failover takes about 2 s; a sentinel delayed by a loaded machine can take longer (TILT mode: 30 s): the
    # clients' retry window is made wide enough that the tests wait on the failover, not on the window.
    monkeypatch.setenv("UNICORE_REDIS_RETRY_SECONDS", "90")
    group = ReplicatedRedis()
    yield group
    group.stop()


class Gate(Tool):
    """The test's tool: tells the test the turn is in it, then runs ``action`` (the test's fault) and waits for the
    test to let it go."""

    name = "gate"
    description = "Wait for the test (test only)."

    class Input(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def __init__(self) -> None:
        self.arrived: dict[str, int] = {}
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.action: Callable[[], None] | None = None

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        with self.lock:
            self.arrived[ctx.task_id] = self.arrived.get(ctx.task_id, 0) + 1
        action, self.action = self.action, None
        if action is not None:
            action()
        assert self.release.wait(60), "the test never let the gate go"
        return "through the gate"


SCRIPT = {"default": "final", "tasks": {"*": [{"tool_use": [{"name": "gate", "input": {}}]}, {"text": "final"}]}}


def history(store: TaskStore, task_id: str) -> list[tuple[str, str]]:
    """The stored conversation as (role, what): text, tool_use or tool_result."""
    shown = []
    for message in store.messages(task_id):
        for block in message.content:
            kind = "tool_use" if "toolUse" in block else "tool_result" if "toolResult" in block else block.get("text")
            shown.append((message.role, str(kind)))
    return shown


class Turns:
    """Turns run in threads of this process, each with the outcome it ended with."""

    def __init__(self, runner: TurnRunner) -> None:
        self.runner = runner
        self.outcomes: dict[str, Any] = {}
        self.errors: dict[str, BaseException] = {}
        self.threads: list[threading.Thread] = []

    def start(self, task_id: str, **kwargs: Any) -> None:
        def run() -> None:
            try:
                self.outcomes[task_id] = self.runner(task_id, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - reported by join()
                self.errors[task_id] = exc

        thread = threading.Thread(target=run, name=f"turn-{task_id}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> dict[str, Any]:
        for thread in self.threads:
            thread.join(90)
            assert not thread.is_alive(), f"{thread.name} did not finish"
        assert not self.errors, self.errors
        return self.outcomes



COMPLETE = [("user", "start"), ("assistant", "tool_use"), ("user", "tool_result"), ("assistant", "final")]
LEASE_TTL_MS = 30_000  # longer than a failover: the heartbeat's renewals wait in the retry window like any write


def check_requests(runner: TurnRunner, task_id: str) -> None:
    """Every request the model got was a valid Converse conversation (each tool result after its call)."""
    for request in runner.requests(task_id):
        assert converse_problems(request.messages) == [], request.messages


def operator_side(url: str, ready: threading.Event, seen: dict[str, Any]) -> None:
    """The operator's kind of client (``build_async_client``, its own event loop in this thread): a read on the old
    primary, then a BLPOP that is waiting when the primary dies and must end on the new one, then a read there."""

    async def run() -> None:
        client = build_async_client(url, decode_responses=True)
        try:
            seen["before"] = await client.hget("uc:{a}:task", "status")
            ready.set()
            seen["woken"] = await client.blpop(["uc:test:wake-async"], timeout=25)
            seen["after"] = await client.hget("uc:{a}:task", "last_response")
        finally:
            await client.aclose()

    asyncio.run(run())


def test_turns_in_flight_ride_out_a_failover_with_the_replica_caught_up(
    replicated: ReplicatedRedis, tmp_path: Path
) -> None:
    """Three turns are in a tool call when the primary is SIGKILLed; their next writes wait in the retry window
    until a sentinel has promoted the replica, then every turn ends exactly once on the new primary. Blocking reads
    in flight (sync, and asyncio as in the operator) reconnect to the new primary; the CLI, given the same URL, finds
    it too."""
    client = connect(replicated.url)
    store = TaskStore(client)
    tasks = ["a", "b", "c"]
    for task_id in tasks:
        store.create_task(TaskSpec(id=task_id, prompt="start", script=SCRIPT))
    gate = Gate()
    runner = TurnRunner(client, tmp_path, extra_tools=[gate])
    turns = Turns(runner)
    for task_id in tasks:
        turns.start(task_id, lease_ttl_ms=LEASE_TTL_MS)
    wait_for(lambda: len(gate.arrived) == len(tasks), timeout=30, what="every turn to be in its tool call")

    # Commands in flight when the primary dies (a blocking read, as the operator's XREADGROUP BLOCK): their retry
    # reconnects the same connection, which must ask the sentinels again, not go back to the dead primary.
    woken: dict[str, Any] = {}
    blocked = threading.Thread(target=lambda: woken.update(sync=client.blpop(["uc:test:wake"], timeout=25)))
    blocked.start()
    operator_ready, operator_seen = threading.Event(), {}
    operator = threading.Thread(target=operator_side, args=(replicated.url, operator_ready, operator_seen))
    operator.start()
    assert operator_ready.wait(20) and operator_seen["before"] == "running"
    wait_for(lambda: sum(1 for c in replicated.primary.client.client_list() if c["cmd"] == "blpop") == 2,
             timeout=10, what="both BLPOPs to wait on the primary")
    wait_for(replicated.in_sync, timeout=10, what="the replica to have every write")
    began = time.monotonic()
    replicated.kill_primary()
    gate.release.set()  # the turns write their tool results while no primary answers
    outcomes = turns.join()
    print(f"the turns ended {time.monotonic() - began:.1f} s after the primary was killed")
    assert replicated.promoted()
    replicated.replica.client.lpush("uc:test:wake", "sync")
    replicated.replica.client.lpush("uc:test:wake-async", "async")
    blocked.join(30)
    operator.join(30)
    assert not blocked.is_alive() and not operator.is_alive()
    assert list(woken["sync"]) == ["uc:test:wake", "sync"]
    assert list(operator_seen["woken"]) == ["uc:test:wake-async", "async"] and operator_seen["after"] == "final"

    for task_id in tasks:
        outcome = outcomes[task_id]
        assert (outcome.exit_code, outcome.error, outcome.final_text) == (EXIT_OK, "", "final"), outcome
        assert history(store, task_id) == COMPLETE, task_id
        record = store.get_task(task_id)
        assert (record.status, record.last_response, record.iterations) == ("idle", "final", 2), record
        assert store.lease_holder(task_id) is None and not store.needs_turn(task_id)
        check_requests(runner, task_id)
    assert gate.arrived == {task_id: 1 for task_id in tasks}  # no tool ran twice

    shown = unicore("show", "b", env={**os.environ, "REDIS_URL": replicated.url,
                                      "UNICORE_HOME": str(tmp_path / "home")}, timeout=60)
    assert shown.returncode == 0 and "final" in shown.stdout, shown.stderr

    # The task goes on: a new message, a new turn, on the promoted replica.
    assert store.queue_text("a", "more", message_id="a-more")
    assert runner("a", lease_ttl_ms=LEASE_TTL_MS).exit_code == EXIT_OK
    assert history(store, "a") == [*COMPLETE, ("user", "more"), ("assistant", "final")]


@pytest.mark.parametrize("lost", ["tool_call", "final_answer"])
def test_writes_acknowledged_but_never_replicated_are_lost_and_the_turn_runs_again(
    replicated: ReplicatedRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    """Replication is cut right before the model's answer (its tool call, or its final answer) is stored; the old
    primary acknowledges that write (and a message queued to another task), then dies, and the replica that never
    got them is promoted. The turn's next write finds its answer missing: its lease is voided and the turn stops
    (exit 5, nothing written over the gap); the next turn runs the task again from what survived and ends it exactly
    once. The lost message is gone; sent again with its id, it is queued once."""
    client = connect(replicated.url)
    store = TaskStore(client)
    store.create_task(TaskSpec(id="t", prompt="start", script=SCRIPT))
    store.create_task(TaskSpec(id="q", prompt="start", script=SCRIPT))
    gate = Gate()
    gate.release.set()
    runner = TurnRunner(client, tmp_path, extra_tools=[gate])
    cut_at = {"tool_call": 1, "final_answer": 2}[lost]  # the model request whose answer is lost
    cut = threading.Event()

    def cut_before_the_answer(request: Any) -> None:
        if len(runner.requests("t")) == cut_at and not cut.is_set():
            wait_for(replicated.in_sync, timeout=10, what="the replica to have every write so far")
            replicated.cut_replication()
            assert store.queue_text("q", "lost with the old primary", message_id="q-late")  # acknowledged
            cut.set()

    def kill_the_primary() -> None:
        assert cut.is_set()
        replicated.kill_primary()

    runner.hooks["t"] = cut_before_the_answer
    if lost == "tool_call":
        gate.action = kill_the_primary  # the tool call's answer is stored (on the old primary only); then it dies
    else:
        end_turn = TaskStore.end_turn

        def kill_before_the_end(self: TaskStore, *args: Any, **kwargs: Any) -> Any:
            if replicated.primary.proc.poll() is None:
                kill_the_primary()  # the final answer is stored (on the old primary only); then it dies
            return end_turn(self, *args, **kwargs)

        monkeypatch.setattr(TaskStore, "end_turn", kill_before_the_end)

    began = time.monotonic()
    outcome = runner("t", lease_ttl_ms=LEASE_TTL_MS)
    print(f"the turn stopped {time.monotonic() - began:.1f} s after it started: {outcome.error}")
    assert replicated.promoted()
    assert outcome.exit_code == EXIT_LEASE_LOST, outcome
    assert "an earlier write of this turn is missing" in outcome.error, outcome
    survived = {"tool_call": COMPLETE[:1], "final_answer": COMPLETE[:3]}[lost]
    assert history(store, "t") == survived  # the new primary: the old one's data at the cut, nothing after it
    assert store.lease_holder("t") is None and store.needs_turn("t")  # voided, not left to expire

    retried = runner("t", lease_ttl_ms=LEASE_TTL_MS)  # what the operator or the local supervisor starts next
    assert (retried.exit_code, retried.final_text) == (EXIT_OK, "final"), retried
    assert history(store, "t") == COMPLETE  # each message once, each tool result after its call
    record = store.get_task("t")
    assert (record.status, record.last_response, record.iterations) == ("idle", "final", 2), record
    assert store.lease_holder("t") is None and not store.needs_turn("t")
    check_requests(runner, "t")
    assert gate.arrived["t"] == {"tool_call": 2, "final_answer": 1}[lost]  # a lost tool call runs again

    assert store.pending_count("q") == 1  # its prompt; the message queued after the cut is gone
    assert store.queue_text("q", "lost with the old primary", message_id="q-late")  # sent again: queued
    assert not store.queue_text("q", "lost with the old primary", message_id="q-late")  # once
    assert store.pending_count("q") == 2
