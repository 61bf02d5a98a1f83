"""MCP servers' tools as UniCore tools for one turn (docs/mcp.md).

``open_toolbox`` connects to the servers the task names (``TaskRecord.mcp_servers``), whose definitions come from
``UNICORE_MCP_SERVERS`` (``unicore.mcp_config``), all at once, each bounded by its ``timeoutSeconds``; lists their
tools once (the list is the turn's); and makes a ``Tool`` of each allowed one:

- named ``<server>__<tool>`` (``mcp_toolbox.offered_names``: OpenAI function names are ``[A-Za-z0-9_-]{1,64}``);
- with the server's description and its JSON input schema UNCHANGED (the server validates the input);
- a call runs with ``toolTimeoutSeconds[tool]`` or ``timeoutSeconds``; the result's text becomes the tool result,
  other content is summarized as text (``result_text``); an ``isError`` result, a server that is down, slow or dies
  mid-call become error tool results (``McpServerError``), never a failed turn.

Tools outside the allow-list are never offered; a call of one, or of a tool of a server that could not be reached,
is refused with an error tool result saying why (``McpToolbox.explain``, through ``ToolContext.explain_unavailable``).

This module imports the ``mcp`` SDK: only ``registry.toolbox_for`` imports it, for a turn that uses MCP servers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import mcp_types
from pydantic import BaseModel, ConfigDict

from unicore.api.schema import MCPServerRef
from unicore.errors import ToolError
from unicore.log import get_logger
from unicore.mcp_config import ResolvedMCPServer, parse_resolved
from unicore.tools.base import Tool, ToolContext
from unicore.tools.mcp_client import LoopThread, ServerConnection, describe, gather_quietly, progress_logger
from unicore.tools.mcp_toolbox import McpToolbox, offered_names

log = get_logger("mcp")

OPEN_GRACE_SECONDS = 5.0


def result_text(result: mcp_types.CallToolResult) -> str:
    """A call's result as text: text content as it is; images, audio, resources and links summarized in one line
    each; structured content as JSON when there is no text (servers usually give both)."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, mcp_types.TextContent):
            parts.append(item.text)
        elif isinstance(item, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(item, mcp_types.ImageContent) else "audio"
            parts.append(f"[{kind} {item.mime_type}, {len(item.data) * 3 // 4:,} bytes: not shown]")
        elif isinstance(item, mcp_types.EmbeddedResource):
            resource = item.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(f"[resource {resource.uri}]\n{resource.text}")
            else:
                mime = f" {resource.mime_type}" if resource.mime_type else ""
                parts.append(f"[resource {resource.uri}{mime}, {len(resource.blob) * 3 // 4:,} bytes: not shown]")
        elif isinstance(item, mcp_types.ResourceLink):
            mime = f", {item.mime_type}" if item.mime_type else ""
            parts.append(f"[resource link {item.uri} ({item.name}{mime})]")
        else:
            parts.append(f"[{getattr(item, 'type', type(item).__name__)} content: not shown]")
    if not any(isinstance(item, mcp_types.TextContent) for item in result.content) and \
            result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, default=str))
    return "\n".join(parts)


class McpInput(BaseModel):
    """Any JSON object: the server checks the input against its own schema."""

    model_config = ConfigDict(extra="allow")


class McpTool(Tool):
    """One MCP tool of one server (a subclass per tool: ``name`` and ``description`` are class variables)."""

    Input: ClassVar[type[BaseModel]] = McpInput
    connection: ClassVar[ServerConnection]
    remote_name: ClassVar[str]
    schema: ClassVar[dict[str, Any]]

    def input_schema(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.schema))  # the server's schema, unchanged (a copy)

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        spec = self.connection.server.spec
        arguments = args.model_dump()
        log.info("task %s: calling MCP tool %s (%s on %s)", ctx.task_id, self.name, self.remote_name,
                 self.connection.name)
        result = self.connection.call(self.remote_name, arguments, timeout=spec.call_timeout(self.remote_name),
                                      cancel=ctx.cancel, on_progress=progress_logger(ctx.task_id, self.name))
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or f"MCP tool {self.remote_name} of server {self.connection.name} failed")
        return text

    def target(self) -> str:
        return f"MCP tool {self.remote_name!r} of server {self.connection.name!r}"

    def metric_labels(self) -> dict[str, str]:
        # By server only: the server's tool names are a tenant's choice, no bounded label (tools.call_metrics).
        return {"tool": "mcp", "source": "mcp", "server": self.connection.name}


