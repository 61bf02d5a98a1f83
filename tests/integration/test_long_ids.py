"""Long task ids: a 253-character name (the most an AgentTask name may have), reached directly or through a
model-chosen child name, runs in local mode (its turn log file name is hash-shortened); one character more is
a clear error at every edge (CLI exit 2, TaskSpec validation, an error tool result)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from unicore.api.schema import MAX_TASK_NAME, TaskSpec
from unicore.launch.local import MAX_FILE_NAME_BYTES, turn_log_name
from unicore.store.tasks import TaskStore, connect

UNICORE = str(Path(sys.executable).with_name("unicore"))


def unicore(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UNICORE, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def cli_env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home")}


def log_files(env: dict[str, str]) -> list[str]:
    return sorted(path.name for path in (Path(env["UNICORE_HOME"]) / "logs").iterdir())


def test_a_253_character_root_runs_and_254_is_a_one_line_usage_error(cli_env: dict[str, str], redis_url: str) -> None:
    name = "n" * MAX_TASK_NAME
    run = unicore("run", "--quiet", "--name", name, "hello", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "Done."
    store = TaskStore(connect(redis_url))
    assert store.get_task(name).status == "idle" and store.pending_count(name) == 0
    again = unicore("send", "--quiet", name, "and again", env=cli_env)  # later sends work too
    assert again.returncode == 0, again.stderr
    assert len(store.load_history(name)) == 2
    (log,) = log_files(cli_env)
    assert len(log.encode()) <= MAX_FILE_NAME_BYTES and log.startswith("n" * 100)

    for bad, needle in (
        ("n" * (MAX_TASK_NAME + 1), "(254 characters)"),
        ("team/demo", "has no '<namespace>/' part"),
    ):
        refused = unicore("run", "--name", bad, "hello", env=cli_env)
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
        assert needle in refused.stderr
        assert not store.exists(bad)
    with pytest.raises(ValidationError, match="invalid task id"):
        TaskSpec(id="n" * (MAX_TASK_NAME + 1))
    with pytest.raises(ValidationError, match="namespace of at most 63"):
        TaskSpec(id=f"{'s' * 64}/demo")


def test_a_model_chosen_child_name_up_to_the_bound_runs_and_beyond_it_is_an_error_result(
    cli_env: dict[str, str], redis_url: str, tmp_path: Path
) -> None:
    root = "root-" + "r" * 185
    fits = "c" * (MAX_TASK_NAME - len(root) - 1)  # the child's name is exactly 253 characters
    too_long = "d" * (len(fits) + 1)
    child = f"{root}-{fits}"
    script = tmp_path / "long.json"
    spawn = [{"name": "spawn_task", "input": {"name": n, "prompt": "work"}} for n in (fits, too_long)]
    script.write_text(
        json.dumps(
            {
                "tasks": {
                    root: [{"tool_use": spawn}, {"text": "waiting"}, {"text": "root done"}],
                    child: [{"text": "child done"}],
                }
            }
        )
    )
    run = unicore("run", "--quiet", "--script", str(script), "--name", root, "go", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "root done"

    store = TaskStore(connect(redis_url))
    assert store.children(root) == [child] and len(child) == MAX_TASK_NAME
    assert store.get_task(child).last_response == "child done"
    results = [b["toolResult"] for m in store.messages(root) for b in m.content if "toolResult" in b]
    assert [r["status"] for r in results] == ["success", "error"]
    refusal = results[1]["content"][0]["text"]
    assert f"child name {too_long!r} is too long here" in refusal and f"use at most {len(fits)} characters" in refusal
    assert all(len(name.encode()) <= MAX_FILE_NAME_BYTES for name in log_files(cli_env))


def test_turn_log_names_fit_a_file_name_whatever_the_id() -> None:
    assert turn_log_name("demo") == "demo.log"
    assert turn_log_name("default/demo-a") == "default__demo-a.log"
    ids = [
        "a" * 251,
        "a" * 252,
        "a" * 253,
        f"{'s' * 63}/{'a' * 253}",
        f"{'s' * 63}/{'a' * 252}",
        "../../etc/passwd",
        "é" * 300,
        "\x1b\udcff",
        "",
    ]
    names = [turn_log_name(task_id) for task_id in ids]
    assert len(set(names)) == len(ids)  # distinct ids, distinct files (the hash covers the whole id)
    for name in names:
        assert len(name.encode("utf-8", "surrogatepass")) <= MAX_FILE_NAME_BYTES and name.endswith(".log")
        assert "/" not in name and not name.startswith(".")
    assert names[0] == "a" * 251 + ".log"  # short enough: unchanged
