"""Local mode's command runner on this host: real processes, Debian's real bubblewrap (hack/bootstrap.sh installs it).
Each command is a real ``/bin/sh -c``; what the sandbox hides, keeps and kills is read from inside and outside."""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from pathlib import Path

import pytest
from unicore.commands.local_runner import LocalRunner, scrubbed_environment
from unicore.commands.result import CommandResult
from unicore.errors import ToolError

from tests.waiting import wait_for

MODES = [pytest.param(True, id="sandbox"), pytest.param(False, id="no-sandbox")]


def run(runner: LocalRunner, command: str, *, workdir: str = "", timeout: float = 30.0,
        cancel: threading.Event | None = None, sink: list[tuple[str, str]] | None = None) -> CommandResult:
    on_output = None if sink is None else (lambda stream, text: sink.append((stream, text)))
    return runner.run(command, workdir=workdir, timeout_seconds=timeout, cancel=cancel or threading.Event(),
                      on_output=on_output)


def alive(token: str) -> list[int]:
    """Live (not zombie) `sleep` processes whose argument is ``token``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmdline.split(b"\0")[:2] == [b"sleep", token.encode()] and state != "Z":
            pids.append(int(entry))
    return pids


def sleeper() -> str:
    """A `sleep` argument no other process on this host has: 600.<random digits> seconds."""
    token = f"600.{uuid.uuid4().int % 10**9:09d}"
    print(f"sleeper token {token}")
    return token


def run_two_sleeps(runner: LocalRunner, command: str, token: str, *, timeout: float,
                   cancel: threading.Event | None = None) -> CommandResult:
    """Runs ``command`` (which starts two `sleep token`) in a thread; returns its result once both sleeps were seen
    running and the run has ended."""
    results: list[CommandResult] = []
    thread = threading.Thread(target=lambda: results.append(run(runner, command, timeout=timeout, cancel=cancel)))
    thread.start()
    try:
        wait_for(lambda: len(alive(token)) == 2, timeout=20, what="both sleeps running")
        if cancel is not None:
            cancel.set()
    finally:
        thread.join(timeout=30)
    assert not thread.is_alive()
    [result] = results
    return result


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    return ws


@pytest.mark.parametrize("sandbox", MODES)
def test_exit_codes_tails_and_live_output(workspace: Path, sandbox: bool) -> None:
    runner = LocalRunner(workspace, sandbox=sandbox)
    sink: list[tuple[str, str]] = []
    result = run(runner, "echo out; echo err >&2; pwd; exit 7", workdir="sub", sink=sink)
    assert (result.exit_code, result.signal, result.timed_out, result.cancelled) == (7, None, False, False)
    assert result.stdout == f"out\n{workspace / 'sub'}\n" and result.stderr == "err\n"
    assert (result.stdout_bytes, result.stderr_bytes) == (len(result.stdout), 4)
    assert "".join(t for s, t in sink if s == "stdout") == result.stdout
    assert "".join(t for s, t in sink if s == "stderr") == result.stderr
    ok = run(runner, "true", workdir=str(workspace))
    assert ok.exit_code == 0 and ok.outcome == "ok" and ok.stdout == ""
    assert run(runner, "exit 1").outcome == "failed"


@pytest.mark.parametrize("sandbox", MODES)
def test_twenty_megabytes_give_a_capped_tail_with_the_byte_totals(workspace: Path, sandbox: bool) -> None:
    runner = LocalRunner(workspace, sandbox=sandbox)
    sink: list[tuple[str, str]] = []
    size = 20_000_000
    result = run(runner, f"head -c {size} /dev/zero | tr '\\0' a; printf END; head -c {size} /dev/zero >&2",
                 sink=sink)
    assert result.exit_code == 0
    assert (result.stdout_bytes, result.stderr_bytes) == (size + 3, size)
    assert len(result.stdout) == result.tail_bytes and result.stdout.endswith("a" * 100 + "END")
    assert len(result.stderr) == result.tail_bytes and set(result.stderr) == {"\0"}
    assert sum(len(t) for s, t in sink if s == "stdout") == size + 3
    assert "only the last 16 KiB of 20,000,003 bytes" in result.for_model()["stdout_truncated"]


def test_sandbox_hides_the_home_and_the_runtime_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    ws = home / "work"
    ws.mkdir(parents=True)
    (home / ".unicore").mkdir()
    secret = home / ".unicore" / "redis-password"
    secret.write_text("s3cret\n")
    (home / "notes.txt").write_text("private\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("UNICORE_HOME", raising=False)
    runner = LocalRunner(ws)
    assert run(runner, f"cat {secret}").exit_code != 0
    assert run(runner, f"cat {home / 'notes.txt'}").exit_code != 0
    listing = run(runner, 'echo "$HOME"; ls -A "$HOME"; touch "$HOME/scratch" && echo home-writable')
    assert listing.stdout == f"{home}\nwork\nhome-writable\n"  # a tmpfs with the workspace's mount point only
    assert secret.read_text() == "s3cret\n" and not (home / "scratch").exists()
    assert LocalRunner(ws, sandbox=False).run(f"cat {secret}", workdir="", timeout_seconds=10,
                                              cancel=threading.Event()).stdout == "s3cret\n"


def test_workspace_holding_the_runtime_home_shows_all_but_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    state = ws / ".state"
    state.mkdir(parents=True)
    (state / "secret").write_text("s3cret\n")
    (ws / "visible.txt").write_text("hello\n")
    monkeypatch.setenv("UNICORE_HOME", str(state))
    result = run(LocalRunner(ws), f"cat visible.txt; ls -A {state}; cat {state / 'secret'}")
    assert result.stdout == "hello\n" and result.exit_code != 0 and "No such file" in result.stderr
    assert (state / "secret").read_text() == "s3cret\n"
    # the workspace is the home itself: bound as it is, but its .unicore is still hidden
    monkeypatch.setenv("HOME", str(ws))
    monkeypatch.delenv("UNICORE_HOME")
    (ws / ".unicore").mkdir()
    (ws / ".unicore" / "key").write_text("k\n")
    inside = run(LocalRunner(ws), 'echo "$HOME"; cat visible.txt; ls -A .unicore')
    assert inside.stdout == f"{ws}\nhello\n" and inside.exit_code == 0


@pytest.mark.parametrize("sandbox", MODES)
def test_runtime_variables_never_reach_the_command(workspace: Path, monkeypatch: pytest.MonkeyPatch,
                                                   sandbox: bool) -> None:
    for name in ("REDIS_URL", "UNICORE_X", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
                 "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, f"value-of-{name}")
    monkeypatch.setenv("USER_THING", "kept")
    result = run(LocalRunner(workspace, sandbox=sandbox), "env")
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert "value-of-" not in result.stdout
    if sandbox:
        assert names <= {"PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_", "OLDPWD"}, names
        assert {"PATH", "HOME", "LANG", "TERM"} <= names
    else:
        assert "USER_THING=kept" in result.stdout.splitlines()


def test_scrubbed_environment_rule() -> None:
    env = {"REDIS_URL": "r", "UNICORE_HOME": "h", "OPENAI_BASE_URL": "u", "OPENAI_API_KEY": "k", "X_API_KEY": "k",
           "AWS_REGION": "a", "MY_KEY": "m", "PATH": "/bin", "API_KEY_HINT": "kept"}
    assert scrubbed_environment(env, extra=["MY_KEY"]) == {"PATH": "/bin", "API_KEY_HINT": "kept"}


@pytest.mark.parametrize("sandbox", MODES)
def test_workspace_is_writable_from_inside(workspace: Path, sandbox: bool) -> None:
    result = run(LocalRunner(workspace, sandbox=sandbox), "echo data > out.txt && mkdir -p deep && echo x > deep/f",
                 workdir="sub")
    assert result.exit_code == 0, result.stderr
    assert (workspace / "sub" / "out.txt").read_text() == "data\n"
    assert (workspace / "sub" / "deep" / "f").read_text() == "x\n"


def test_the_rest_of_the_filesystem_is_read_only(workspace: Path) -> None:
    name = f"unicore-sandbox-{uuid.uuid4().hex}"
    targets = [Path("/usr") / name, Path("/etc") / name]
    try:
        for target in targets:
            result = run(LocalRunner(workspace), f"echo x > {target}")
            assert result.exit_code != 0 and "Read-only file system" in result.stderr, result
            assert not target.exists()
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


@pytest.mark.parametrize("sandbox", MODES)
def test_workdir_must_be_an_existing_directory_inside_the_workspace(workspace: Path, tmp_path: Path,
                                                                   sandbox: bool) -> None:
    (workspace / "escape").symlink_to(tmp_path)
    runner = LocalRunner(workspace, sandbox=sandbox)
    for workdir in ("..", "/etc", "escape", str(tmp_path), "sub/../../"):
        with pytest.raises(ToolError, match="outside the workspace") as info:
            run(runner, "touch ran", workdir=workdir)
        assert "\n" not in str(info.value)
    with pytest.raises(ToolError, match="does not exist"):
        run(runner, "touch ran", workdir="missing")
    assert not list(tmp_path.rglob("ran"))


@pytest.mark.parametrize("sandbox", MODES)
def test_timeout_kills_the_whole_group(workspace: Path, sandbox: bool) -> None:
    token = sleeper()
    result = run_two_sleeps(LocalRunner(workspace, sandbox=sandbox), f"sleep {token} & sleep {token}; wait", token,
                            timeout=1.0)
    assert result.timed_out and result.outcome == "timed_out"
    assert (result.exit_code, result.signal) == (None, "SIGTERM")
    assert 1.0 <= result.duration_seconds < 2.5
    assert alive(token) == []


@pytest.mark.parametrize("sandbox", MODES)
def test_timeout_kills_what_ignores_sigterm_two_seconds_later(workspace: Path, sandbox: bool) -> None:
    token = sleeper()
    result = run_two_sleeps(LocalRunner(workspace, sandbox=sandbox),
                            f"trap '' TERM; sleep {token} & sleep {token}; wait", token, timeout=0.5)
    assert result.timed_out and (result.exit_code, result.signal) == (None, "SIGKILL")
    assert 2.5 <= result.duration_seconds < 4.0
    assert alive(token) == []


@pytest.mark.parametrize("sandbox", MODES)
def test_cancel_kills_and_says_cancelled(workspace: Path, sandbox: bool) -> None:
    token = sleeper()
    result = run_two_sleeps(LocalRunner(workspace, sandbox=sandbox), f"sleep {token} & sleep {token}; wait", token,
                            timeout=60, cancel=threading.Event())
    assert result.cancelled and not result.timed_out and result.outcome == "cancelled"
    assert (result.exit_code, result.signal) == (None, "SIGKILL") and result.duration_seconds < 20
    assert alive(token) == []


@pytest.mark.parametrize("sandbox", MODES)
def test_a_background_child_holding_the_pipes_ends_with_the_command(workspace: Path, sandbox: bool) -> None:
    token = sleeper()
    # the shell prints `started` once the background sleep runs, then exits while the sleep holds its pipes
    result = run(LocalRunner(workspace, sandbox=sandbox),
                 f"sleep {token} & until tr '\\0' ' ' </proc/$!/cmdline | grep -q {token}; do :; done; echo started")
    assert (result.exit_code, result.stdout, result.timed_out) == (0, "started\n", False)
    assert result.duration_seconds < 10
    assert alive(token) == []


def test_no_sandbox_needs_no_bwrap(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://secret")
    monkeypatch.setenv("UNICORE_X", "x")
    result = run(LocalRunner(workspace, sandbox=False, bwrap="/nonexistent/bwrap"), "env; echo ran > f")
    assert result.exit_code == 0 and (workspace / "f").read_text() == "ran\n"
    assert "REDIS_URL" not in result.stdout and "UNICORE_X" not in result.stdout


def test_missing_bwrap_names_the_way_out(workspace: Path) -> None:
    with pytest.raises(ToolError) as info:
        run(LocalRunner(workspace, bwrap="/nonexistent/bwrap"), "touch ran")
    message = str(info.value)
    assert "\n" not in message and "--no-sandbox" in message and "UNICORE_COMMAND_SANDBOX=0" in message
    assert "/nonexistent/bwrap" in message and not (workspace / "ran").exists()


def test_bwrap_that_cannot_create_namespaces_names_the_way_out(workspace: Path, tmp_path: Path) -> None:
    # what bwrap says inside an unprivileged container; the probe runs it once and keeps its reason
    fake = tmp_path / "bwrap-no-userns"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel "
                    "does not allow non-privileged user namespaces.' >&2\nexit 1\n")
    fake.chmod(0o755)
    for _ in range(2):
        with pytest.raises(ToolError) as info:
            run(LocalRunner(workspace, bwrap=str(fake)), "touch ran")
        message = str(info.value)
        assert "\n" not in message and "No permissions to creating new namespace" in message
        assert "--no-sandbox" in message and "UNICORE_COMMAND_SANDBOX=0" in message
    assert not (workspace / "ran").exists()


def test_bwrap_failing_after_the_probe_is_a_tool_error(workspace: Path, tmp_path: Path) -> None:
    real = shutil.which("bwrap")
    assert real is not None, "hack/bootstrap.sh installs Debian's bubblewrap"
    fake = tmp_path / "bwrap-flaky"  # passes the probe (which runs `exit 0`), fails at the command's mounts
    fake.write_text(f'#!/bin/sh\nfor a; do last=$a; done\n[ "$last" = "exit 0" ] && exec {real} "$@"\n'
                    "echo \"bwrap: Can't mount tmpfs on /newroot/tmp: Operation not permitted\" >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(ToolError, match="Can't mount tmpfs.*--no-sandbox.*UNICORE_COMMAND_SANDBOX=0"):
        run(LocalRunner(workspace, bwrap=str(fake)), "touch ran")
