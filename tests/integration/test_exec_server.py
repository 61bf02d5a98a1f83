"""The workbench's exec server (``unicore-exec``, exec-server/) built by hack/build-exec-server.sh and run here as a
real process on a unix socket, driven through its Python client (``unicore.commands.exec_client.ExecServerRunner``)
or a raw socket: exit codes, capped tails of a 20 MB output, workdirs, the timeout's and the cancel's kill of the
whole process group (checked in /proc), a disconnected client, a slow client that never blocks the command, the
self-check's one-line failure, SIGTERM to the server, ``install``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from unicore.commands.exec_client import GONE, ExecServerRunner
from unicore.commands.result import TAIL_BYTES, CommandResult
from unicore.errors import ToolError

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def exec_binary() -> Path:
    out = subprocess.run([str(ROOT / "hack/build-exec-server.sh")], check=True, capture_output=True, text=True,
                         timeout=300).stdout
    path = Path(out.strip().splitlines()[-1])
    assert path.is_file() and os.access(path, os.X_OK), path
    return path


@dataclass
class Server:
    proc: subprocess.Popen[str]
    socket: Path
    workspace: Path

    @property
    def dir(self) -> Path:
        return self.socket.parent

    def runner(self, connect_timeout: float = 10.0) -> ExecServerRunner:
        return ExecServerRunner(self.socket, connect_timeout=connect_timeout)


@dataclass
class Output:
    """An on_output sink that keeps what it was given."""

    chunks: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, stream: str, text: str) -> None:
        self.chunks.append((stream, text))

    def text(self, stream: str) -> str:
        return "".join(text for name, text in self.chunks if name == stream)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path (a unix socket's path is at most 107 bytes; pytest's tmp_path can be longer)."""
    path = Path(tempfile.mkdtemp(prefix="ue-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_server(exec_binary: Path, short_dir: Path) -> Iterator[Callable[..., Server]]:
    """Starts ``unicore-exec serve`` (waits for its ready file unless told not to); stops every one at the end."""
    procs: list[subprocess.Popen[str]] = []

    def start(*extra: str, env: dict[str, str] | None = None, wait_ready: bool = True) -> Server:
        workspace = short_dir / "ws"
        workspace.mkdir(exist_ok=True)
        (short_dir / "exec").mkdir(exist_ok=True)
        sock = short_dir / "exec" / "exec.sock"
        proc = subprocess.Popen([str(exec_binary), "serve", "--socket", str(sock), "--workdir", str(workspace),
                                 *extra], stderr=subprocess.PIPE, text=True, env=env)
        procs.append(proc)
        server = Server(proc, sock, workspace)
        if wait_ready:
            wait_for(lambda: (sock.parent / "ready").is_file() or proc.poll() is not None, timeout=10,
                     what="the exec server's ready file")
            assert proc.poll() is None, proc.communicate()[1]
        return server

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    return start_server()


def run(server: Server, command: str, *, workdir: str = "", timeout: float = 30.0,
        cancel: threading.Event | None = None, on_output: Output | None = None) -> CommandResult:
    return server.runner().run(command, workdir=workdir or str(server.workspace), timeout_seconds=timeout,
                               cancel=cancel or threading.Event(), on_output=on_output)


def group_alive(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that are not zombies (read from /proc)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


class Background:
    """A run in a thread: its result or its exception once it ends."""

    def __init__(self, target: Callable[[], CommandResult]) -> None:
        self.result: CommandResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self.thread.start()

    def _run(self, target: Callable[[], CommandResult]) -> None:
        try:
            self.result = target()
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 30.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the run did not end"


def pids_from(output: Output, count: int) -> list[int]:
    """The first ``count`` numbers the command printed (it echoes its pids first), once they are there."""

    def numbers() -> list[int] | None:
        lines = output.text("stdout").split("\n")[:-1]  # complete lines only
        return [int(x) for x in lines[:count]] if len(lines) >= count else None

    return wait_for(numbers, timeout=10, what=f"{count} pid(s) on the command's stdout")


# ------------------------------------------------------------------------------------------------ results
def test_exit_codes_streams_and_live_output(server: Server) -> None:
    output = Output()
    result = run(server, "echo out; echo err >&2; printf 'h\\303\\251llo'; exit 7", on_output=output)
    assert (result.exit_code, result.signal, result.timed_out, result.cancelled) == (7, None, False, False)
    assert result.stdout == "out\nhéllo" and result.stderr == "err\n"
    assert (result.stdout_bytes, result.stderr_bytes) == (10, 4)
    assert result.outcome == "failed" and 0 <= result.duration_seconds < 10
    assert output.text("stdout") == "out\nhéllo" and output.text("stderr") == "err\n"
    ok = run(server, "true")
    assert (ok.exit_code, ok.outcome, ok.stdout, ok.stdout_bytes) == (0, "ok", "", 0)
    killed = run(server, "kill -USR1 $$")
    assert (killed.exit_code, killed.signal, killed.outcome) == (None, "SIGUSR1", "failed")


def test_the_command_gets_the_servers_environment_and_no_stdin(start_server: Callable[..., Server]) -> None:
    server = start_server(env={**os.environ, "WORKBENCH_TOKEN": "t-123"})
    result = run(server, "echo \"$WORKBENCH_TOKEN\"; cat; echo after-cat", timeout=10)
    assert result.stdout == "t-123\nafter-cat\n" and result.exit_code == 0


def test_a_20_mb_output_returns_the_capped_tail_and_the_byte_totals(server: Server) -> None:
    command = "seq 1 2500000; echo to-stderr >&2; printf 'last line'"
    expected = subprocess.run(["sh", "-c", command], capture_output=True, check=True).stdout
    assert len(expected) > 18_000_000
    output = Output()
    result = run(server, command, on_output=output, timeout=60)
    assert result.exit_code == 0
    assert result.stdout_bytes == len(expected) and result.stdout == expected[-TAIL_BYTES:].decode()
    assert result.stdout.endswith("2500000\nlast line") and len(result.stdout) == TAIL_BYTES
    assert result.stderr == "to-stderr\n" and result.stderr_bytes == 10
    shown = result.for_model()
    assert shown["stdout_truncated"] == f"only the last 16 KiB of {len(expected):,} bytes are shown"
    assert "stderr_truncated" not in shown
    # live chunks are at most 16 KiB as read, in order (some may be dropped when the client lags, never reordered)
    chunks = [text for name, text in output.chunks if name == "stdout"]
    assert chunks and max(len(text.encode()) for text in chunks) <= 16 * 1024
    assert expected.decode().startswith(chunks[0])


def test_a_multibyte_character_cut_by_a_read_is_never_split_in_the_live_chunks(server: Server) -> None:
    expected = "a" + "é" * 100_000  # 200,001 bytes: a 16 KiB read ends inside an é
    output = Output()
    result = run(server, "python3 -c \"import sys; sys.stdout.write('a' + 'é' * 100000)\"", on_output=output,
                 timeout=60)
    assert result.stdout_bytes == len(expected.encode())
    assert output.text("stdout") == expected  # no U+FFFD where a read cut a character
    invalid = run(server, "printf 'x\\377y'")
    assert invalid.stdout == "x\ufffdy" and invalid.stdout_bytes == 3


def test_workdir_absolute_relative_and_missing(server: Server) -> None:
    sub = server.workspace / "sub dir"
    sub.mkdir()
    assert run(server, "pwd", workdir=str(sub)).stdout == f"{sub}\n"
    assert run(server, "pwd", workdir="sub dir").stdout == f"{sub}\n"  # relative to the server's --workdir
    with pytest.raises(ToolError, match=r"^workdir .*/ws/missing: no such file or directory$"):
        run(server, "pwd", workdir=str(server.workspace / "missing"))
    (server.workspace / "file").write_text("x")
    with pytest.raises(ToolError, match="not a directory"):
        run(server, "pwd", workdir=str(server.workspace / "file"))


def test_two_commands_run_at_once_on_two_connections(server: Server) -> None:
    flag = server.workspace / "flag"
    first = Background(lambda: run(server, f"while [ ! -e '{flag}' ]; do sleep 0.01; done; echo saw-it", timeout=20))
    second = run(server, f"touch '{flag}'; echo made-it")
    first.join()
    assert second.stdout == "made-it\n"
    assert first.result is not None and first.result.stdout == "saw-it\n" and first.result.exit_code == 0


# ------------------------------------------------------------------------------------- killing the group
def test_a_timeout_kills_the_whole_process_group(server: Server) -> None:
    output = Output()
    began = time.monotonic()
    result = run(server, "sleep 600 & echo $$; echo $!; sleep 600; wait", timeout=1.0, on_output=output)
    elapsed = time.monotonic() - began
    shell, child = (int(x) for x in result.stdout.split())
    assert result.timed_out and result.outcome == "timed_out" and not result.cancelled
    assert (result.exit_code, result.signal) == (None, "SIGTERM")
    assert 1.0 <= result.duration_seconds < 3.0 and elapsed < 5.0
    assert child != shell
    wait_for(lambda: not group_alive(shell), timeout=5, what="no process left in the command's group")


def test_a_timeout_ignored_by_the_command_is_followed_by_sigkill_2_s_later(server: Server) -> None:
    result = run(server, "trap '' TERM; echo $$; sleep 600 & sleep 600; wait", timeout=0.5)
    shell = int(result.stdout.split()[0])
    assert result.timed_out and (result.exit_code, result.signal) == (None, "SIGKILL")
    assert 2.5 <= result.duration_seconds < 5.0
    wait_for(lambda: not group_alive(shell), timeout=5, what="no process left in the command's group")


def test_a_background_child_holding_the_pipes_is_killed_1_s_after_the_shell_exits(server: Server) -> None:
    result = run(server, "sleep 600 & echo $$; exit 4", timeout=30)
    shell = int(result.stdout.split()[0])
    assert (result.exit_code, result.timed_out, result.cancelled) == (4, False, False)
    assert 1.0 <= result.duration_seconds < 3.0
    wait_for(lambda: not group_alive(shell), timeout=5, what="no process left in the command's group")


def test_cancel_kills_the_group_and_says_cancelled(server: Server) -> None:
    output, cancel = Output(), threading.Event()
    job = Background(lambda: run(server, "echo $$; sleep 600 & sleep 600; wait", cancel=cancel, on_output=output,
                                 timeout=300))
    (shell,) = pids_from(output, 1)
    assert len(group_alive(shell)) == 3  # the shell and its two sleeps
    cancelled_at = time.monotonic()
    cancel.set()
    job.join(timeout=10)
    assert job.error is None and job.result is not None
    assert time.monotonic() - cancelled_at < 2.0
    assert job.result.cancelled and job.result.outcome == "cancelled" and not job.result.timed_out
    assert (job.result.exit_code, job.result.signal) == (None, "SIGKILL")
    wait_for(lambda: not group_alive(shell), timeout=5, what="no process left in the command's group")


def test_a_client_that_disconnects_has_its_command_killed(server: Server) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(server.socket))
        sock.sendall(json.dumps({"command": "echo $$; sleep 600 & sleep 600; wait", "workdir": "",
                                 "timeout_seconds": 300}).encode() + b"\n")
        with sock.makefile("rb") as reader:
            first = json.loads(reader.readline())
        assert first["type"] == "output" and first["stream"] == "stdout"
        shell = int(first["data"].split()[0])
        wait_for(lambda: len(group_alive(shell)) == 3, timeout=10, what="the command's three processes")
    wait_for(lambda: not group_alive(shell), timeout=5, what="no process left after the client went away")
    assert server.proc.poll() is None


def test_a_client_that_does_not_read_never_blocks_the_command(server: Server) -> None:
    done = server.workspace / "done"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(server.socket))
        sock.sendall(json.dumps({"command": f"head -c 20000000 /dev/zero; touch '{done}'",
                                 "timeout_seconds": 60}).encode() + b"\n")
        # nothing read: far more than the socket buffers hold is written, and the command still ends
        wait_for(done.exists, timeout=30, what="the command's end while its client reads nothing")
        lines = [json.loads(line) for line in sock.makefile("rb")]
    end = lines[-1]
    assert end["type"] == "exit" and end["exit_code"] == 0 and end["stdout_bytes"] == 20_000_000
    assert end["stdout"] == "\0" * TAIL_BYTES
    live = sum(len(line["data"]) for line in lines[:-1])
    assert live < 20_000_000  # live chunks were dropped, the totals and the tail were not


def test_sigterm_to_the_server_kills_running_commands(start_server: Callable[..., Server]) -> None:
    # --stop-grace holds the server between its kill and its exit: the killed command's end comes in that window,
    # and the client must still hear that the server went away, not "killed by SIGKILL" (CI saw that under load).
    server = start_server("--stop-grace", "1s")
    output = Output()
    job = Background(lambda: run(server, "echo $$; sleep 600 & sleep 600; wait", on_output=output, timeout=300))
    (shell,) = pids_from(output, 1)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=10) == 0
    assert "killed 1 running command(s)" in server.proc.communicate()[1]
    wait_for(lambda: not group_alive(shell), timeout=5, what="no process left after the server's SIGTERM")
    job.join(timeout=10)
    assert isinstance(job.error, ToolError) and str(job.error) == GONE
    assert not server.socket.exists() and not (server.dir / "ready").exists()


