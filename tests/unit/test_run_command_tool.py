"""run_command's pure parts: never a default tool, a child gets it only through childTools, the workdir stays in the
workspace, the timeout is capped by the task's limit and the turn's remaining time, and the result and metrics."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from unicore.commands.result import CommandResult, OutputSink, OutputTail
from unicore.errors import LimitExceeded, ToolError
from unicore.tools import policy
from unicore.tools.base import ToolContext
from unicore.tools.builtin_tools import ALL_TOOLS
from unicore.tools.registry import run_tool_call
from unicore.tools.run_command import command_timeout, workdir_in
from unicore.tools.storeview import TaskView


def test_never_in_a_default_toolset() -> None:
    assert "run_command" in ALL_TOOLS
    assert "run_command" not in policy.DEFAULT_TOOLS and "run_command" not in policy.DEFAULT_CHILD_TOOLS
    assert "run_command" not in policy.allowed_tool_names(TaskView(id="demo"))


def test_a_child_gets_run_command_only_through_child_tools() -> None:
    parent = TaskView(id="demo", tools=["read_file", "run_command", "spawn_task"])
    assert "run_command" not in policy.tool_ceiling(parent)
    with pytest.raises(LimitExceeded, match="childTools"):
        policy.child_tools(parent, ["run_command"], None)
    granting = TaskView(id="demo", tools=["read_file", "run_command", "spawn_task"], child_tools=["run_command"])
    assert policy.child_tools(granting, ["run_command"], None) == ["run_command"]


def test_workdir_stays_in_the_workspace() -> None:
    assert workdir_in("/workspace", None) == "/workspace"
    assert workdir_in("/workspace", "src/../build") == "/workspace/build"
    assert workdir_in("/workspace", "/workspace/x") == "/workspace/x"
    for outside in ("..", "../etc", "/etc", "/workspace2"):
        with pytest.raises(ToolError, match="outside the workspace"):
            workdir_in("/workspace", outside)


def ctx(tmp_path: Path, runner: Any = None, deadline: float | None = None, limit: float = 600.0) -> ToolContext:
    return ToolContext(task_id="demo", store=None, spawner=None, workspace=tmp_path,  # type: ignore[arg-type]
                       command_runner=runner, command_timeout_seconds=limit, deadline=deadline)


def test_the_timeout_is_capped_by_the_limit_and_the_turns_time(tmp_path: Path) -> None:
    assert command_timeout(ctx(tmp_path, limit=600), None) == 600
    assert command_timeout(ctx(tmp_path, limit=600), 30) == 30
    assert command_timeout(ctx(tmp_path, limit=60), 3000) == 60
    left = command_timeout(ctx(tmp_path, deadline=time.monotonic() + 115), None)
    assert 95 < left <= 100  # the turn's remaining time less the 15 s kept to end the turn
    with pytest.raises(ToolError, match="no time left"):
        command_timeout(ctx(tmp_path, deadline=time.monotonic() + 10), None)


class AnswersWith:
    """A runner that gives back a given result and remembers what it was asked (pure unit test of the tool)."""

    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.asked: dict[str, Any] = {}

    def run(self, command: str, *, workdir: str, timeout_seconds: float, cancel: threading.Event,
            on_output: OutputSink | None = None) -> CommandResult:
        self.asked = {"command": command, "workdir": workdir, "timeout": timeout_seconds}
        return self.result


def call(context: ToolContext, **arguments: Any) -> dict[str, Any]:
    block = run_tool_call(context, [ALL_TOOLS["run_command"]],
                          {"toolUseId": "t1", "name": "run_command", "input": arguments})
    result: dict[str, Any] = block["toolResult"]
    return result


def test_the_result_says_the_exit_code_and_what_was_cut(tmp_path: Path) -> None:
    tail = OutputTail()
    tail.add(b"x" * 20_000_000)
    runner = AnswersWith(CommandResult(exit_code=3, duration_seconds=1.23456, stdout=tail.text(), stderr="oops\n",
                                       stdout_bytes=tail.total, stderr_bytes=5))
    result = call(ctx(tmp_path, runner, limit=50), command="make", workdir="sub", timeout_seconds=99)
    assert runner.asked == {"command": "make", "workdir": f"{tmp_path}/sub", "timeout": 50}
    assert result["status"] == "success"
    body = result["content"][0]["json"]
    assert body["exit_code"] == 3 and body["duration_seconds"] == 1.235 and body["stderr"] == "oops\n"
    assert len(body["stdout"]) == 16 * 1024 and "20,000,000 bytes" in body["stdout_truncated"]
    assert "stderr_truncated" not in body


def test_no_runner_and_cancellation_are_error_results(tmp_path: Path) -> None:
    assert "no workbench" in call(ctx(tmp_path), command="true")["content"][0]["text"]
    killed = CommandResult(exit_code=None, duration_seconds=2.0, stdout="partial", stderr="", stdout_bytes=7,
                           stderr_bytes=0, cancelled=True, signal="SIGKILL")
    result = call(ctx(tmp_path, AnswersWith(killed)), command="sleep 600")
    assert result["status"] == "error"
    assert "cancelled" in result["content"][0]["text"] and "partial" in result["content"][0]["text"]


def test_local_commands_never_get_the_endpoint_maps_key_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from unicore.turn.commands import endpoint_key_variables

    monkeypatch.delenv("UNICORE_OPENAI_ENDPOINTS", raising=False)
    assert endpoint_key_variables() == ()
    monkeypatch.setenv("UNICORE_OPENAI_ENDPOINTS", '[{"models": ["gpt-*"], "baseUrl": "https://api.example.com/v1", '
                                                   '"apiKeyEnv": "TEAM_LLM_TOKEN"}]')
    assert endpoint_key_variables() == ("TEAM_LLM_TOKEN",)
