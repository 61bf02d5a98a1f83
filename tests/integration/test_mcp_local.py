"""MCP tool servers in local mode, through the real ``unicore`` CLI, a real redis-server and real third-party MCP
servers (tests/mcp_servers.py): the scripted model calls their tools and the results land in history; a server killed
mid-call, one that is not running and a tool outside the allow-list give error tool results and the turn ends
normally; approvals gate MCP tools by their offered name (issue 17)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from unicore.launch.local import turn_log_name
from unicore.store.keys import METRICS_COUNTERS, METRICS_HISTOGRAMS
from unicore.store.tasks import TaskStore, connect

from tests.mcp_servers import (
    EverythingHttp,
    document,
    everything_stdio_spec,
    pids_with_argument,
    time_spec,
    write_documents,
)
from tests.model_server import free_port
from tests.unicore_cli import UNICORE, unicore
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    return TaskStore(connect(redis_url))


def script(tmp_path: Path, task: str, steps: list[dict[str, Any]]) -> str:
    path = tmp_path / f"{task}-script.yaml"
    path.write_text(yaml.safe_dump({"tasks": {task: steps}}))
    return str(path)


def calls(*uses: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_use": [{"name": name, "input": given} for name, given in uses]}


def results(store: TaskStore, task: str) -> dict[str, tuple[str, str]]:
    """Tool name -> (status, text) of every tool result in the task's history (in call order)."""
    names: dict[str, str] = {}
    found: dict[str, tuple[str, str]] = {}
    for turn in store.load_history(task):
        for message in turn.messages:
            for block in message.content:
                if "toolUse" in block:
                    names[block["toolUse"]["toolUseId"]] = block["toolUse"]["name"]
                if "toolResult" in block:
                    result = block["toolResult"]
                    text = "\n".join(str(item.get("text", item.get("json", ""))) for item in result["content"])
                    found[names[result["toolUseId"]]] = (result["status"], text)
    return found


def tool_calls(client: redis.Redis) -> dict[str, float]:
    """``tool_calls_total`` as the turns wrote it (labels -> count) and, under ``timed <labels>``, how many calls
    ``tool_call_duration_seconds`` holds. An MCP call is counted under its server, as tool mcp."""
    found = {field.split("|", 1)[1]: float(value) for field, value in client.hgetall(METRICS_COUNTERS).items()
             if field.startswith("tool_calls_total|")}
    for field, value in client.hgetall(METRICS_HISTOGRAMS).items():
        if field.startswith("tool_call_duration_seconds|") and field.endswith("|count"):
            found[f"timed {field.split('|')[1]}"] = float(value)
    return found