# ------------------------------------------------------------------------------------- start and connect
def test_serve_listens_on_a_0600_socket_replacing_a_stale_one(start_server: Callable[..., Server],
                                                               short_dir: Path) -> None:
    (short_dir / "exec").mkdir()
    (short_dir / "exec" / "exec.sock").write_text("stale")
    (short_dir / "exec" / "failed").write_text("from an earlier server\n")
    server = start_server()
    assert stat.S_ISSOCK(server.socket.stat().st_mode) and stat.S_IMODE(server.socket.stat().st_mode) == 0o600
    assert (server.dir / "ready").read_text() == f"{server.proc.pid}\n"
    assert not (server.dir / "failed").exists()
    assert run(server, "echo hi").stdout == "hi\n"


@pytest.mark.parametrize("broken", ["shell", "workdir"])
def test_a_failed_self_check_writes_one_line_and_exits_3(start_server: Callable[..., Server], short_dir: Path,
                                                         broken: str) -> None:
    if broken == "shell":
        shell = short_dir / "not-executable-sh"
        shell.write_text("#!/bin/sh\n")
        shell.chmod(0o644)
        server = start_server("--shell", str(shell), wait_ready=False)
        uid = os.getuid()
        expected = f"workbench image cannot run {shell} as uid {uid} ({'root' if uid == 0 else 'non-root'}): " \
                   "permission denied"
    else:
        server = start_server("--workdir", str(short_dir / "nowhere"), wait_ready=False)
        expected = f"workbench workdir {short_dir / 'nowhere'} is not usable as uid {os.getuid()}"
    assert server.proc.wait(timeout=10) == 3
    stderr = server.proc.communicate()[1]
    failed = (server.dir / "failed").read_text()
    assert failed.startswith(expected) and failed.count("\n") == 1 and failed.endswith("\n")
    assert stderr == failed
    assert not server.socket.exists() and not (server.dir / "ready").exists()
    with pytest.raises(ToolError) as caught:
        run(server, "true")
    assert str(caught.value) == f"workbench unusable: {failed.strip()}"