def make_tool(offered: str, connection: ServerConnection, remote: mcp_types.Tool) -> Tool:
    description = remote.description or remote.title or f"Tool {remote.name} of MCP server {connection.name}."
    cls = type(f"McpTool_{offered}", (McpTool,), {
        "name": offered, "description": description, "connection": connection, "remote_name": remote.name,
        "schema": remote.input_schema,
    })
    return cls()


def open_toolbox(refs: Sequence[MCPServerRef] | None, definitions: str, *, local: bool, workspace: Path,
                 environ: Mapping[str, str], taken: Iterable[str] = ()) -> McpToolbox:
    """Connect to the servers ``refs`` names and make their allowed tools (see the module doc). ``definitions``:
    the value of UNICORE_MCP_SERVERS (a bad value is a ConfigError: the turn fails with one line); ``taken``: the
    names of the task's other tools (an MCP tool of the same name is not offered)."""
    box = McpToolbox()
    if not refs:
        return box
    servers: dict[str, ResolvedMCPServer] = parse_resolved(definitions, local=local)
    wanted: list[tuple[MCPServerRef, ResolvedMCPServer]] = []
    for ref in refs:
        if ref.name in servers:
            wanted.append((ref, servers[ref.name]))
        else:
            box.down[ref.name] = "no definition of it reached this turn (UNICORE_MCP_SERVERS)"
            log.warning("MCP server %s: %s", ref.name, box.down[ref.name])
    if not wanted:
        return box
    box.runner = LoopThread()
    box.connections = [ServerConnection(server, box.runner, cwd=workspace, environ=environ) for _, server in wanted]
    longest = max(server.spec.timeout_seconds for _, server in wanted)
    try:
        listed = box.runner.run(gather_quietly([conn.open() for conn in box.connections]),
                                longest + OPEN_GRACE_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the loop itself failed: no server is available
        listed = [exc] * len(wanted)
    names = set(taken)
    for (ref, _server), connection, tools in zip(wanted, box.connections, listed, strict=True):
        if isinstance(tools, BaseException):
            box.down[ref.name] = describe(tools) if not isinstance(tools, ToolError) else str(tools)
            log.warning("MCP server %s: not available in this turn: %s", ref.name, box.down[ref.name])
            continue
        _add_tools(box, ref, connection, tools, names)
    return box


def _add_tools(box: McpToolbox, ref: MCPServerRef, connection: ServerConnection, tools: list[mcp_types.Tool],
               names: set[str]) -> None:
    by_name = {tool.name: tool for tool in tools}
    allowed = set(by_name) if ref.tools is None else set(ref.tools)
    missing = sorted(allowed - set(by_name))
    if missing:
        log.warning("MCP server %s lists no tool(s) %s (named in the task's allow-list)", ref.name, ", ".join(missing))
    offered_allowed = [name for name in ref.tools or () if name in by_name]
    offered_as = {remote: offered for offered, remote in offered_names(ref.name, list(by_name)).items()}
    for remote in (name for name in by_name if name in offered_as):  # in the server's order
        offered = offered_as[remote]
        if remote not in allowed:
            box.refused[offered] = (f"tool {remote!r} of MCP server {ref.name!r} is not in this task's allow-list "
                                    f"(allowed: {', '.join(offered_allowed) or 'none'})")
            continue
        if offered in names:
            log.warning("MCP tool %s of server %s: the name %s is taken by another tool; not offered", remote,
                        ref.name, offered)
            continue
        names.add(offered)
        box.tools.append(make_tool(offered, connection, by_name[remote]))


__all__ = ["McpTool", "make_tool", "open_toolbox", "result_text"]
