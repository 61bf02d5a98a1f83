"""Approvals and ask_user in local mode, through the CLI as subprocesses (real redis-server, scripted model)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from unicore.store import approvals
from unicore.store.tasks import TaskStore, connect

from tests.unicore_cli import unicore
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    return TaskStore(connect(redis_url))


def script(tmp_path: Path, name: str, steps: list[dict]) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"tasks": {name: steps}}))
    return str(path)


WRITE = [{"tool_use": [{"name": "write_file", "input": {"path": "out.txt", "content": "approved text"}},
                       {"name": "list_files", "input": {}}]},
         {"echo_results": True}]


def results_for(store: TaskStore, task_id: str, call_id: str) -> list[dict]:
    return [block["toolResult"] for turn in store.load_history(task_id) for m in turn.messages
            for block in m.content if "toolResult" in block and block["toolResult"]["toolUseId"] == call_id]


def test_run_settles_waiting_then_approve_runs_the_tool_once_and_the_conversation_goes_on(
        cli_env, store, tmp_path):
    out = Path(cli_env["UNICORE_HOME"]) / "workspaces" / "ap" / "out.txt"
    run = unicore("run", "--script", script(tmp_path, "ap", WRITE), "--name", "ap", "--no-summary",
                  "--require-approval", "write_file", "please write", env=cli_env)
    assert run.returncode == 0, run.stderr
    [call] = approvals.pending_calls(store.redis, "ap")
    assert f"ap waits for approval: {call.call_id}: write_file" in run.stdout
    assert f"unicore approve ap --call {call.call_id}" in run.stdout
    assert not out.exists() and store.lease_holder("ap") is None and store.get_task("ap").status == "idle"

    assert unicore("tree", "ap", env=cli_env).stdout.startswith("ap  [idle, waiting for approval]  turns=1")
    pending = unicore("pending", "ap", env=cli_env)
    assert pending.returncode == 0 and "approved text" in pending.stdout
    assert "[waiting for approval]" in unicore("show", "ap", env=cli_env).stdout

    approve = unicore("approve", "ap", "--reason", "looks fine", env=cli_env)
    assert approve.returncode == 0, approve.stderr
    assert out.read_text() == "approved text"
    assert "approved text" in approve.stdout or "out.txt" in approve.stdout  # the model's answer after the results
    assert len(results_for(store, "ap", call.call_id)) == 1
    shown = unicore("show", "ap", env=cli_env).stdout
    assert "[approved by " in shown and ": looks fine]" in shown

    again = unicore("approve", "ap", "--call", call.call_id, env=cli_env)
    assert again.returncode == 1 and "already approved" in again.stderr and again.stderr.count("\n") == 1
    assert len(results_for(store, "ap", call.call_id)) == 1
    nothing = unicore("deny", "ap", env=cli_env)
    assert nothing.returncode == 1 and "no tool call waiting for approval" in nothing.stderr


def test_deny_gives_the_model_the_reason(cli_env, store, tmp_path):
    unicore("run", "--script", script(tmp_path, "dn", WRITE), "--name", "dn", "--no-summary",
            "--require-approval", "*", "please write", env=cli_env)
    calls = approvals.pending_calls(store.redis, "dn")  # '*': every tool waits
    assert [call.tool for call in calls] == ["write_file", "list_files"]
    deny = unicore("deny", "dn", "--reason", "not\x1b[31m now", env=cli_env)  # every waiting approval
    assert deny.returncode == 0, deny.stderr
    assert "denied by " in deny.stdout and ": not\\x1b[31m now" in deny.stdout  # escaped on the terminal
    for call in calls:
        [result] = results_for(store, "dn", call.call_id)
        assert result["status"] == "error" and result["content"][0]["text"].endswith(": not\x1b[31m now")
    assert not (Path(cli_env["UNICORE_HOME"]) / "workspaces" / "dn" / "out.txt").exists()


def test_an_approval_past_its_timeout_is_denied_when_the_tree_runs_again(cli_env, store, tmp_path):
    unicore("run", "--script", script(tmp_path, "to", WRITE), "--name", "to", "--no-summary",
            "--require-approval", "write_file", "--approval-timeout", "1", "please write", env=cli_env)
    # the recorded call, whether or not its second is up yet (on a loaded machine `run` itself can take longer)
    [call] = approvals.unresolved_calls(store.redis, "to")
    assert call.status == "pending", call
    wait_for(lambda: time.time() > call.requested_at + 1.2, timeout=5, what="the approval timeout to pass")
    # issue 24: past its timeout it is no longer listed, and nobody can approve or deny it (the timeout denies it)
    pending = unicore("pending", "to", env=cli_env)
    assert pending.returncode == 0 and call.call_id not in pending.stdout and "nothing of to waits" in pending.stdout
    for verb in ("approve", "deny"):
        late = unicore(verb, "to", "--call", call.call_id, env=cli_env)
        assert late.returncode == 1 and late.stderr.count("\n") == 1 and "Traceback" not in late.stderr, late.stderr
        assert "waited longer than the approval timeout (1s)" in late.stderr
    assert unicore("approve", "to", env=cli_env).returncode == 1  # every waiting approval: none may be decided
    assert not (Path(cli_env["UNICORE_HOME"]) / "workspaces" / "to" / "out.txt").exists()
    send = unicore("send", "to", "still there?", env=cli_env)
    assert send.returncode == 0, send.stderr
    assert "denied by timeout: no decision within 1s" in send.stdout
    assert approvals.get_call(store.redis, "to", call.call_id).decided_by == "timeout"


def test_a_turn_killed_after_recording_the_wait_leaves_a_task_that_approve_finishes(cli_env, store, tmp_path):
    killing = {**cli_env, "UNICORE_FAULTS": "kill:after pending calls"}
    run = unicore("run", "--script", script(tmp_path, "kl", WRITE), "--name", "kl", "--no-summary",
                  "--require-approval", "write_file", "please write", env=killing)
    assert run.returncode == 0, run.stderr
    assert "CRASHED" in run.stderr and "kl waits for approval" in run.stdout
    [turn] = store.load_history("kl")
    assert turn.ended_at is not None and store.lease_holder("kl") is None
    approve = unicore("approve", "kl", env=cli_env)
    assert approve.returncode == 0, approve.stderr
    assert (Path(cli_env["UNICORE_HOME"]) / "workspaces" / "kl" / "out.txt").read_text() == "approved text"
    # list_files (not gated) never ran: the model is told it was interrupted, as after any crash mid-tools
    assert "Tool execution interrupted" in approve.stdout


def test_ask_user_round_trip(cli_env, store, tmp_path):
    steps = [{"tool_use": [{"name": "ask_user", "input": {"question": "Which colour?\x07"}}]},
             {"echo_results": True}]
    run = unicore("run", "--script", script(tmp_path, "q", steps), "--name", "q", "--no-summary", "--ask-user",
                  "pick a colour", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert "q asks (" in run.stdout and "Which colour?\\x07" in run.stdout and "unicore send q" in run.stdout
    assert approvals.waiting_for(store.redis, "q") == "input"
    send = unicore("send", "q", "Blue", env=cli_env)
    assert send.returncode == 0, send.stderr
    [asked] = approvals.calls(store.redis, "q")
    assert send.stdout.strip() == f"[success] {asked.call_id}: Blue"  # the model got the answer as the tool's result
    assert approvals.waiting_for(store.redis, "q") is None
    shown = json.loads(unicore("show", "q", "--json", env=cli_env).stdout)
    [stored] = shown["approvals"]
    assert (stored["status"], stored["answer"]) == ("answered", "Blue")
    users = [b for t in shown["turns"] for m in t["messages"] if m["role"] == "user" for b in m["content"]]
    assert {"text": "Blue"} not in users  # delivered as the result, not as a user message
    assert "[answered by " in unicore("show", "q", env=cli_env).stdout


def test_bad_approval_arguments_are_one_line_errors(cli_env, tmp_path):
    bad = unicore("run", "--name", "x", "--require-approval", "no_such_tool", "hi", env=cli_env)
    assert bad.returncode == 2 and "unknown tool(s) no_such_tool" in bad.stderr and bad.stderr.count("\n") == 1
    missing = unicore("approve", "nobody", env=cli_env)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