def test_time_and_everything_over_stdio_land_in_history_and_a_tool_outside_the_allow_list_is_refused(
        cli_env, store, redis_client, tmp_path):
    servers = write_documents(tmp_path / "servers.yaml",
                              [document("time", time_spec()), document("everything", everything_stdio_spec())])
    steps = [
        calls(("time__get_current_time", {"timezone": "Europe/Paris"}),
              ("everything__echo", {"message": "hello over stdio"}),
              ("everything__get-sum", {"a": 2, "b": 40}),
              ("time__convert_time", {"source_timezone": "Etc/UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})),
        {"text": "first turn done"},
        calls(("time__get_current_time", {"timezone": "Asia/Tokyo"})),
        {"text": "second turn done"},
    ]
    run = unicore("run", "--name", "mc", "--no-summary", "--script", script(tmp_path, "mc", steps),
                  "--mcp-server", str(servers), "--mcp", "time:get_current_time", "--mcp", "everything",
                  "what time is it", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "first turn done"
    found = results(store, "mc")
    status, text = found["time__get_current_time"]
    assert status == "success" and '"timezone": "Europe/Paris"' in text and '"datetime": "' in text
    assert found["everything__echo"] == ("success", "Echo: hello over stdio")
    assert found["everything__get-sum"] == ("success", "The sum of 2 and 40 is 42.")
    status, text = found["time__convert_time"]
    assert status == "error"
    assert "'convert_time' of MCP server 'time' is not in this task's allow-list (allowed: get_current_time)" in text
    # each call counted once, by server (the refused one too, not timed: it never ran)
    assert tool_calls(redis_client) == {
        "outcome=ok,server=time,source=mcp,tool=mcp": 1, "outcome=refused,server=time,source=mcp,tool=mcp": 1,
        "outcome=ok,server=everything,source=mcp,tool=mcp": 2,
        "timed server=time,source=mcp,tool=mcp": 1, "timed server=everything,source=mcp,tool=mcp": 2}

    # A follow-up connects to the same servers: their definitions are stored with the tree.
    send = unicore("send", "mc", "and in Tokyo?", env={**cli_env, "UNICORE_MCP_SERVERS": ""})
    assert send.returncode == 0, send.stderr
    assert send.stdout.strip() == "second turn done"
    status, text = results(store, "mc")["time__get_current_time"]
    assert status == "success" and '"timezone": "Asia/Tokyo"' in text
    calls_now = tool_calls(redis_client)
    assert calls_now["outcome=ok,server=time,source=mcp,tool=mcp"] == 2
    assert calls_now["timed server=time,source=mcp,tool=mcp"] == 2


def test_streamable_http_server_with_every_tool_when_mcp_is_not_given(cli_env, store, tmp_path):
    with EverythingHttp() as server:
        servers = write_documents(tmp_path / "servers.yaml", [document("everything", {"url": server.url})])
        steps = [calls(("everything__echo", {"message": "hello over HTTP"}),
                       ("everything__get-tiny-image", {}),
                       ("everything__get-structured-content", {"location": "Chicago"})),
                 {"echo_results": True}]
        run = unicore("run", "--name", "mh", "--no-summary", "--script", script(tmp_path, "mh", steps),
                      "--mcp-server", str(servers), "hi", env=cli_env)
    assert run.returncode == 0, run.stderr
    found = results(store, "mh")
    assert found["everything__echo"] == ("success", "Echo: hello over HTTP")
    status, text = found["everything__get-tiny-image"]
    assert status == "success" and "[image image/png, " in text and " bytes: not shown]" in text
    assert "iVBOR" not in text  # the picture's base64 never reaches the model as text
    status, text = found["everything__get-structured-content"]
    assert status == "success" and '"temperature"' in text
    assert "Echo: hello over HTTP" in run.stdout


def _run_until_killed(cli_env: dict[str, str], tmp_path: Path, task: str, servers: Path,
                      kill: Any) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a task whose only call is server-everything's slow tool (60 s); kill the server once the call runs."""
    steps = [calls(("everything__trigger-long-running-operation", {"duration": 60, "steps": 60})),
             {"text": "the turn went on"}]
    command = [UNICORE, "run", "--name", task, "--no-summary", "--script", script(tmp_path, task, steps),
               "--mcp-server", str(servers), "go"]
    log = Path(cli_env["UNICORE_HOME"]) / "logs" / turn_log_name(task)
    process = subprocess.Popen(command, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=REPO)
    try:
        # The server's first progress notification reached the turn: the call is running on the server.
        wait_for(lambda: log.exists() and "everything__trigger-long-running-operation: progress 1" in log.read_text(),
                 timeout=60, what="the slow call's first progress line in the turn's log")
        killed_at = time.monotonic()
        kill()
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), time.monotonic() - killed_at


def test_a_streamable_http_server_killed_mid_call_gives_an_error_result_and_the_turn_ends_normally(
        cli_env, store, tmp_path):
    with EverythingHttp() as server:
        servers = write_documents(tmp_path / "servers.yaml",
                                  [document("everything", {"url": server.url, "timeoutSeconds": 120})])
        run, after_kill = _run_until_killed(cli_env, tmp_path, "mk", servers, server.kill)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "the turn went on"
    status, text = results(store, "mk")["everything__trigger-long-running-operation"]
    assert status == "error" and "no result within" not in text, text  # the death was seen, not the timeout
    assert after_kill < 45  # well before the operation (60 s) or the timeout (120 s) would have ended
    record = store.get_task("mk")
    assert record.status == "idle" and not record.last_error


def test_a_stdio_server_killed_mid_call_gives_an_error_result_and_the_turn_ends_normally(cli_env, store, tmp_path):
    marker = uuid.uuid4().hex
    servers = write_documents(tmp_path / "servers.yaml",
                              [document("everything", everything_stdio_spec(marker, timeoutSeconds=120))])

    def kill() -> None:
        (pid,) = pids_with_argument(f"--unicore-test={marker}")
        os.kill(pid, signal.SIGKILL)

    run, after_kill = _run_until_killed(cli_env, tmp_path, "ms", servers, kill)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "the turn went on"
    status, text = results(store, "ms")["everything__trigger-long-running-operation"]
    assert status == "error" and "connection closed" in text.lower(), text  # the SDK's words, or ours
    assert after_kill < 45
    assert store.get_task("ms").status == "idle" and not store.get_task("ms").last_error


def test_a_server_that_is_not_running_gives_an_error_result_and_the_others_still_work(cli_env, store, redis_client,
                                                                                      tmp_path):
    nothing_there = f"http://127.0.0.1:{free_port()}/mcp"
    servers = write_documents(tmp_path / "servers.yaml", [
        document("down", {"url": nothing_there, "timeoutSeconds": 10}), document("time", time_spec())])
    steps = [calls(("down__echo", {"message": "anyone?"}), ("time__get_current_time", {"timezone": "Etc/UTC"})),
             {"text": "carried on"}]
    run = unicore("run", "--name", "md", "--no-summary", "--script", script(tmp_path, "md", steps),
                  "--mcp-server", str(servers), "hello", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "carried on"
    found = results(store, "md")
    status, text = found["down__echo"]
    assert status == "error" and "the tools of MCP server 'down' are not available in this turn" in text
    assert "ConnectError" in text or "connect" in text.lower()
    assert found["time__get_current_time"][0] == "success"
    assert tool_calls(redis_client) == {  # the call of the server that is down was refused, by that server
        "outcome=refused,server=down,source=mcp,tool=mcp": 1, "outcome=ok,server=time,source=mcp,tool=mcp": 1,
        "timed server=time,source=mcp,tool=mcp": 1}


def test_a_streamable_http_server_that_comes_up_while_the_turn_connects_is_used(cli_env, store, tmp_path):
    """A server pod starting next to the task that uses it (kubectl apply -f examples/agents/): the refused connection
    is tried again with backoff (mcp_client.CONNECT_RETRY_SECONDS) instead of leaving the turn without its tools."""
    port = free_port()
    servers = write_documents(tmp_path / "servers.yaml",
                              [document("late", {"url": f"http://127.0.0.1:{port}/mcp", "timeoutSeconds": 30})])
    steps = [calls(("late__echo", {"message": "made it"})), {"text": "done"}]
    log = Path(cli_env["UNICORE_HOME"]) / "logs" / turn_log_name("ml")
    process = subprocess.Popen([UNICORE, "run", "--name", "ml", "--no-summary", "--script",
                                script(tmp_path, "ml", steps), "--mcp-server", str(servers), "go"],
                               env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        wait_for(lambda: log.exists() and "MCP server late: " in log.read_text()
                 and "connecting again" in log.read_text(), timeout=60, what="the turn retrying its refused server")
        with EverythingHttp(port):
            stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert results(store, "ml")["late__echo"] == ("success", "Echo: made it")
    assert stdout.strip() == "done"


def test_approval_gates_an_mcp_tool_by_its_offered_name(cli_env, store, tmp_path):
    servers = write_documents(tmp_path / "servers.yaml", [document("everything", everything_stdio_spec())])
    steps = [calls(("everything__echo", {"message": "only once approved"})), {"echo_results": True}]
    run = unicore("run", "--name", "mg", "--no-summary", "--script", script(tmp_path, "mg", steps),
                  "--mcp-server", str(servers), "--require-approval", "everything__echo", "hi", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert "unicore approve mg" in run.stdout
    assert "everything__echo" not in results(store, "mg")  # waiting: the call did not run
    approve = unicore("approve", "mg", env=cli_env)
    assert approve.returncode == 0, approve.stderr
    assert results(store, "mg")["everything__echo"] == ("success", "Echo: only once approved")


@pytest.mark.parametrize(("documents", "extra", "expected"), [
    ([document("time", {"url": "ftp://x"})], [], "url must be an http:// or https:// URL"),
    ([document("time", {"url": "https://x/mcp",
                        "headersFrom": [{"name": "A", "secretKeyRef": {"name": "s", "key": "k"}}]})], [],
     "headersFrom names a Kubernetes Secret, which local mode does not have"),
    ([document("time", time_spec()), document("time", time_spec())], [], "MCP server 'time' is defined twice"),
    ([document("time", time_spec())], ["--mcp", "clock"], "no MCP server 'clock' is defined (defined: time)"),
    ([document("time", time_spec())], ["--mcp", "time:"], "name the tools after ':'"),
    ([document("time", time_spec())], ["--require-approval", "clock__x"], "unknown tool(s) clock__x"),
])
def test_bad_mcp_arguments_are_one_line_exit_2_and_create_nothing(cli_env, store, tmp_path, documents, extra,
                                                                     expected):
    servers = write_documents(tmp_path / "servers.yaml", documents)
    run = unicore("run", "--name", "bad", "--mcp-server", str(servers), *extra, "hi", env=cli_env)
    assert run.returncode == 2, run.stderr
    assert expected in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert not store.exists("bad")


def test_the_worked_example_of_docs_mcp_runs_as_written(cli_env, store):
    """docs/mcp.md and the README: examples/mcp/time-server.yaml (python3 -m mcp_server_time) with its script."""
    env = {**cli_env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{cli_env.get('PATH', '')}"}
    run = unicore("run", "--name", "clock", "--script", "examples/mcp/time-script.yaml",
                  "--mcp-server", "examples/mcp/time-server.yaml", "--mcp", "time:get_current_time",
                  "What time is it in Tokyo?", env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("[success] ") and '"timezone": "Asia/Tokyo"' in run.stdout
    assert store.get_task("clock").mcp_servers[0].tools == ["get_current_time"]
    send = unicore("send", "clock", "And now?", env=env)
    assert send.returncode == 0, send.stderr
    show = unicore("show", "clock", env=env)
    assert show.stdout.count("[tool call time__get_current_time ") == 1  # the script's one call, in turn 1
    assert "=== Turn 2 ===" in show.stdout
