"""A turn's MCP tools in process (issue 17): what the model is offered is the server's own tool list, schemas and
descriptions unchanged, narrowed to the allow-list; a tool name another tool of the task has is not offered twice."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from unicore.api.schema import MCPServerRef, TaskSpec
from unicore.mcp_config import MCPServerSpec, ResolvedMCPServer, dump_resolved
from unicore.settings import RuntimeSettings

from tests.mcp_servers import time_spec


def listed_by_the_sdk() -> dict[str, Any]:
    """mcp-server-time's tools, listed straight through the SDK (no UniCore code in between)."""

    async def listing() -> dict[str, Any]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_time"])
        async with Client(params, cache=None) as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    return asyncio.run(listing())


def settings_for(tmp_path: Path, *servers: ResolvedMCPServer) -> RuntimeSettings:
    return RuntimeSettings(mcp_servers=dump_resolved(list(servers)), spawner="local", home=tmp_path / "home")


def test_offered_tools_are_the_servers_schemas_unchanged_and_only_the_allowed_ones(turn, store, tmp_path):
    time_server = ResolvedMCPServer(name="time", spec=MCPServerSpec.model_validate(time_spec()))
    store.create_task(TaskSpec(id="sc", prompt="hi", script={"tasks": {"sc": [{"text": "ok"}]}},
                               mcp_servers=[MCPServerRef(name="time", tools=["get_current_time"])]))
    outcome = turn("sc", settings=settings_for(tmp_path, time_server))
    assert outcome.exit_code == 0, outcome.error
    (request,) = turn.requests("sc")
    offered = {spec.name: spec for spec in request.tools}
    assert "time__convert_time" not in offered  # outside the allow-list: never offered
    listed = listed_by_the_sdk()["get_current_time"]
    assert offered["time__get_current_time"].input_schema == listed.input_schema
    assert "title" in offered["time__get_current_time"].input_schema  # the built-ins' titles go; the server's stay
    assert offered["time__get_current_time"].description == listed.description
    assert "write_file" in offered and "title" not in offered["write_file"].input_schema


def test_every_tool_of_a_server_without_an_allow_list_and_a_taken_name_is_not_offered_twice(turn, store, tmp_path):
    time_server = ResolvedMCPServer(name="time", spec=MCPServerSpec.model_validate(time_spec()))
    store.create_task(TaskSpec(id="all", prompt="hi", script={"tasks": {"all": [{"text": "ok"}]}},
                               tools=["read_file"], mcp_servers=[MCPServerRef(name="time")]))

    class Clash(type(turn.extra_tools[0])):  # type: ignore[misc]
        name = "time__convert_time"

    turn.extra_tools.append(Clash())
    outcome = turn("all", settings=settings_for(tmp_path, time_server))
    assert outcome.exit_code == 0, outcome.error
    (request,) = turn.requests("all")
    names = [spec.name for spec in request.tools]
    assert "time__get_current_time" in names
    assert names.count("time__convert_time") == 1  # the task's own tool keeps the name
    assert next(spec for spec in request.tools if spec.name == "time__convert_time").description == Clash.description


def test_a_task_naming_a_server_with_no_definition_runs_and_its_calls_say_why(turn, store, tmp_path):
    steps = [{"tool_use": [{"name": "ghost__anything", "input": {}}]}, {"echo_results": True}]
    store.create_task(TaskSpec(id="gh", prompt="hi", script={"tasks": {"gh": steps}},
                               mcp_servers=[MCPServerRef(name="ghost")]))
    outcome = turn("gh", settings=settings_for(tmp_path))
    assert outcome.exit_code == 0, outcome.error
    assert "the tools of MCP server 'ghost' are not available in this turn: no definition of it reached this turn" \
        in outcome.final_text


def test_a_cancelled_turn_abandons_a_running_call_and_stops_the_stdio_server(turn, store, tmp_path, caplog):
    import logging
    import threading
    import time
    import uuid

    from unicore.turn.outcome import EXIT_CANCELLED

    from tests.mcp_servers import everything_stdio_spec, pids_with_argument
    from tests.waiting import wait_for

    marker = uuid.uuid4().hex
    server = ResolvedMCPServer(name="everything", spec=MCPServerSpec.model_validate(
        everything_stdio_spec(marker, timeoutSeconds=120)))
    slow = {"name": "everything__trigger-long-running-operation", "input": {"duration": 60, "steps": 60}}
    store.create_task(TaskSpec(id="cx", prompt="hi", script={"tasks": {"cx": [{"tool_use": [slow]}, {"text": "x"}]}},
                               mcp_servers=[MCPServerRef(name="everything")]))
    cancel = threading.Event()
    outcome: list[Any] = []
    caplog.set_level(logging.INFO, logger="unicore")
    runner = threading.Thread(target=lambda: outcome.append(
        turn("cx", settings=settings_for(tmp_path, server), cancel=cancel)))
    runner.start()
    try:
        wait_for(lambda: any("trigger-long-running-operation: progress 1" in r.getMessage() for r in caplog.records),
                 timeout=60, what="the slow call's first progress")
        assert pids_with_argument(f"--unicore-test={marker}")  # the server runs while the call does
        cancelled_at = time.monotonic()
        cancel.set()
        runner.join(30)
        assert not runner.is_alive()
        assert time.monotonic() - cancelled_at < 15  # the call (60 s) was abandoned, not waited for
    finally:
        cancel.set()
        runner.join(60)
    assert outcome[0].exit_code == EXIT_CANCELLED
    result = store.inbox("cx")[-1].content["toolResult"]
    assert result["status"] == "error" and "the MCP call was abandoned" in result["content"][0]["text"]
    wait_for(lambda: not pids_with_argument(f"--unicore-test={marker}"), timeout=30, what="the stdio server to stop")
