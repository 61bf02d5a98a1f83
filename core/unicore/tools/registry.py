"""The known tools (the built-in ones of ``tools.builtin_tools`` and custom ones), the toolset a task may use and its
MCP tools (``toolbox_for``), their JSON schemas, and the one safe way to run a call.

``run_tool_call`` never raises for a tool problem: an unknown or disallowed tool, input that fails validation,
a ``ToolError``/``LimitExceeded`` or any unexpected exception becomes an error toolResult the model can read
and act on.

Custom tools: ``UNICORE_EXTRA_TOOLS=package.module:ATTR[,...]`` names Tool subclasses (or lists/tuples of
them) that join the known tools (``known_tools``). A task gets them only when its tool list names them (they
are never in the default toolsets). A bad spec raises ConfigError.

Every call is counted once, in ``run_tool_call``: ``tool_calls_total`` and ``tool_call_duration_seconds``
(``tools.call_metrics``), into the context's ``telemetry``.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from unicore.api.schema import ContentBlock
from unicore.errors import ConfigError, ToolError
from unicore.log import get_logger
from unicore.providers.base import ToolSpec
from unicore.settings import RuntimeSettings
from unicore.tools import call_metrics, policy
from unicore.tools.base import Tool, ToolContext
from unicore.tools.builtin_tools import ALL_TOOLS
from unicore.tools.mcp_toolbox import McpToolbox
from unicore.tools.storeview import view_of
from unicore.traces import calls as call_traces
from unicore.turn.answers import MAX_ARGUMENT_DEPTH, UNPARSED

log = get_logger("tools")

MAX_RESULT_CHARS = 100_000
EXTRA_TOOLS_ENV = RuntimeSettings.env_var("extra_tools")


def _tool_classes(spec: str, value: Any) -> list[type[Tool]]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not (isinstance(item, type) and issubclass(item, Tool)):
            raise ConfigError(
                f"{EXTRA_TOOLS_ENV}: {spec} is not a Tool subclass or a list of them ({item!r})"
            )
    return items


@lru_cache(maxsize=8)
def load_extra_tools(specs: str) -> dict[str, Tool]:
    """The tools named by a ``module:ATTR[,module:ATTR...]`` list (the format of ``$UNICORE_EXTRA_TOOLS``)."""
    tools: dict[str, Tool] = {}
    for spec in (part.strip() for part in specs.split(",")):
        if not spec:
            continue
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise ConfigError(f"{EXTRA_TOOLS_ENV}: {spec!r} is not of the form package.module:ATTR")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"{EXTRA_TOOLS_ENV}: cannot import {module_name!r}: {exc}") from None
        if not hasattr(module, attr):
            raise ConfigError(f"{EXTRA_TOOLS_ENV}: module {module_name!r} has no attribute {attr!r}")
        for cls in _tool_classes(spec, getattr(module, attr)):
            tool = cls()
            if not getattr(tool, "name", ""):
                raise ConfigError(f"{EXTRA_TOOLS_ENV}: {cls.__qualname__} from {spec} has no name")
            if tool.name in ALL_TOOLS or tool.name in tools:
                raise ConfigError(f"{EXTRA_TOOLS_ENV}: tool {tool.name!r} from {spec} is defined twice")
            tools[tool.name] = tool
    return tools


def known_tools() -> dict[str, Tool]:
    """The built-in tools plus the custom tools of ``$UNICORE_EXTRA_TOOLS`` (ConfigError for a bad spec)."""
    extra = load_extra_tools(RuntimeSettings.from_env(only={"extra_tools"}).extra_tools)
    return {**ALL_TOOLS, **extra} if extra else ALL_TOOLS


def tool_names_for(record: Any) -> list[str]:
    """Names of the tools the task may use (``record`` as returned by the store, a TaskSpec or a TaskView)."""
    return policy.allowed_tool_names(view_of(record), known_tools())


def toolset_for(record: Any) -> list[Tool]:
    """The task's allowed tools: ``record.tools`` if set, else the default (root) or reduced (child) toolset.

    ``spawn_task``/``message_task`` are dropped when recursion is off or a child would exceed ``max_depth``.
    """
    known = known_tools()
    return [known[name] for name in tool_names_for(record)]


def toolbox_for(record: Any, settings: Any, workspace: Path, environ: Mapping[str, str],
                taken: Iterable[str]) -> McpToolbox:
    """The task's MCP tools for one turn (``record``: its ``TaskRecord``) under the turn's ``RuntimeSettings``: stdio
    servers only in local mode (``UNICORE_SPAWNER=local``). The ``mcp`` SDK is loaded only for a task that names MCP
    servers (``tools.mcp_toolbox``)."""
    refs = getattr(record, "mcp_servers", None)
    if not refs:
        return McpToolbox()
    from unicore.tools.mcp_tools import open_toolbox  # the mcp SDK: only for a turn that uses MCP servers

    return open_toolbox(refs, settings.mcp_servers, local=settings.spawner == "local", workspace=workspace,
                        environ=environ, taken=taken)


def tool_specs(tools: Iterable[Tool]) -> list[ToolSpec]:
    """Model-facing specs; the JSON schemas are the tools' ``input_schema()`` (a built-in's from its pydantic input
    model, an MCP tool's the server's own, unchanged)."""
    return [ToolSpec(name=tool.name, description=tool.description, input_schema=tool.input_schema()) for tool in tools]


def format_validation_error(tool: str, error: ValidationError) -> str:
    lines = [f"Invalid input for tool {tool}:"]
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ())) or "(input)"
        problem = item.get("msg", "invalid")
        if item.get("type") == "missing":
            lines.append(f"- {where}: required field is missing")
        elif item.get("type") == "extra_forbidden":
            lines.append(f"- {where}: unknown field (not in the tool's input schema)")
        else:
            given = json.dumps(item.get("input"), default=str)
            given = given if len(given) <= 80 else given[:77] + "..."
            lines.append(f"- {where}: {problem} (got {given})")
    lines.append("Fix the input and call the tool again.")
    return "\n".join(lines)


def _result_content(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str)
        if len(text) <= MAX_RESULT_CHARS:
            return [{"json": value}]
        value = text
    text = "" if value is None else str(value)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS:,} more characters cut ...]"
    return [{"text": text or "(no output)"}]


def _result(tool_use_id: str, content: list[dict[str, Any]], error: bool) -> ContentBlock:
    return {
        "toolResult": {
            "toolUseId": tool_use_id,
            "content": content,
            "status": "error" if error else "success",
        }
    }


def _error(tool_use_id: str, message: str) -> ContentBlock:
    return _result(tool_use_id, [{"text": f"Error: {message}"}], True)


class _Done(NamedTuple):
    """A call's result block and how it is counted (``tools.call_metrics``)."""

    result: ContentBlock
    outcome: str
    labels: dict[str, str]
    seconds: float | None = None  # how long the tool ran; None: it did not run


