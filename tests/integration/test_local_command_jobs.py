"""``submit_job`` in local mode through the CLI, as a user runs it (issue 29): ``unicore run --tool submit_job`` with
a scripted model on the real Redis; the local supervisor runs each job as a background command in Debian's real
bubblewrap sandbox (``unicore.launch.local_jobs``), the run does not return while a job is outstanding, and the job's
result wakes the task exactly once. ``unicore stop`` cancels a running job (nothing of it is left), and a job whose
``unicore run`` was killed is delivered as failed by the next run instead of running twice."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from unicore.launch.local_jobs import ENDED_BEFORE
from unicore.store import command_jobs
from unicore.store.tasks import TaskStore, connect

from tests.unicore_cli import REPO, UNICORE, unicore
from tests.waiting import wait_for


@pytest.fixture
def env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """``cli_env`` with its own HOME."""
    home = tmp_path / "user"
    home.mkdir()
    return {**cli_env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


def script_file(folder: Path, task: str, steps: list[dict[str, Any]]) -> Path:
    path = folder / f"{task}-script.yaml"
    path.write_text(yaml.safe_dump({"default": "Done.", "tasks": {task: steps}}))
    return path


def submit(command: str, timeout_seconds: int = 120) -> dict[str, Any]:
    return {"tool_use": [{"name": "submit_job", "input": {"command": command, "timeout_seconds": timeout_seconds}}]}


def texts(store: TaskStore, task: str, role: str) -> list[str]:
    return [str(block["text"]) for message in store.messages(task) if message.role == role
            for block in message.content if "text" in block]


def job_results(store: TaskStore, task: str, name: str) -> list[str]:
    """The stored user messages that carry job ``name``'s result."""
    return [text for text in texts(store, task, "user") if f"Job {name} (" in text]


