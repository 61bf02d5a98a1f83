"""Local mode's suspend, resume and stop (``unicore.store.suspension``, the local supervisor, ``unicore
suspend|resume|stop``): real redis-server, the CLI and its turn processes as subprocesses, scripted model."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from unicore.api.schema import TaskSpec
from unicore.errors import TaskNotFound
from unicore.store import suspension
from unicore.store.activations import ActivationConsumer
from unicore.store.gates import open_gate
from unicore.store.reads import busy
from unicore.store.tasks import TaskStore, connect

from tests.unicore_cli import UNICORE, unicore
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CANCELLED = "turn cancelled (SIGTERM) at a safe point"


def background(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([UNICORE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    return TaskStore(connect(redis_url))


def script_file(tmp_path: Path, script: dict) -> str:
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(script))
    return str(path)


def test_the_flag_keeps_a_task_from_running_and_a_missing_task_is_not_created(store: TaskStore) -> None:
    store.create_task(TaskSpec(id="p", prompt="go"))
    consumer = ActivationConsumer(store.redis, "probe", "probe-1")
    consumer.ensure_group()
    consumer.ack(consumer.read(count=100, block=None))  # only what comes after
    assert store.needs_turn("p") and busy(store, "p")

    assert suspension.suspend(store, "p") is True
    assert suspension.suspend(store, "p") is False  # already suspended: nothing changes
    record = store.get_task("p")
    assert record.suspended and record.suspended_at > 0
    assert not store.needs_turn("p") and not busy(store, "p")  # the prompt waits in the inbox
    assert store.pending_count("p") == 1
    assert [e.task_id for e in consumer.read(count=100, block=None)] == ["p", "p"]  # supervisors look at once

    store.create_task(TaskSpec(id="p-c", parent="p", prompt="child work"))  # spawned while the parent is stopped
    assert store.get_task("p-c").suspended and not store.needs_turn("p-c")

    assert suspension.resume(store, "p") is True
    assert not store.get_task("p").suspended and store.needs_turn("p")
    assert store.get_task("p-c").suspended  # resume acts on one task

    with pytest.raises(TaskNotFound):
        suspension.suspend(store, "nobody")
    assert not store.exists("nobody")  # the flag did not make a half record


def test_stop_suspends_every_descendant(store: TaskStore) -> None:
    store.create_task(TaskSpec(id="r", prompt="go"))
    for child, parent in (("r-a", "r"), ("r-b", "r"), ("r-a-x", "r-a")):
        store.create_task(TaskSpec(id=child, parent=parent, prompt="work"))
    suspension.suspend(store, "r-b")  # already suspended: not reported again
    assert sorted(suspension.stop(store, "r")) == ["r", "r-a", "r-a-x"]
    assert all(suspension.suspended_flags(store.redis, ["r", "r-a", "r-b", "r-a-x"]))
    assert not any(store.needs_turn(t) for t in ("r", "r-a", "r-b", "r-a-x"))


def test_suspend_stops_the_running_turn_and_resume_finishes_it(cli_env, store, tmp_path) -> None:
    # the model's answer waits at a gate the test opens after the suspend: the turn is stopped inside its model call
    script = script_file(tmp_path, {"tasks": {"slow": [{"gate": "suspended", "text": "slow answer"}]}})
    run = background("run", "--script", script, "--name", "slow", "--no-summary", "go", env=cli_env)
    try:
        wait_for(lambda: store.lease_holder("slow"), timeout=60, what="the turn to run")
        suspended = unicore("suspend", "slow", env=cli_env)
        assert suspended.returncode == 0 and suspended.stdout == "slow suspended\n", suspended.stderr
        _out, err = run.communicate(timeout=60)  # the tree settled: its only task is suspended
    finally:
        run.kill()
    assert "turn stopped: slow (suspended" in err
    assert "slow is suspended (resume: unicore resume slow)" in err
    record = store.get_task("slow")
    assert record.suspended and record.last_error == CANCELLED  # recorded as a turn pod records its SIGTERM
    assert record.last_response == "" and "ended_at" not in store.turn_meta("slow", 0)  # unfinished: continues later
    assert store.lease_holder("slow") is None and store.message_count("slow") == 1  # the prompt only

    queued = unicore("send", "slow", "meanwhile", "--no-wait", env=cli_env)
    assert queued.returncode == 0 and not store.needs_turn("slow")  # waits in the inbox
    assert "[idle, suspended]" in unicore("tree", "slow", env=cli_env).stdout

    open_gate(store.redis, "slow", "suspended")  # the resumed turn's model call answers at once
    resumed = unicore("resume", "slow", env=cli_env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("slow resumed\n")
    record = store.get_task("slow")
    assert not record.suspended and record.status == "idle" and record.last_error == ""
    assert record.turns == 1 and record.last_response == "slow answer"  # the cancelled turn, finished
    texts = [b.get("text") for m in store.messages("slow") for b in m.content]
    assert texts.count("go") == 1 and texts.count("meanwhile") == 1 and "slow answer" in texts


def test_stop_ends_a_trees_running_children_and_resume_acts_on_one_task(cli_env, store, tmp_path) -> None:
    script = script_file(tmp_path, {
        "default": "Done.",
        "tasks": {
            "tree": [{"tool_use": [{"name": "spawn_task", "input": {"name": "a", "prompt": "work a"}},
                                   {"name": "spawn_task", "input": {"name": "b", "prompt": "work b"}}]},
                     {"text": "waiting for helpers"}],
            "tree-*": [{"sleep": 60, "text": "helper done"}],
        },
    })
    run = background("run", "--script", script, "--name", "tree", "--no-summary", "go", env=cli_env)
    try:
        wait_for(lambda: store.lease_holder("tree-a") and store.lease_holder("tree-b"), timeout=60,
                 what="both children to run")
        stopped = unicore("stop", "tree", env=cli_env)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout == "stopped tree: suspended tree, tree-a, tree-b\n"
        _out, err = run.communicate(timeout=60)  # returns well before the children's 60 s answers
    finally:
        run.kill()
    assert "turn stopped: tree-a (suspended" in err and "turn stopped: tree-b (suspended" in err
    for child in ("tree-a", "tree-b"):
        record = store.get_task(child)
        assert record.suspended and record.last_error == CANCELLED and record.last_response == ""
        assert store.lease_holder(child) is None and not store.needs_turn(child)

    resumed = unicore("resume", "tree", "--no-wait", env=cli_env)
    assert resumed.returncode == 0 and resumed.stdout == "tree resumed\n"
    assert not store.get_task("tree").suspended
    assert all(store.get_task(child).suspended for child in ("tree-a", "tree-b"))


def test_bad_task_ids_are_one_line_errors(cli_env) -> None:
    cluster = unicore("suspend", "ns/task", env=cli_env)
    assert cluster.returncode == 2 and cluster.stderr.count("\n") == 1
    assert "kubectl agenttask suspend" in cluster.stderr
    missing = unicore("resume", "nobody", env=cli_env)
    assert missing.returncode == 1 and missing.stderr == "unicore: error: no task 'nobody'\n"