def run_tool_call(ctx: ToolContext, tools: Iterable[Tool], tool_use: Mapping[str, Any]) -> ContentBlock:
    """Run one ``toolUse`` block (or its inner dict) and return its ``toolResult`` block. Never raises.

    The one place a tool call is counted and timed (``tools.call_metrics``, into ``ctx.telemetry``) and traced: once
    per call."""
    use = tool_use.get("toolUse", tool_use)
    with call_traces.tool_call(use, tools) as span:  # its ``execute_tool`` span (unicore.traces.calls)
        done = _run(ctx, tools, use)
        call_traces.tool_result(span, done.result, done.outcome)
    call_metrics.record(ctx.telemetry, done.labels, done.outcome, done.seconds)
    return done.result


def _run(ctx: ToolContext, tools: Iterable[Tool], use: Mapping[str, Any]) -> _Done:
    tool_use_id = str(use.get("toolUseId", ""))
    name = use.get("name")
    allowed = {tool.name: tool for tool in tools}
    if name not in allowed:
        why = ctx.explain_unavailable(str(name)) if ctx.explain_unavailable is not None else None
        known = not why and name in known_tools()
        if why:
            message = why
        elif known:
            message = (
                f"tool {name!r} is not available to this task; your tools: {', '.join(allowed) or 'none'}"
            )
        else:
            message = f"unknown tool {name!r}; your tools: {', '.join(allowed) or 'none'}"
        log.warning("task %s: refused tool call %r: %s", ctx.task_id, name, message)
        labels = call_metrics.unavailable_labels(str(name), explained=bool(why), known=known)
        return _Done(_error(tool_use_id, message), call_metrics.REFUSED, labels)
    tool = allowed[name]
    labels = call_metrics.tool_labels(tool)
    if ctx.cancel.is_set():
        return _Done(_error(tool_use_id, "cancelled: the turn is stopping, the tool did not run"),
                     call_metrics.CANCELLED, labels)
    raw_input = use.get("input")
    if raw_input is None:
        raw_input = {}
    if isinstance(raw_input, dict) and UNPARSED in raw_input:  # not one JSON object, or nested too deep (answers)
        message = (f"Invalid input for tool {tool.name}: the arguments are not one JSON object nested at most "
                   f"{MAX_ARGUMENT_DEPTH} levels deep.\nFix the input and call the tool again.")
        return _Done(_error(tool_use_id, message), call_metrics.REFUSED, labels)
    try:
        args = tool.Input.model_validate(raw_input)
    except ValidationError as exc:
        return _Done(_error(tool_use_id, format_validation_error(tool.name, exc)), call_metrics.REFUSED, labels)
    started = time.monotonic()
    ctx.tool_use_id = tool_use_id
    try:
        value = tool.run(ctx, args)
    except (
        Exception
    ) as exc:  # every failure goes back to the model (seed rule); ToolError carries a clear message
        seconds = time.monotonic() - started
        outcome = call_metrics.CANCELLED if ctx.cancel.is_set() else call_metrics.ERROR
        if isinstance(exc, ToolError):
            log.info("task %s: tool %s refused: %s", ctx.task_id, name, exc)
            return _Done(_error(tool_use_id, str(exc)), outcome, labels, seconds)
        log.exception("task %s: tool %s failed unexpectedly", ctx.task_id, name)
        message = f"tool {name} failed unexpectedly: {type(exc).__name__}: {exc}"
        return _Done(_error(tool_use_id, message), outcome, labels, seconds)
    seconds = time.monotonic() - started
    log.debug("task %s: tool %s ok", ctx.task_id, name)
    return _Done(_result(tool_use_id, _result_content(value), False), call_metrics.OK, labels, seconds)
