"""``unicore traces up|down|url`` (client/unicore_client/local/traces_command.py) as a user runs them, with the real
Jaeger binary (tests/jaeger_binary.py): ``up`` leaves Jaeger running after the command ends and prints the export
line and its URL, again the same when it already runs; ``url`` prints a task's trace page; ``down`` stops it and is
harmless twice; bad arguments are one line and exit 2, everything else that fails one line and exit 1."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore
from unicore_client.traces.jaeger import request

from tests.jaeger_binary import jaeger_binary
from tests.unicore_cli import unicore

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
EXPORT = re.compile(r"^export OTEL_EXPORTER_OTLP_ENDPOINT=(http://127\.0\.0\.1:\d+)$")
TRACE_URL = re.compile(r"^export UNICORE_TRACE_URL='(http://127\.0\.0\.1:\d+)/trace/\{trace_id\}'$")
URL = re.compile(r"^# Jaeger: (http://127\.0\.0\.1:\d+) ")


@pytest.fixture
def env(redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A ``unicore`` environment with its own home, the test's Redis and the real binary; whatever Jaeger a test
    left running is stopped at its end."""
    values = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    values.update(REDIS_URL=redis_url, UNICORE_HOME=str(tmp_path / "home"), UNICORE_JAEGER=str(jaeger_binary()))
    yield values
    unicore("traces", "down", env=values)
    state = tmp_path / "home" / "jaeger" / "state.json"
    if state.exists():  # down failed: leave nothing behind
        pid = int(re.search(r'"pid": (\d+)', state.read_text()).group(1))  # type: ignore[union-attr]
        if str(state.parent / "jaeger.json").encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.killpg(pid, signal.SIGKILL)


def up(env: dict[str, str]) -> tuple[str, str, str]:
    """``unicore traces up`` on free ports: (its stdout, the OTLP endpoint, the Jaeger URL)."""
    done = unicore("traces", "up", "--otlp-port", "0", "--port", "0", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    export, trace_url, url = EXPORT.match(lines[0]), TRACE_URL.match(lines[1]), URL.match(lines[2])
    assert export is not None and trace_url is not None and url is not None, done.stdout
    assert trace_url.group(1) == url.group(1)
    return done.stdout, export.group(1), url.group(1)


def cmdline_pid(home: Path) -> int | None:
    """The pid of the Jaeger running on this home's configuration (from /proc), if any."""
    config = str(home / "jaeger" / "jaeger.json").encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and config in (entry / "cmdline").read_bytes().split(b"\0"):
                return int(entry.name)
        except OSError:
            continue
    return None


def test_up_runs_jaeger_on_after_the_command_and_down_stops_it(env: dict[str, str]) -> None:
    home = Path(env["UNICORE_HOME"])
    printed, otlp, query = up(env)
    pid = cmdline_pid(home)
    assert pid is not None  # the command has ended; Jaeger runs on
    assert request(f"{query}/api/services")[0] == 200
    assert request(f"{otlp}/v1/traces", b"{}")[0] == 200

    again = unicore("traces", "up", env=env)  # other (default) ports asked: the running one, said once
    assert again.returncode == 0 and again.stdout == printed, again.stderr
    assert "already runs" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert cmdline_pid(home) == pid

    down = unicore("traces", "down", env=env)
    assert down.returncode == 0 and down.stdout.strip() == f"Jaeger stopped (pid {pid})", down.stderr
    assert cmdline_pid(home) is None
    with pytest.raises(OSError):
        request(f"{query}/api/services", timeout=2)
    again = unicore("traces", "down", env=env)
    assert again.returncode == 0 and again.stdout.strip() == "Jaeger is not running", again.stderr


def test_a_dead_jaeger_is_started_again(env: dict[str, str]) -> None:
    home = Path(env["UNICORE_HOME"])
    _, _, query = up(env)
    pid = cmdline_pid(home)
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # gone without `down`: its state file stays
    _, _, query_again = up(env)
    assert cmdline_pid(home) not in (None, pid)
    assert request(f"{query_again}/api/services")[0] == 200


def test_url_prints_the_trace_page_of_a_task(env: dict[str, str], store: TaskStore) -> None:
    store.create_task(TaskSpec(id="traced", prompt="hi"), trace_parent=f"00-{TRACE}-{SPAN}-01")
    store.create_task(TaskSpec(id="untraced", prompt="hi"))

    def url(task: str, code: int) -> str:
        done = unicore("traces", "url", task, env=env)
        assert done.returncode == code, (done.stdout, done.stderr)
        if code:
            assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
            return done.stderr.strip()
        return done.stdout.strip()

    assert "Jaeger is not running" in url("traced", 1)
    _, _, query = up(env)
    assert url("traced", 0) == f"{query}/trace/{TRACE}"
    assert "task untraced has no trace" in url("untraced", 1)
    assert "no task 'missing'" in url("missing", 1)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["traces"], "the following arguments are required"),
        (["traces", "sideways"], "invalid choice: 'sideways'"),
        (["traces", "up", "--port", "70000"], "must be from 0 to 65535, not 70000"),
        (["traces", "up", "--otlp-port", "many"], "not a whole number"),
        (["traces", "up", "--jaeger", "/nonexistent/jaeger"], "not an executable file: '/nonexistent/jaeger'"),
        (["traces", "up", "--otlp-port", "4400", "--port", "4400"], "--otlp-port and --port must differ"),
        (["traces", "url"], "the following arguments are required: task"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(env: dict[str, str], argv: list[str], needle: str) -> None:
    done = unicore(*argv, env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert needle in done.stderr, done.stderr
    assert cmdline_pid(Path(env["UNICORE_HOME"])) is None  # nothing started


def test_a_taken_port_is_one_line_exit_1(env: dict[str, str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = unicore("traces", "up", "--otlp-port", str(port), "--port", "0", env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"OTLP port 127.0.0.1:{port} is in use" in done.stderr
    assert done.stdout == ""
