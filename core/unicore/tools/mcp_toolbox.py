"""A turn's MCP toolbox and the names the model sees (docs/mcp.md), without the ``mcp`` SDK.

Kept apart from ``tools.mcp_tools`` (the tools themselves, over ``tools.mcp_client``) because importing the SDK
costs a turn about 0.3 s: the turn imports only this module, and ``registry.toolbox_for`` loads the SDK for a turn
whose task names MCP servers.

``offered_names`` maps a server's tool names to the names the model sees; ``McpToolbox`` is what a turn holds: the
tools to offer, why a call of a refused or unavailable tool is refused (``explain``), the sessions to ``close``.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from unicore.log import get_logger
from unicore.mcp_config import SEPARATOR
from unicore.tools.base import Tool

if TYPE_CHECKING:
    from unicore.tools.mcp_client import LoopThread, ServerConnection

log = get_logger("mcp")

MAX_NAME = 64  # OpenAI's function names: [A-Za-z0-9_-], at most 64 characters (Bedrock's toolSpec names likewise)
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
HASH_CHARS = 8


def offered_names(server: str, tools: Sequence[str]) -> dict[str, str]:
    """Offered name -> the tool's name on the server, for the tools of one server.

    A function of the SET of the server's tool names, never of the order it lists them in (an approval names the
    offered name, so the same name must mean the same tool in every turn):

    - ``<server>__<tool>`` when that is a valid function name (such a tool always keeps it);
    - otherwise the tool's characters outside ``[A-Za-z0-9_-]`` become ``_``; when that name is over 64 characters,
      is a valid tool's, or is what another tool's name sanitises to as well, EVERY such tool gets its name cut and
      ended in ``_`` + 8 hex characters of the sha256 of its own real name (more of the digest, again for each of
      them, in the unlikely case two still clash);
    - a tool that cannot get a unique name even with the whole digest is not offered (logged)."""
    prefix = server + SEPARATOR
    unique = sorted(set(tools))
    offered = {prefix + tool: tool for tool in unique if NAME_RE.match(prefix + tool)}
    plain = {tool: prefix + re.sub(r"[^A-Za-z0-9_-]", "_", tool) for tool in unique if prefix + tool not in offered}
    sharing = Counter(plain.values())
    waiting = []
    for tool, name in plain.items():
        if len(name) <= MAX_NAME and sharing[name] == 1 and name not in offered:
            offered[name] = tool
        else:
            waiting.append(tool)
    length = HASH_CHARS
    longest = MAX_NAME - len(prefix) - 1
    while waiting and length <= longest:
        hashed = {tool: _hashed(prefix, plain[tool], tool, length) for tool in waiting}
        sharing = Counter(hashed.values())
        waiting = [tool for tool in waiting if sharing[hashed[tool]] > 1 or hashed[tool] in offered]
        offered.update((name, tool) for tool, name in hashed.items() if tool not in waiting)
        length += 1
    for tool in waiting:
        log.warning("MCP server %s: tool %r gets no unique name; not offered", server, tool)
    return offered


def _hashed(prefix: str, plain: str, tool: str, length: int) -> str:
    """``plain`` (``prefix`` + the sanitised tool name) cut to leave room for ``_`` and ``length`` hex characters
    of the sha256 of the real name ``tool``, which end it."""
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:length]
    stem = plain[len(prefix):][:MAX_NAME - len(prefix) - length - 1]
    return f"{prefix}{stem}_{digest}"


@dataclass
class McpToolbox:
    """The MCP tools of one turn: ``tools`` to offer, ``explain`` for refused calls, ``close`` at the turn's end."""

    tools: list[Tool] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # offered name of a listed, not allowed tool -> why
    down: dict[str, str] = field(default_factory=dict)  # server -> why its tools are not available
    runner: LoopThread | None = None
    connections: list[ServerConnection] = field(default_factory=list)

    def explain(self, name: str) -> str | None:
        """Why ``name`` is no tool of this turn, when it names an MCP server's tool; None otherwise."""
        if name in self.refused:
            return self.refused[name]
        server = name.split(SEPARATOR, 1)[0] if SEPARATOR in name else ""
        if server in self.down:
            return f"the tools of MCP server {server!r} are not available in this turn: {self.down[server]}"
        return None

    def close(self) -> None:
        if self.runner is None:
            return
        runner, self.runner = self.runner, None
        from unicore.tools.mcp_client import describe, gather_quietly  # loaded already: the runner is its

        try:
            runner.run(gather_quietly([connection.aclose() for connection in self.connections]), 30)
        except Exception as exc:  # noqa: BLE001 - closing never fails a turn
            log.warning("closing MCP sessions: %s", describe(exc))
        runner.stop()


__all__ = ["McpToolbox", "offered_names"]
