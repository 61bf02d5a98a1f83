"""Local mode's command Jobs (``unicore.launch.local_jobs``): whose ``created:<n>`` marker names a live supervisor,
the log tail a result carries, and how a finished run maps to the job's outcome."""

from __future__ import annotations

import socket
import subprocess

from unicore.commands.result import CommandResult
from unicore.launch.local_jobs import ENDED_BEFORE, held_by_live_process, log_tail, outcome_of, process_marker
from unicore.store.command_jobs import JobRequest


def result(**fields: object) -> CommandResult:
    base: dict[str, object] = {"exit_code": 0, "duration_seconds": 1.5, "stdout": "", "stderr": "",
                               "stdout_bytes": 0, "stderr_bytes": 0}
    return CommandResult(**{**base, **fields})  # type: ignore[arg-type]


def test_a_marker_names_a_live_process_of_this_host_only_while_that_process_runs() -> None:
    own = process_marker()
    assert own.startswith(f"local:{socket.gethostname()}:")
    assert not held_by_live_process(own)  # this process's own jobs are known to it; its marker is not another's
    child = subprocess.Popen(["sleep", "60"])
    try:
        with open(f"/proc/{child.pid}/stat") as stat:
            start = stat.read().rsplit(")", 1)[1].split()[19]
        live = f"local:{socket.gethostname()}:{child.pid}:{start}"
        assert held_by_live_process(live)
        assert not held_by_live_process(f"local:{socket.gethostname()}:{child.pid}:{int(start) + 1}")  # pid reused
        assert not held_by_live_process(f"local:another-host:{child.pid}:{start}")
        assert not held_by_live_process("local") and not held_by_live_process("created")
    finally:
        child.kill()
        child.wait()
    assert not held_by_live_process(live)


def test_the_log_tail_is_the_last_4_kib_of_stdout_then_stderr() -> None:
    assert log_tail(result(stdout="out", stderr="err\n")) == "out\nerr\n"
    assert log_tail(result(stdout="out\n", stderr="")) == "out\n"
    long = log_tail(result(stdout="a" * 5000 + "\n", stderr="é" * 10))
    assert len(long.encode()) <= 4096 and long.endswith("a\n" + "é" * 10)
    cut = log_tail(result(stdout="", stderr="é" * 3000 + "x"))  # a character cut at the start is dropped
    assert cut == "é" * 2047 + "x"


def test_outcomes() -> None:
    request = JobRequest(n=1, command="train", timeout_seconds=30)
    ok = outcome_of(result(stdout="done\n"), request, interrupted=False)
    assert (ok.state, ok.exit_code, ok.duration_seconds, ok.log_tail) == ("succeeded", 0, 1.5, "done\n")
    failed = outcome_of(result(exit_code=3), request, interrupted=False)
    assert (failed.state, failed.exit_code) == ("failed", 3)
    cancelled = outcome_of(result(exit_code=None, cancelled=True, signal="SIGKILL"), request, interrupted=False)
    assert (cancelled.state, cancelled.exit_code) == ("cancelled", None)
    ended = outcome_of(result(exit_code=None, cancelled=True, signal="SIGKILL"), request, interrupted=True)
    assert (ended.state, ended.reason) == ("failed", ENDED_BEFORE)
    late = outcome_of(result(exit_code=None, timed_out=True, signal="SIGTERM"), request, interrupted=False)
    assert late.state == "failed" and "timeout of 30 s" in late.reason
    killed = outcome_of(result(exit_code=None, signal="SIGKILL"), request, interrupted=False)
    assert killed.state == "failed" and "SIGKILL" in killed.reason
