"""Agents in local mode (issue 17) on a real redis-server: ``unicore run --agent`` and ``unicore agents``, spawning by
agent name, and an Agent changed (or deleted) between turns taking effect on the next turn only."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.agents import definition_from_spec
from unicore.api.schema import TaskSpec
from unicore.providers.base import ModelRequest
from unicore.store.agents import delete_agent, read_agent, write_agent
from unicore.store.tasks import TaskStore

from tests.integration.conftest import TurnRunner
from tests.unicore_cli import unicore

REPO = Path(__file__).resolve().parents[2]
AGENTS = REPO / "examples" / "agents"
SCRIPT = REPO / "examples" / "agents-script.yaml"

WRITER: dict[str, Any] = {"model": "scripted", "systemPrompt": "You are the writer, first edition.",
                          "tools": ["read_file", "write_file", "spawn_task", "task_status"],
                          "agents": ["researcher"], "limits": {"maxIterations": 30, "maxChildren": 3}}
RESEARCHER: dict[str, Any] = {"model": "scripted", "systemPrompt": "You research.",
                              "tools": ["read_file", "list_files"], "limits": {"maxIterations": 20}}


def store_agents(client: redis.Redis, **specs: dict[str, Any]) -> None:
    for name, spec in specs.items():
        write_agent(client, name, definition_from_spec(spec))


def tool_names(request: ModelRequest) -> list[str]:
    """The built-in tools the model was offered (the test runner adds its own ``note`` tool to every task)."""
    return [spec.name for spec in request.tools if spec.name != "note"]


def tool_results(store: TaskStore, task_id: str) -> list[str]:
    return [item.get("text", "") for message in store.messages(task_id) for block in message.content
            if "toolResult" in block for item in block["toolResult"]["content"]]


def test_run_agent_directory_runs_the_example_tree_and_the_child_runs_its_agent(cli_env, redis_url, tmp_path):
    # docs/agents.md: the directory's MCPServer `time` is the cluster's (a url); the stdio one of the same name runs
    # the server here (python3 -m mcp_server_time: the venv's python first on PATH, as after `make bootstrap`)
    env = {**cli_env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{cli_env.get('PATH', '')}"}
    run = unicore("run", "--agent", str(AGENTS), "--mcp-server", str(REPO / "examples" / "mcp" / "time-server.yaml"),
                  "--script", str(SCRIPT), "--name", "report", "--max-iterations", "10",
                  "Write a short report about water.", env=env)
    assert run.returncode == 0, run.stderr
    assert "Report written to report.md." in run.stdout
    assert "local mode runs no Deployment/mcp-time, Service/mcp-time" in run.stderr  # the cluster's server objects
    store = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True))
    root, child = store.get_task("report"), store.get_task("report-facts")
    assert (root.agent, child.agent, child.parent) == ("writer", "researcher", "report")
    assert root.tools == ["read_file", "write_file", "list_files", "spawn_task", "task_status"]
    assert root.agents == ["researcher"] and root.limits.max_iterations == 10  # --max-iterations narrowed it
    assert child.tools == ["read_file", "list_files", "task_status"]  # the researcher's, not its parent's
    assert child.limits.max_iterations == 10 and child.limits.max_children == 3  # its parent's limits cap it
    assert "You are a careful researcher." in child.system_prompt
    assert any("Facts: water boils at 100 C" in text for m in store.messages("report") for block in m.content
               for text in [block.get("text", "")])
    # the researcher asked the real time server (its agent's MCP tool, allowed by the agent's allow-list)
    [result] = [block["toolResult"] for m in store.messages("report-facts") for block in m.content
                if "toolResult" in block]
    assert result["status"] == "success" and '"timezone": "Etc/UTC"' in result["content"][0]["text"], result
    assert (tmp_path / "home" / "workspaces" / "report" / "report.md").read_text().startswith("# Water")
    listing = unicore("agents", "list", env=cli_env)
    assert listing.returncode == 0
    rows = {line.split()[0]: line.split() for line in listing.stdout.splitlines()[1:]}
    assert set(rows) == {"researcher", "writer"} and rows["writer"][-1] == "researcher"


def test_a_stored_agent_runs_by_name_and_options_only_narrow_it(cli_env, redis_url, tmp_path):
    applied = unicore("agents", "apply", "-f", str(AGENTS / "agent-writer.yaml"),
                      "-f", str(AGENTS / "agent-researcher.yaml"), env=cli_env)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines() == ["agent/writer configured", "agent/researcher configured"]
    again = unicore("agents", "apply", "-f", str(AGENTS), env=cli_env)
    assert again.stdout.splitlines() == [
        "agent/researcher unchanged", "agent/writer unchanged",
        "[unicore] skipped Deployment/mcp-time, Service/mcp-time (Kubernetes objects local mode does not run)",
        "[unicore] MCP servers (time) are not stored: give their file to 'unicore run' "
        "(--agent FILE or --mcp-server FILE)"]
    run = unicore("run", "--agent", "researcher", "--name", "solo", "--system", "Be brief.", "Hello", env=cli_env)
    assert run.returncode == 0, run.stderr
    solo = TaskStore(redis.Redis.from_url(redis_url, decode_responses=True)).get_task("solo")
    assert solo.agent == "researcher" and solo.tools == ["read_file", "list_files", "task_status"]
    assert solo.system_prompt.startswith("You are a careful researcher.") and solo.system_prompt.endswith(
        "Be brief.")
    widening = unicore("run", "--agent", "researcher", "--ask-user", "Hi", env=cli_env)
    assert widening.returncode == 2 and "agent researcher does not have the ask_user tool" in widening.stderr
    gated = unicore("run", "--agent", "researcher", "--require-approval", "write_file", "Hi", env=cli_env)
    assert gated.returncode == 2 and "write_file is not among agent researcher's tools" in gated.stderr


@pytest.mark.parametrize(("content", "message"), [
    ("apiVersion: unicore.dev/v1alpha1\nkind: Agent\nmetadata: {name: bad}\nspec: {model: scripted, tools: "
     "[read_file], approval: {tools: [write_file]}}\n", "Agent bad: spec.approval.tools names write_file"),
    ("apiVersion: unicore.dev/v1alpha1\nkind: Agent\nmetadata: {name: Bad_Name}\nspec: {model: scripted}\n",
     "invalid agent name 'Bad_Name'"),
    ("apiVersion: unicore.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\nspec: {model: scripted, limits: "
     "{maxIterations: 0}}\n", "spec.limits.maxIterations: Input should be greater than or equal to 1"),
    ("apiVersion: unicore.dev/v1alpha1\nkind: Widget\nmetadata: {name: a}\n", "kind 'Widget' is not Agent"),
    ("kind: Agent\nmetadata: {name: a}\nspec: {model: scripted}\n", "apiVersion must be unicore.dev/v1alpha1"),
    ("a: [unclosed\n", "is not valid YAML/JSON"),
])
def test_bad_agent_files_are_one_line_errors_and_store_nothing(cli_env, redis_client, tmp_path, content, message):
    good = "apiVersion: unicore.dev/v1alpha1\nkind: Agent\nmetadata: {name: good}\nspec: {model: scripted}\n---\n"
    path = tmp_path / "agents.yaml"
    path.write_text(good + content)
    for args in (["agents", "apply", "-f", str(path)], ["run", "--agent", str(path), "Hi"]):
        result = unicore(*args, env=cli_env)
        assert result.returncode == 2, result
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert read_agent(redis_client, "good") is None  # the good document before the bad one was not stored


def test_an_agent_never_applied_is_refused(cli_env):
    result = unicore("run", "--agent", "nobody", "Hi", env=cli_env)
    assert result.returncode == 2 and "--agent nobody: no such agent (stored: none)" in result.stderr


def test_spawning_by_agent_name_is_refused_unless_the_parent_s_agent_lists_it(redis_client, store, turn: TurnRunner):
    store_agents(redis_client, writer=WRITER, researcher=RESEARCHER, loner={**RESEARCHER, "tools": ["spawn_task"]})
    script = {"tasks": {"root": [
        {"tool_use": [{"name": "spawn_task", "input": {"name": "x", "agent": "loner", "prompt": "p"}},
                      {"name": "spawn_task", "input": {"name": "y", "agent": "researcher", "prompt": "p",
                                                       "tools": ["write_file"]}},
                      {"name": "spawn_task", "input": {"name": "z", "agent": "researcher", "prompt": "p",
                                                       "tools": ["list_files"]}}]},
        {"text": "done"}]}}
    assert store.create_task(TaskSpec(id="root", prompt="go", agent="writer", script=script))
    assert turn("root").exit_code == 0
    results = tool_results(store, "root")
    assert "you may not spawn agent 'loner': the agents you may spawn: researcher" in results[0]
    assert "a child running agent 'researcher' can only get that agent's tools: write_file" in results[1]
    assert results[2].startswith("Started child task root-z")
    assert store.children("root") == ["root-z"]
    child = store.get_task("root-z")
    assert (child.agent, child.tools, child.limits.max_children) == ("researcher", ["list_files"], 3)


def test_an_agent_changed_mid_turn_counts_from_the_next_turn(redis_client, store, turn: TurnRunner):
    store_agents(redis_client, writer=WRITER, researcher=RESEARCHER)
    script = {"tasks": {"t": [{"tool_use": [{"name": "read_file", "input": {"path": "none.txt"}}]},
                              {"text": "first turn done"}, {"text": "second turn done"}]}}
    assert store.create_task(TaskSpec(id="t", prompt="go", agent="writer", script=script))
    second = {**WRITER, "systemPrompt": "You are the writer, second edition.", "tools": ["read_file"], "agents": [],
              "limits": {"maxIterations": 5}}

    def change_the_agent(request: ModelRequest) -> None:  # during the first turn's first model call
        if len(turn.requests("t")) == 1:
            write_agent(redis_client, "writer", definition_from_spec(second))

    turn.hooks["t"] = change_the_agent
    assert turn("t").exit_code == 0
    first_turn = turn.requests("t")
    assert len(first_turn) == 2 and read_agent(redis_client, "writer") == definition_from_spec(second)
    for request in first_turn:  # both calls of the turn in flight: the definition it started with
        assert "first edition" in request.system and "write_file" in tool_names(request)
    assert store.get_task("t").limits.max_iterations == 30
    store.queue_text("t", "again")
    assert turn("t").exit_code == 0
    (third,) = turn.requests("t")[2:]
    assert "second edition" in third.system and "first edition" not in third.system
    assert tool_names(third) == ["read_file"]
    record = store.get_task("t")
    assert (record.tools, record.limits.max_iterations) == (["read_file"], 5)  # written back for other readers


def test_a_deleted_agent_fails_the_next_turn_with_a_clear_last_error(redis_client, store, turn: TurnRunner):
    store_agents(redis_client, writer=WRITER)
    assert store.create_task(TaskSpec(id="t", prompt="go", agent="writer", script={"default": "ok"}))
    assert turn("t").exit_code == 0
    delete_agent(redis_client, "writer")
    store.queue_text("t", "again")
    outcome = turn("t")
    assert outcome.exit_code == 1
    assert store.get_task("t").last_error.startswith("AgentNotFound: agent writer does not exist (deleted?)")
    assert len(turn.requests("t")) == 1  # no model call for the failed turn