def test_the_client_waits_for_a_server_that_is_still_starting(start_server: Callable[..., Server],
                                                              short_dir: Path) -> None:
    sock = short_dir / "exec" / "exec.sock"
    job = Background(lambda: ExecServerRunner(sock, connect_timeout=20).run(
        "echo late", workdir=str(short_dir / "ws"), timeout_seconds=10, cancel=threading.Event()))
    assert job.thread.is_alive()
    start_server()
    job.join()
    assert job.error is None and job.result is not None and job.result.stdout == "late\n"


def test_no_server_is_a_tool_error_naming_the_socket(short_dir: Path) -> None:
    sock = short_dir / "exec.sock"
    began = time.monotonic()
    with pytest.raises(ToolError, match=rf"^the workbench's exec server is not reachable at {sock}: "
                                        "No such file or directory$"):
        ExecServerRunner(sock, connect_timeout=0.3).run("true", workdir="/", timeout_seconds=1,
                                                        cancel=threading.Event())
    assert 0.3 <= time.monotonic() - began < 3


# -------------------------------------------------------------------------------------------------- CLI
def test_install_copies_the_binary_and_no_arguments_print_the_usage(exec_binary: Path, short_dir: Path) -> None:
    dest = short_dir / "unicore-exec"
    subprocess.run([str(exec_binary), "install", str(dest)], check=True, timeout=10)
    assert dest.read_bytes() == exec_binary.read_bytes() and stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert sorted(p.name for p in short_dir.iterdir()) == ["unicore-exec"]  # no temporary file left
    bare = subprocess.run([str(dest)], capture_output=True, text=True, timeout=10)
    assert bare.returncode == 2 and bare.stderr.startswith("usage:") and "serve --socket PATH" in bare.stderr
    assert subprocess.run([str(dest), "serve"], capture_output=True, timeout=10).returncode == 2