def processes_with(marker: str) -> list[int]:
    """The pids whose command line holds ``marker`` (a sandbox's bwrap and the shell inside it alike)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def running(pid: int) -> bool:
    """``pid`` is a process that has not exited (a zombie has: this machine's pid 1 may be slow to reap one that
    lost its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def background_run(env: dict[str, str], folder: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``unicore run ARGS`` started in the background, its stderr in a file."""
    log = folder / f"run-{uuid.uuid4().hex[:6]}.err"
    with open(log, "wb") as err:
        process = subprocess.Popen([UNICORE, "run", *args], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    return process, log


def test_a_job_runs_in_the_background_and_its_result_wakes_the_task_once(env: dict[str, str], redis_url: str,
                                                                         tmp_path: Path) -> None:
    steps = [submit("echo started; echo 'loss=0.25' > metrics.txt"),
             {"text": "Waiting for my job."},
             {"tool_use": [{"name": "read_file", "input": {"path": "metrics.txt"}}]},
             {"echo_results": True}]
    run = unicore("run", "--tool", "submit_job", "--tool", "read_file",
                  "--script", str(script_file(tmp_path, "t", steps)), "--name", "t", "go", env=env)
    assert run.returncode == 0, run.stderr
    assert "job started: t-j1" in run.stderr and "job ended: t-j1 (succeeded, exit code 0)" in run.stderr, run.stderr

    store = TaskStore(connect(redis_url))
    (result,) = job_results(store, "t", "t-j1")
    assert "ended: succeeded, exit code 0" in result and "started" in result.split("The end of its log:", 1)[1], result
    assert "loss=0.25" in texts(store, "t", "assistant")[-1]
    assert "loss=0.25" in run.stdout  # the answer `unicore run` printed: the work its job result continued
    workspace = Path(env["UNICORE_HOME"]) / "workspaces" / "t"
    assert (workspace / "metrics.txt").read_text() == "loss=0.25\n"  # the job ran in the tree's workspace
    (state,) = command_jobs.job_states(store, "t")
    assert state.created is not None and state.created.startswith("local:")
    assert state.ended is not None and state.ended["state"] == "succeeded" and state.ended["exit_code"] == 0
    assert store.get_task("t").turns == 2  # the submitting turn and the one its result woke, nothing in between


def test_a_failing_job_reports_its_exit_code_and_stderr(env: dict[str, str], redis_url: str, tmp_path: Path) -> None:
    steps = [submit("echo boom >&2; exit 3"), {"text": "Waiting."}, {"echo": True}]
    run = unicore("run", "--tool", "submit_job", "--script", str(script_file(tmp_path, "f", steps)), "--name", "f",
                  "go", env=env)
    assert run.returncode == 0, run.stderr

    store = TaskStore(connect(redis_url))
    (result,) = job_results(store, "f", "f-j1")
    assert "ended: failed, exit code 3" in result and "boom" in result, result
    assert "failed, exit code 3" in texts(store, "f", "assistant")[-1]  # turn 2 read it
    (state,) = command_jobs.job_states(store, "f")
    assert state.ended is not None and state.ended["state"] == "failed" and state.ended["exit_code"] == 3


def test_unicore_stop_cancels_a_running_job_and_leaves_none_of_its_processes(env: dict[str, str], redis_url: str,
                                                                             tmp_path: Path) -> None:
    marker = f"never-{uuid.uuid4().hex}"
    steps = [submit(f"echo looping; while [ ! -e {marker} ]; do sleep 0.05; done"), {"text": "Waiting."},
             {"echo": True}]
    process, log = background_run(env, tmp_path, "--tool", "submit_job",
                                  "--script", str(script_file(tmp_path, "c", steps)), "--name", "c", "go")
    try:
        pids = wait_for(lambda: processes_with(marker), timeout=60, what="the job's processes")
        store = TaskStore(connect(redis_url))
        assert process.poll() is None  # the run waits for its job
        stop = unicore("stop", "c", env=env)
        assert stop.returncode == 0, stop.stderr
        assert process.wait(timeout=60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert processes_with(marker) == [] and not [pid for pid in pids if running(pid)]
    assert "suspended" in log.read_text()
    (state,) = command_jobs.job_states(store, "c")
    assert state.ended is not None and state.ended["state"] == "cancelled", state

    (queued,) = [m for m in store.inbox("c") if m.sender == "job:c-j1"]  # suspended: it waits, unread, once
    assert "ended: cancelled" in queued.content and "looping" in queued.content, queued.content
    resume = unicore("resume", "c", env=env)
    assert resume.returncode == 0, resume.stderr
    (result,) = job_results(store, "c", "c-j1")
    assert "ended: cancelled" in result
    assert "ended: cancelled" in texts(store, "c", "assistant")[-1]


def killed_run(env: dict[str, str], tmp_path: Path, task: str, marker: str, *, when: str) -> Path:
    """``unicore run`` of ``task`` whose job loops until a file named ``marker`` exists, SIGKILLed when ``when`` is
    ``"running"`` (the job's shell wrote ``runs.txt``) or ``"starting"`` (its bwrap process just appeared, before
    bwrap has bound itself to its parent); the workspace's ``runs.txt``."""
    runs = Path(env["UNICORE_HOME"]) / "workspaces" / task / "runs.txt"
    steps = [submit(f"echo ran >> runs.txt; while [ ! -e {marker} ]; do sleep 0.05; done"), {"text": "Waiting."},
             {"echo": True}]
    process, log = background_run(env, tmp_path, "--tool", "submit_job",
                                  "--script", str(script_file(tmp_path, task, steps)), "--name", task, "go")
    try:
        if when == "running":
            wait_for(lambda: runs.exists() and runs.read_text() == "ran\n", timeout=60, what="the job to start",
                     interval=0.01)
        else:
            wait_for(lambda: processes_with(marker), timeout=60, what="the job's sandbox", interval=0.002)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    return runs


def resume_delivers_failed(env: dict[str, str], redis_url: str, task: str) -> None:
    """The killed run's job is outstanding; ``unicore resume`` delivers it once as failed, ``ENDED_BEFORE``."""
    store = TaskStore(connect(redis_url))
    wait_for(lambda: store.get_task(task).turns == 1 and store.get_task(task).status != "running", timeout=60,
             what="the first turn to end")
    (state,) = command_jobs.job_states(store, task)
    assert state.created is not None and state.ended is None  # what the killed run left

    again = unicore("resume", task, env=env)  # not suspended: it runs the tree until it settles
    assert again.returncode == 0, again.stderr
    (result,) = job_results(store, task, f"{task}-j1")
    assert "ended: failed" in result and ENDED_BEFORE in result, result


def test_a_job_of_a_killed_run_dies_with_it_and_the_next_run_delivers_it_failed_not_run_twice(
        env: dict[str, str], redis_url: str, tmp_path: Path) -> None:
    marker = f"never-{uuid.uuid4().hex}"
    runs = killed_run(env, tmp_path, "k", marker, when="running")
    # bwrap --die-with-parent: the sandbox goes with its run, on its own (no later run needed)
    wait_for(lambda: not processes_with(marker), timeout=60, what="the sandbox to die with its run")
    resume_delivers_failed(env, redis_url, "k")
    assert runs.read_text() == "ran\n"  # it ran once
    assert processes_with(marker) == []


def test_a_sandbox_left_by_a_run_killed_while_it_started_is_killed_by_the_next_run(env: dict[str, str],
                                                                                      redis_url: str,
                                                                                      tmp_path: Path) -> None:
    # killed the moment bwrap was exec'd: the parent-death signal set before the exec takes the sandbox down, and a
    # sandbox that got past it anyway (its outer bwrap gone before the inner one bound itself) is found by its tag
    marker = f"never-{uuid.uuid4().hex}"
    runs = killed_run(env, tmp_path, "s", marker, when="starting")
    resume_delivers_failed(env, redis_url, "s")
    wait_for(lambda: not processes_with(marker), timeout=30, what="nothing of the job left after the next run")
    assert not runs.exists() or runs.read_text() == "ran\n"  # at most once, never again
