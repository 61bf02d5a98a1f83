"""Child processes in their own process groups, stopped with SIGTERM then SIGKILL, never left behind.

Every child runs in a new session (its pid is its process-group id) and, on Linux, gets ``PR_SET_PDEATHSIG``
SIGKILL so that it dies with its parent even if the parent is killed without a chance to clean up.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unicore_devcluster.log import logger

_PR_SET_PDEATHSIG = 1
_prctl: Any
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent() -> None:  # runs in the child between fork and exec: keep it tiny
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces; fields after the closing parenthesis are plain
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # zombie: as good as gone
        return None
    return int(fields[19])


def alive(pid: int, started: int | None = None) -> bool:
    """True while ``pid`` runs (and, when ``started`` is given, is still the same process)."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def terminate(pid: int, started: int | None, grace: float) -> None:
    """SIGTERM the process group of ``pid``; SIGKILL it if still alive after ``grace`` seconds."""
    if not alive(pid, started):
        return
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid, started):
        signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while alive(pid, started) and time.monotonic() < deadline:
            time.sleep(0.02)


@dataclass
class Child:
    """One running child process."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: int | None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the group, wait up to ``grace`` s, then SIGKILL; return the exit code."""
        if self.popen.poll() is None:
            logger.debug("stopping %s (pid %d)", self.name, self.pid)
            signal_group(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "%s (pid %d) ignored SIGTERM for %.1fs; sending SIGKILL", self.name, self.pid, grace
                )
                signal_group(self.pid, signal.SIGKILL)
                self.popen.wait()
        # members of the group that outlived the leader
        signal_group(self.pid, signal.SIGKILL)
        return self.popen.returncode


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = True,
) -> Child:
    """Start ``argv`` in a new session with stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(  # noqa: S603 - argv is built by this package
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509
            close_fds=True,
        )
    return Child(name=name, popen=popen, log_path=log_path, started=start_time(popen.pid))
