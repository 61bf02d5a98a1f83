"""``run_command`` in local mode through the CLI, as a user runs it (issue 28): ``unicore run --tool run_command``
with a scripted model on the real Redis, the commands run by Debian's real bubblewrap (or, with ``--no-sandbox``, as
plain processes); what the commands can see and reach is read from inside them; ``unicore show`` prints their results
and ``unicore show --follow`` their live output while they run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from unicore.errors import TaskNotFound
from unicore.store.tasks import TaskStore, connect

from tests.unicore_cli import REPO, UNICORE, OutputReader, unicore
from tests.waiting import wait_for

SECRET = "the-runtime-home-secret-4242"
MARKER = "the-users-home-marker-1717"


@pytest.fixture
def env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """``cli_env`` with its own HOME (a marker file in it), a secret file in ``UNICORE_HOME`` and a variable of the
    user's own that only an unsandboxed command sees."""
    home = tmp_path / "user"
    home.mkdir()
    (home / "marker.txt").write_text(MARKER)
    runtime_home = Path(cli_env["UNICORE_HOME"])
    runtime_home.mkdir(parents=True)
    (runtime_home / "secret.txt").write_text(SECRET)
    return {**cli_env, "HOME": str(home), "USERS_OWN_VARIABLE": "visible-without-sandbox", "PYTHONUNBUFFERED": "1"}


def script_file(folder: Path, task: str, commands: list[str], final: str = "All done.") -> Path:
    """A scripted model for ``task``: one run_command call per step, then ``final``."""
    steps: list[dict[str, Any]] = [
        {"tool_use": [{"name": "run_command", "input": {"command": command, "timeout_seconds": 60}}]}
        for command in commands
    ]
    path = folder / f"{task}-script.yaml"
    path.write_text(yaml.safe_dump({"default": "Done.", "tasks": {task: [*steps, {"text": final}]}}))
    return path


def command_results(store: TaskStore, task: str) -> dict[str, dict[str, Any]]:
    """The stored run_command calls of ``task``: command -> its tool result (status and json or text body)."""
    commands: dict[str, str] = {}
    results: dict[str, dict[str, Any]] = {}
    for message in store.messages(task):
        for block in message.content:
            if "toolUse" in block and block["toolUse"]["name"] == "run_command":
                commands[block["toolUse"]["toolUseId"]] = block["toolUse"]["input"]["command"]
            if "toolResult" in block:
                result = block["toolResult"]
                (item,) = result["content"]
                results[commands[result["toolUseId"]]] = {"status": result.get("status", "success"), **item}
    assert len(results) == len(commands), (commands, results)
    return results


def env_names(stdout: str) -> set[str]:
    return {line.split("=", 1)[0] for line in stdout.splitlines() if "=" in line}


def test_a_sandboxed_command_sees_no_runtime_variables_nor_the_runtime_home_and_writes_its_workspace(
        env: dict[str, str], redis_url: str, tmp_path: Path) -> None:
    runtime_home = Path(env["UNICORE_HOME"])
    commands = ["env", f"cat {runtime_home}/secret.txt", "cat $HOME/marker.txt",
                "echo written-inside > made.txt && pwd"]
    run = unicore("run", "--tool", "run_command", "--script", str(script_file(tmp_path, "t", commands)),
                  "--name", "t", "go", env=env)
    assert run.returncode == 0, run.stderr
    assert "All done." in run.stdout and "WARNING" not in run.stderr

    results = command_results(TaskStore(connect(redis_url)), "t")
    assert all(r["status"] == "success" for r in results.values()), results
    got = {command: r["json"] for command, r in results.items()}
    printed = got["env"]
    assert printed["exit_code"] == 0 and "PATH" in env_names(printed["stdout"]), printed
    assert not {n for n in env_names(printed["stdout"]) if n == "REDIS_URL" or n.startswith("UNICORE_")}, printed
    assert "USERS_OWN_VARIABLE" not in env_names(printed["stdout"])  # the environment is cleared, not just scrubbed
    assert redis_url not in printed["stdout"]

    secret = got[f"cat {runtime_home}/secret.txt"]
    assert secret["exit_code"] == 1 and SECRET not in secret["stdout"], secret
    assert "No such file" in secret["stderr"], secret
    marker = got["cat $HOME/marker.txt"]
    assert marker["exit_code"] == 1 and MARKER not in marker["stdout"], marker

    wrote = got["echo written-inside > made.txt && pwd"]
    workspace = runtime_home / "workspaces" / "t"
    assert wrote["exit_code"] == 0 and wrote["stdout"] == f"{workspace}\n", wrote
    assert (workspace / "made.txt").read_text() == "written-inside\n"  # outside the sandbox, where the user sees it
    assert (runtime_home / "secret.txt").read_text() == SECRET

    show = unicore("show", "t", env=env)
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    ok_lines = [line for line in lines if line.startswith("User: [tool result") and "exit code 0, " in line]
    assert len(ok_lines) == 2, show.stdout  # env and the write
    assert sum("exit code 1, " in line for line in lines if line.startswith("User: [tool result")) == 2, show.stdout
    assert f"User:   | {workspace}" in lines and "User:   | PATH=" in show.stdout
    assert "User: stderr:" in lines, show.stdout


