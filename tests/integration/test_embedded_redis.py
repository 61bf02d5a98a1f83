"""The embedded redis-server of local mode (unicore.launch.embedded_redis) has one owner per data directory: a server
that is alive there is never replaced, even while it does not answer (loading its data, a busy machine, stopped),
and its socket is never deleted; two commands starting at once start one server. Real redis-server processes, the
CLI as a subprocess (tests/unicore_cli.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicore.errors import ConfigError
from unicore.launch.embedded_redis import ensure_embedded_redis

from tests.unicore_cli import REPO, UNICORE, unicore
from tests.waiting import wait_for


def servers_in(directory: Path) -> list[int]:
    """The pids of the redis-server processes serving ``directory`` (redis-server chdirs into its --dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone meanwhile, or not ours
            continue
        if command.startswith(b"redis-server") or b"/redis-server" in command.split(b"\0", 1)[0]:
            if cwd == str(directory):
                found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """An UNICORE_HOME whose redis-servers are all ended after the test (continued first if stopped)."""
    where = tmp_path / "h"
    yield where
    for pid in servers_in(where / "redis"):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        wait_for(lambda pid=pid: not alive(pid), timeout=10, what=f"redis-server {pid} to end")


def local_env(home: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {"UNICORE_HOME": str(home)}


def started_server(home: Path) -> int:
    """Start the embedded server with a first command; its pid (from its pid file)."""
    first = unicore("tree", env=local_env(home))
    assert first.returncode == 0 and first.stdout.strip() == "no tasks", first.stderr
    pid = int((home / "redis" / "redis.pid").read_text())
    assert servers_in(home / "redis") == [pid]
    return pid


def test_a_stopped_server_is_waited_for_never_replaced(home: Path, tmp_path: Path) -> None:
    pid = started_server(home)
    socket = home / "redis" / "redis.sock"
    os.kill(pid, signal.SIGSTOP)  # as a server loading a large AOF, or one on a busy machine: it does not answer
    err_file = tmp_path / "tree.err"
    with open(err_file, "w") as err:
        command = subprocess.Popen([UNICORE, "tree"], env=local_env(home), stdout=subprocess.PIPE, stderr=err,
                                   text=True, cwd=REPO)
    try:
        # The command says it waits (or, as before the fix, starts a second server on the same directory).
        wait_for(lambda: "waiting for the embedded redis-server" in err_file.read_text()
                 or len(servers_in(home / "redis")) > 1, timeout=30, what="the command to wait or start a server")
        assert servers_in(home / "redis") == [pid], err_file.read_text()
        assert socket.exists()
        assert command.poll() is None  # still waiting
        os.kill(pid, signal.SIGCONT)
        out, _ = command.communicate(timeout=60)
    finally:
        os.kill(pid, signal.SIGCONT)
        if command.poll() is None:
            command.kill()
            command.wait()
    assert command.returncode == 0, err_file.read_text()
    assert out.strip() == "no tasks"
    assert servers_in(home / "redis") == [pid] and socket.exists()  # the same server, its socket kept
    again = unicore("tree", env=local_env(home))
    assert again.returncode == 0 and again.stdout.strip() == "no tasks", again.stderr


def test_a_server_that_does_not_answer_by_the_deadline_is_one_line_and_left_running(home: Path) -> None:
    pid = started_server(home)
    os.kill(pid, signal.SIGSTOP)
    began = time.monotonic()
    with pytest.raises(ConfigError) as raised:
        ensure_embedded_redis(home / "redis", timeout=1.0)
    waited = time.monotonic() - began
    message = str(raised.value)
    assert waited >= 1.0
    assert "\n" not in message
    assert f"pid {pid}" in message and "did not answer within 1 s" in message, message
    assert servers_in(home / "redis") == [pid] and (home / "redis" / "redis.sock").exists()
    os.kill(pid, signal.SIGCONT)
    assert ensure_embedded_redis(home / "redis", timeout=30.0) == f"unix://{home / 'redis' / 'redis.sock'}"
    assert servers_in(home / "redis") == [pid]


def test_a_dead_server_is_replaced(home: Path) -> None:
    pid = started_server(home)
    os.kill(pid, signal.SIGKILL)  # leaves its pid file and socket behind
    wait_for(lambda: not alive(pid), timeout=10, what="the killed server to end")
    assert (home / "redis" / "redis.sock").exists()
    after = unicore("tree", env=local_env(home))
    assert after.returncode == 0 and after.stdout.strip() == "no tasks", after.stderr
    (new,) = servers_in(home / "redis")
    assert new != pid and int((home / "redis" / "redis.pid").read_text()) == new


def test_concurrent_first_commands_start_one_server(home: Path) -> None:
    env = local_env(home)
    commands = [subprocess.Popen([UNICORE, "tree"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, cwd=REPO) for _ in range(4)]
    results = [command.communicate(timeout=120) for command in commands]
    for command, (out, err) in zip(commands, results, strict=True):
        assert command.returncode == 0 and out.strip() == "no tasks", err
    (pid,) = servers_in(home / "redis")
    assert int((home / "redis" / "redis.pid").read_text()) == pid

