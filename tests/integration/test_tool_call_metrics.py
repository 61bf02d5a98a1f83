"""Tool call metrics (``unicore.tools.call_metrics``): every call through ``run_tool_call`` is counted exactly once in
``tool_calls_total{tool,source,server,outcome}`` and, when the tool ran, timed in ``tool_call_duration_seconds``, in a
real redis-server, and the operator's exporter turns them into ``unicore_tool_*`` series. The MCP calls of a real turn
are asserted in tests/integration/test_mcp_local.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
from pydantic import BaseModel
from unicore.errors import ToolError
from unicore.store.keys import METRICS_COUNTERS, METRICS_HISTOGRAMS
from unicore.store.telemetry import Telemetry
from unicore.tools.base import Tool, ToolContext
from unicore.tools.registry import ALL_TOOLS, run_tool_call
from unicore.tools.workspace import ReadFileInput


class NoSpawner:
    def spawn(self, parent_id: str, name: str, prompt: str, tools: list[str] | None,
              agent: str | None = None) -> tuple[str, bool]:
        raise AssertionError("not expected to spawn")


class Crashes(Tool):
    """A custom tool with a bug: an unexpected exception."""

    name = "crashes"
    description = "crashes"
    Input = ReadFileInput

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        raise RuntimeError("boom")


class StopsTheTurn(Tool):
    """A tool that fails because the turn is being cancelled while it runs (as an abandoned MCP call does)."""

    name = "stops_the_turn"
    description = "stops"
    Input = ReadFileInput

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        ctx.cancel.set()
        raise ToolError("cancelled: the turn is stopping; the call was abandoned")


def explain(name: str) -> str | None:
    """As the turn's MCP toolbox: a tool of server 'time' outside the task's allow-list."""
    return "tool 'convert_time' of MCP server 'time' is not in this task's allow-list" if name == "time__convert_time" \
        else None


def context(workspace: Path, telemetry: Telemetry | None) -> ToolContext:
    return ToolContext(task_id="demo", store=None,  # type: ignore[arg-type]
                       spawner=NoSpawner(), workspace=workspace, explain_unavailable=explain, telemetry=telemetry)


def call(ctx: ToolContext, tools: list[Tool], name: str, given: dict[str, Any]) -> str:
    result = run_tool_call(ctx, tools, {"toolUse": {"toolUseId": "t1", "name": name, "input": given}})
    return str(result["toolResult"]["status"])


def counters(client: redis.Redis) -> dict[str, float]:
    return {field: float(value) for field, value in client.hgetall(METRICS_COUNTERS).items()
            if field.startswith("tool_calls_total|")}


def timed(client: redis.Redis) -> dict[str, float]:
    """Label set -> how many calls the duration histogram holds."""
    return {field.split("|")[1]: float(value) for field, value in client.hgetall(METRICS_HISTOGRAMS).items()
            if field.startswith("tool_call_duration_seconds|") and field.endswith("|count")}


def builtin(tool: str, outcome: str) -> str:
    return f"tool_calls_total|outcome={outcome},server=,source=builtin,tool={tool}"


def test_each_call_is_counted_once_by_tool_and_outcome(redis_client: redis.Redis, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("hello")
    ctx = context(tmp_path, Telemetry(redis_client))
    tools = [ALL_TOOLS["read_file"], ALL_TOOLS["list_files"], Crashes(), StopsTheTurn()]

    assert call(ctx, tools, "read_file", {"path": "notes.md"}) == "success"  # ok
    assert counters(redis_client) == {builtin("read_file", "ok"): 1}  # one call, one count
    assert timed(redis_client) == {"server=,source=builtin,tool=read_file": 1}

    assert call(ctx, tools, "read_file", {"path": "missing.md"}) == "error"  # the tool ran and failed (ToolError)
    assert call(ctx, tools, "crashes", {"path": "x"}) == "error"  # an unexpected exception
    assert call(ctx, tools, "read_file", {"no_such_field": 1}) == "error"  # invalid input: refused, never ran
    assert call(ctx, tools, "made_up_tool", {}) == "error"  # a name the model made up: refused
    assert call(ctx, tools, "spawn_task", {}) == "error"  # a built-in tool this task may not use: refused
    assert call(ctx, tools, "time__convert_time", {}) == "error"  # an MCP tool outside the allow-list: refused
    assert call(ctx, tools, "list_files", {}) == "success"
    assert call(ctx, tools, "stops_the_turn", {"path": "x"}) == "error"  # failed while the turn was cancelled
    assert call(ctx, tools, "list_files", {}) == "error"  # the turn is stopping: not run

    assert counters(redis_client) == {
        builtin("read_file", "ok"): 1,
        builtin("read_file", "error"): 1,
        builtin("crashes", "error"): 1,
        builtin("read_file", "refused"): 1,
        "tool_calls_total|outcome=refused,server=,source=unknown,tool=unknown": 1,
        builtin("spawn_task", "refused"): 1,
        "tool_calls_total|outcome=refused,server=time,source=mcp,tool=mcp": 1,
        builtin("list_files", "ok"): 1,
        builtin("stops_the_turn", "cancelled"): 1,
        builtin("list_files", "cancelled"): 1,
    }
    # only the calls whose tool ran are timed
    assert timed(redis_client) == {
        "server=,source=builtin,tool=read_file": 2,
        "server=,source=builtin,tool=crashes": 1,
        "server=,source=builtin,tool=list_files": 1,
        "server=,source=builtin,tool=stops_the_turn": 1,
    }


def test_no_telemetry_measures_nothing_and_a_dead_redis_fails_no_call(redis_client: redis.Redis,
                                                                       tmp_path: Path) -> None:
    assert call(context(tmp_path, None), [ALL_TOOLS["list_files"]], "list_files", {}) == "success"
    assert counters(redis_client) == {}
    nowhere = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)  # nothing listens on port 1
    ctx = context(tmp_path, Telemetry(nowhere))
    assert call(ctx, [ALL_TOOLS["list_files"]], "list_files", {}) == "success"  # metrics are best effort


def test_the_operator_exports_the_runtime_series_with_every_outcome(redis_client: redis.Redis,
                                                                    tmp_path: Path) -> None:
    from unicore.store.telemetry import read_telemetry
    from unicore_operator.metrics.catalog import TOOL_CALL_OUTCOMES
    from unicore_operator.metrics.redis_collector import families_from_hashes

    ctx = context(tmp_path, Telemetry(redis_client))
    call(ctx, [ALL_TOOLS["list_files"]], "list_files", {})
    call(ctx, [ALL_TOOLS["list_files"]], "time__convert_time", {})
    samples = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in families_from_hashes(*read_telemetry(redis_client)) for sample in family.samples}
    list_files = (("server", ""), ("source", "builtin"), ("tool", "list_files"))
    time_server = (("server", "time"), ("source", "mcp"), ("tool", "mcp"))
    for outcome in TOOL_CALL_OUTCOMES:  # every outcome of each tool seen, at 0 until it happens
        for labels, ok_calls, refused_calls in ((list_files, 1, 0), (time_server, 0, 1)):
            expected = {"ok": ok_calls, "refused": refused_calls}.get(outcome, 0)
            key = ("unicore_tool_calls_total", tuple(sorted((*labels, ("outcome", outcome)))))
            assert samples[key] == expected, (key, samples.get(key))
    assert samples[("unicore_tool_call_duration_seconds_count", list_files)] == 1
    assert samples[("unicore_tool_call_duration_seconds_count", time_server)] == 0  # refused: not timed
