"""MCP servers for turn pods (docs/mcp.md): the MCPServer objects a task uses -> the pod's
``UNICORE_MCP_SERVERS`` (resolved definitions) and one ``secretKeyRef`` variable per header.

A task uses the servers its own ``spec.mcpServers`` names and those of its Agent (``spec.agentRef``); the operator
looks them up in its index of the namespace's MCPServers (``mcpserver_index``) and resolves each ``headersFrom``
entry into a variable ``UNICORE_MCP_HEADER_<server>_<header>`` (index numbers) that the kubelet fills from the Secret
in the task's namespace (``optional``: a missing Secret leaves the header out and the server answers 401, which the
model sees as an error tool result, instead of a pod that cannot start). No header value is ever in a Job, and the
operator reads no Secret. A name no MCPServer defines is left out: the turn tells the model that server is not
defined (``unicore.tools.mcp_tools``); so is one whose spec ``unicore.mcp_config.MCPServerSpec`` refuses (the CRD
refuses the same, but for a URL without a host name, which the turn could not connect to). All functions here are
pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from unicore.api import pod_env
from unicore.api.spec import AgentSpec, AgentTaskSpec
from unicore.mcp_config import MCPServerSpec, ResolvedMCPServer

PLURAL = "mcpservers"


def used_server_names(spec: AgentTaskSpec, agent: AgentSpec | None = None) -> list[str]:
    """The MCP server names a task's turn may use: its own ``mcpServers`` and its Agent's, sorted, each once."""
    refs = [*(spec.mcp_servers or ()), *((agent.mcp_servers or ()) if agent is not None else ())]
    return sorted({ref.name for ref in refs})


def resolve_server(name: str, spec: MCPServerSpec, index: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(resolved definition, header variables) of MCPServer ``name`` (its ``spec``), the ``index``-th of the pod."""
    env: list[dict[str, Any]] = []
    headers: dict[str, str] = {}
    for number, header in enumerate(spec.headers_from or ()):
        variable = f"{pod_env.MCP_HEADER_PREFIX}{index}_{number}"
        ref = header.secret_key_ref
        env.append({"name": variable,
                    "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key, "optional": True}}})
        headers[header.name] = variable
    resolved = spec.model_copy(update={"headers_from": None, "headers_from_env": headers})
    return ResolvedMCPServer(name=name, spec=resolved).dump(), env


def server_spec(spec: Mapping[str, Any] | None) -> MCPServerSpec | None:
    """The spec of an MCPServer object (as the index holds it); None when it cannot be used."""
    try:
        return MCPServerSpec.model_validate(spec) if spec is not None else None
    except ValidationError:
        return None


def build_mcp_env(names: Iterable[str], servers: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The turn container's variables for MCP servers ``names``, defined by ``servers`` (name -> MCPServer spec of
    the task's namespace); [] when the task uses none."""
    definitions: list[dict[str, Any]] = []
    env: list[dict[str, Any]] = []
    for name in names:
        spec = server_spec(servers.get(name))
        if spec is None or spec.url is None:
            continue
        definition, headers = resolve_server(name, spec, len(definitions))
        definitions.append(definition)
        env += headers
    if not definitions:
        return []
    return [{"name": pod_env.MCP_SERVERS, "value": json.dumps(definitions, separators=(",", ":"))}, *env]


def turn_mcp_env(index: Mapping[tuple[str, str], Iterable[Mapping[str, Any]]] | None, namespace: str,
                 spec: AgentTaskSpec, agent: AgentSpec | None = None) -> list[dict[str, Any]]:
    """The MCP variables of the next turn pod of a task of ``namespace`` (its ``spec``, and its Agent's), from the
    MCPServer index (``indexes.mcpserver_index``: (namespace, name) -> specs)."""
    wanted = used_server_names(spec, agent)
    servers: dict[str, Mapping[str, Any]] = {}
    for name in wanted:
        for found in (index or {}).get((namespace, name)) or ():
            servers[name] = found
            break
    return build_mcp_env(wanted, servers)


__all__ = ["PLURAL", "build_mcp_env", "resolve_server", "server_spec", "turn_mcp_env", "used_server_names"]
