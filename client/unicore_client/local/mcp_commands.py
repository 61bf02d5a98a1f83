"""``unicore run --mcp-server FILE --mcp NAME[:tool,tool]``: the MCP servers of a local task (docs/mcp.md).

``--mcp-server FILE`` (repeatable) reads one or more MCPServer documents (YAML/JSON, ``---`` between documents);
``--mcp NAME`` attaches the server NAME with all its tools, ``--mcp NAME:tool,tool`` with only those (the allow-list,
the tools' names on the server). Without ``--mcp`` every server given with ``--mcp-server`` is attached with all its
tools. The definitions are stored with the root task (``TaskSpec.mcp_definitions``), so the tree's later turns
(``unicore send``) connect to the same servers; the local supervisor hands them to each turn in
``UNICORE_MCP_SERVERS``. Every problem is one line, exit code 2, before anything is written.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from unicore.api.schema import MCPServerRef
from unicore.errors import ConfigError
from unicore.mcp_config import SEPARATOR, ResolvedMCPServer, parse_document, resolved

from unicore_client.arguments import UsageError, read_yaml_documents


def add_mcp_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--mcp-server", action="append", metavar="FILE",
                     help="MCPServer definitions (YAML, one or more documents; repeatable; docs/mcp.md)")
    run.add_argument("--mcp", action="append", metavar="NAME[:TOOL,...]",
                     help="give the task the tools of MCP server NAME (only TOOL,... when given; repeatable); "
                          "default: every server of --mcp-server with all its tools")


def read_definitions(files: Sequence[str]) -> list[ResolvedMCPServer]:
    """The MCPServer documents of ``files``, in order; UsageError for a bad file or a name defined twice."""
    servers: dict[str, ResolvedMCPServer] = {}
    for path in files:
        documents = read_yaml_documents(path, "MCP server file")
        if not documents:
            raise UsageError(f"MCP server file {path} holds no MCPServer document")
        for position, document in enumerate(documents, start=1):
            where = path if len(documents) == 1 else f"{path} (document {position})"
            try:
                server = resolved(parse_document(document, where, local=True))
            except ConfigError as exc:
                raise UsageError(str(exc)) from None
            if server.name in servers:
                raise UsageError(f"MCP server {server.name!r} is defined twice (in {where})")
            servers[server.name] = server
    return list(servers.values())


def parse_attachment(text: str) -> MCPServerRef:
    """``NAME`` or ``NAME:tool,tool`` -> the reference; UsageError for a bad one."""
    name, has_tools, tools_text = text.partition(":")
    tools = [tool.strip() for tool in tools_text.split(",") if tool.strip()] if has_tools else None
    if has_tools and not tools:
        raise UsageError(f"--mcp {text!r}: name the tools after ':' (tool,tool), or leave out ':' for all of them")
    try:
        return MCPServerRef(name=name, tools=tools)
    except ValueError as exc:
        raise UsageError(f"--mcp {text!r}: {_first_error(exc)}") from None


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return str(errors()[0]["msg"]).removeprefix("Value error, ")
    return str(exc)


def mcp_for_run(files: Sequence[str] | None, attachments: Sequence[str] | None
                ) -> tuple[list[MCPServerRef] | None, list[ResolvedMCPServer]]:
    """(the task's server references, the definitions to store) for ``--mcp-server``/``--mcp``."""
    servers = read_definitions(files or [])
    if not attachments:
        return ([MCPServerRef(name=server.name) for server in servers] or None), servers
    defined = {server.name for server in servers}
    refs: dict[str, MCPServerRef] = {}
    for text in attachments:
        ref = parse_attachment(text)
        if ref.name not in defined:
            known = ", ".join(sorted(defined)) or "none: give its file with --mcp-server FILE"
            raise UsageError(f"--mcp {text!r}: no MCP server {ref.name!r} is defined (defined: {known})")
        if ref.name in refs:
            raise UsageError(f"--mcp {ref.name!r} is given twice")
        refs[ref.name] = ref
    return list(refs.values()), [server for server in servers if server.name in refs]


def is_mcp_tool_name(name: str, refs: Sequence[MCPServerRef] | None) -> bool:
    """``name`` is ``<server>__<tool>`` of a server the task uses (``--require-approval`` may gate it)."""
    server, separator, tool = name.partition(SEPARATOR)
    return bool(separator and tool) and any(ref.name == server for ref in refs or ())


__all__ = ["add_mcp_arguments", "is_mcp_tool_name", "mcp_for_run", "parse_attachment", "read_definitions"]
