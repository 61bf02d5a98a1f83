"""Tool call metrics, recorded once per call by ``registry.run_tool_call`` (every call goes through it: the turn's
own and an approved call run after a person's decision alike), through the turn's ``Telemetry``
(``ToolContext.telemetry``; None: not measured). The operator exports them with the ``unicore_`` prefix
(``unicore_operator.metrics.catalog``):

* ``tool_calls_total{tool,source,server,outcome}`` counter, one per call;
* ``tool_call_duration_seconds{tool,source,server}`` histogram: the wall time of ``Tool.run`` for the calls that ran
  (ok, error, or cancelled while running); a refused call did not run and is not timed.

Labels are bounded: none takes a value from the model's input or from an MCP server's list of tools.

* source ``builtin``: a built-in tool or a custom one of the deployment (``UNICORE_EXTRA_TOOLS``); tool = its name,
  server "" (``Tool.metric_labels``).
* source ``mcp``: tool ``mcp``, server = the MCP server's name (``McpTool.metric_labels``). The server's own tool
  names are no label: a tenant's servers may list any tools, so server x tool would be unbounded.
* source ``unknown``: a name that is neither (the model made it up); tool ``unknown``, server "", always refused.

Outcomes (``OUTCOMES``, the catalog's ``TOOL_CALL_OUTCOMES``):

* ``ok``: the tool returned a result;
* ``error``: the tool ran and failed: a ``ToolError`` (``LimitExceeded``, an MCP ``isError`` result, an MCP server
  that is slow or dies mid-call) or any unexpected exception;
* ``refused``: the tool did not run: not one of the task's tools (unknown, not allowed, outside an MCP allow-list,
  of an MCP server that could not be reached) or input that fails validation;
* ``cancelled``: the turn is stopping: the tool did not start, or it failed while the turn was being cancelled
  (an abandoned MCP call).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from unicore.mcp_config import SEPARATOR
from unicore.providers.calling import metric_label
from unicore.tools.builtin_tools import ALL_TOOLS

if TYPE_CHECKING:
    from unicore.store.telemetry import Telemetry
    from unicore.tools.base import Tool

CALLS = "tool_calls_total"
DURATION = "tool_call_duration_seconds"
OK, ERROR, REFUSED, CANCELLED = "ok", "error", "refused", "cancelled"
OUTCOMES = (OK, ERROR, REFUSED, CANCELLED)


def tool_labels(tool: Tool) -> dict[str, str]:
    """The labels of a call of one of the task's tools (its ``metric_labels``, made safe for telemetry)."""
    return {key: metric_label(value) for key, value in tool.metric_labels().items()}


def builtin_label_sets() -> list[dict[str, str]]:
    """The label sets every deployment's calls can carry before any call is made: each built-in tool's and the
    unknown tool's. The operator exports their series at 0 from its first scrape (``redis_collector``), so a panel of
    tool calls shows 0, not "No data", until the first call."""
    return [tool_labels(tool) for tool in ALL_TOOLS.values()] + [unavailable_labels("", explained=False, known=False)]


def unavailable_labels(name: str, *, explained: bool, known: bool) -> dict[str, str]:
    """The labels of a refused call of ``name``, a tool the task does not have. ``explained``: the turn's MCP toolbox
    said why (a tool of one of the task's MCP servers: outside its allow-list, or the server is down); ``known``: a
    built-in or custom tool the task may not use. Anything else is ``unknown``: the model's name is no label."""
    if explained and SEPARATOR in name:
        return {"tool": "mcp", "source": "mcp", "server": metric_label(name.split(SEPARATOR, 1)[0])}
    if known:
        return {"tool": metric_label(name), "source": "builtin", "server": ""}
    return {"tool": "unknown", "source": "unknown", "server": ""}


def record(telemetry: Telemetry | None, labels: Mapping[str, str], outcome: str, seconds: float | None) -> None:
    """Count one call (and time it when it ran: ``seconds`` not None). Best effort, never raises a Redis error."""
    if telemetry is None:
        return
    telemetry.incr(CALLS, {**labels, "outcome": outcome})
    if seconds is not None:
        telemetry.observe(DURATION, seconds, labels)