def test_no_sandbox_warns_and_runs_a_plain_process_without_the_runtimes_variables(
        env: dict[str, str], redis_url: str, tmp_path: Path) -> None:
    runtime_home = Path(env["UNICORE_HOME"])
    commands = ["env", "echo $HOME", f"cat {runtime_home}/secret.txt", "cat $HOME/marker.txt"]
    run = unicore("run", "--no-sandbox", "--tool", "run_command",
                  "--script", str(script_file(tmp_path, "plain", commands)), "--name", "plain", "go", env=env)
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "--no-sandbox" in warnings[0] and "plain processes" in warnings[0], run.stderr

    got = {command: r["json"] for command, r in command_results(TaskStore(connect(redis_url)), "plain").items()}
    names = env_names(got["env"]["stdout"])
    assert "USERS_OWN_VARIABLE" in names  # the user's own environment: a plain process, not the sandbox's
    assert not {n for n in names if n == "REDIS_URL" or n.startswith("UNICORE_")}, got["env"]
    assert got["echo $HOME"] == {**got["echo $HOME"], "exit_code": 0, "stdout": f"{env['HOME']}\n"}
    assert got[f"cat {runtime_home}/secret.txt"]["stdout"] == SECRET  # said loudly: it can read everything you can
    assert got["cat $HOME/marker.txt"]["stdout"] == MARKER


def test_a_task_without_the_tool_is_refused_run_command(env: dict[str, str], redis_url: str,
                                                        tmp_path: Path) -> None:
    path = script_file(tmp_path, "refused", ["echo should-not-run > ran.txt"])
    run = unicore("run", "--script", str(path), "--name", "refused", "go", env=env)
    assert run.returncode == 0, run.stderr
    (result,) = command_results(TaskStore(connect(redis_url)), "refused").values()
    assert result["status"] == "error", result
    assert "not available to this task" in json.dumps(result), result
    assert not (Path(env["UNICORE_HOME"]) / "workspaces" / "refused" / "ran.txt").exists()


def test_an_unknown_tool_is_one_line_and_exit_code_2(env: dict[str, str], redis_url: str) -> None:
    run = unicore("run", "--tool", "nosuchtool", "--name", "nope", "go", env=env)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "nosuchtool" in run.stderr and "run_command" in run.stderr  # the known tools are listed
    with pytest.raises(TaskNotFound):  # refused before anything was made
        TaskStore(connect(redis_url)).get_task("nope")


def test_show_follow_prints_a_commands_output_while_it_runs(env: dict[str, str], redis_url: str,
                                                            tmp_path: Path) -> None:
    command = "echo started; while [ ! -e stop ]; do sleep 0.05; done; echo finished"
    path = script_file(tmp_path, "live", [command], final="The command finished.")
    store = TaskStore(connect(redis_url))
    workspace = Path(env["UNICORE_HOME"]) / "workspaces" / "live"
    procs: list[subprocess.Popen[str]] = []
    out: OutputReader | None = None
    try:
        run = subprocess.Popen([UNICORE, "run", "--tool", "run_command", "--script", str(path), "--name", "live",
                                "go"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        procs.append(run)
        wait_for(lambda: store.redis.exists(store.keys("live").task), timeout=60, what="the task")
        follow = subprocess.Popen([sys.executable, "-m", "unicore_client.local.main", "show", "live", "--follow"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        procs.append(follow)
        assert follow.stdout is not None
        out = reader = OutputReader(follow.stdout)
        live = f"[run_command] $ {command}\nstarted\n"
        wait_for(lambda: live in reader.text, timeout=60, what="the command's live line and output")
        # printed while the command runs: it cannot end before the stop file exists
        assert not (workspace / "stop").exists() and run.poll() is None and follow.poll() is None
        assert reader.text.endswith(live) and "exit code" not in reader.text, reader.text
        (workspace / "stop").touch()
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 0, stderr
        assert "The command finished." in stdout
        assert follow.wait(timeout=60) == 0  # the task settled
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        print(f"follower printed: {out.text!r}" if out is not None else "no follower")
    text = reader.text
    assert text.count("[run_command] $ ") == 1, text
    (result,) = command_results(store, "live").values()
    assert result["json"]["exit_code"] == 0 and result["json"]["stdout"] == "started\nfinished\n", result
    order = [text.index(s) for s in ("[tool call run_command", "[run_command] $ ", "started\n", "exit code 0, ",
                                     "User:   | finished", "Assistant: The command finished.")]
    assert order == sorted(order), text
