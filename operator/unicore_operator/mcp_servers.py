"""MCP servers for turn pods (issue 17; docs/mcp.md): the MCPServer objects a task uses -> the pod's
``UNICORE_MCP_SERVERS`` (resolved definitions) and one ``secretKeyRef`` variable per header.

A task uses the servers its own ``spec.mcpServers`` names and those of its Agent (``spec.agentRef``); the operator
looks them up in its index of the namespace's MCPServers (``mcpserver_index``) and resolves each ``headersFrom``
entry into a variable ``UNICORE_MCP_HEADER_<server>_<header>`` (index numbers) that the kubelet fills from the Secret
in the task's namespace (``optional``: a missing Secret leaves the header out and the server answers 401, which the
model sees as an error tool result, instead of a pod that cannot start). No header value is ever in a Job, and the
operator reads no Secret. A name no MCPServer defines is left out: the turn tells the model that server is not
defined (``unicore.tools.mcp_tools``). All functions here are pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from unicore.settings import RuntimeSettings

MCP_SERVERS_ENV = RuntimeSettings.env_var("mcp_servers")
HEADER_ENV_PREFIX = "UNICORE_MCP_HEADER_"
PLURAL = "mcpservers"


def used_server_names(spec: Mapping[str, Any], agent_spec: Mapping[str, Any] | None = None) -> list[str]:
    """The MCP server names a task's turn may use: its own ``mcpServers`` and its Agent's, sorted, each once."""
    names: set[str] = set()
    for source in (spec, agent_spec or {}):
        for ref in source.get("mcpServers") or ():
            if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
                names.add(ref["name"])
    return sorted(names)


def resolve_server(name: str, spec: Mapping[str, Any], index: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(resolved definition, header variables) of MCPServer ``name`` (its ``spec``), the ``index``-th of the pod."""
    resolved: dict[str, Any] = {"url": spec["url"]}
    for field in ("timeoutSeconds", "toolTimeoutSeconds"):
        if spec.get(field) is not None:
            resolved[field] = spec[field]
    env: list[dict[str, Any]] = []
    headers: dict[str, str] = {}
    for number, header in enumerate(spec.get("headersFrom") or ()):
        variable = f"{HEADER_ENV_PREFIX}{index}_{number}"
        ref = header["secretKeyRef"]
        env.append({"name": variable,
                    "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": ref["key"], "optional": True}}})
        headers[header["name"]] = variable
    if headers:
        resolved["headersFromEnv"] = headers
    return {"name": name, "spec": resolved}, env


def build_mcp_env(names: Iterable[str], servers: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The turn container's variables for MCP servers ``names``, defined by ``servers`` (name -> MCPServer spec of
    the task's namespace); [] when the task uses none."""
    definitions: list[dict[str, Any]] = []
    env: list[dict[str, Any]] = []
    for name in names:
        spec = servers.get(name)
        if spec is None or not spec.get("url"):
            continue
        definition, headers = resolve_server(name, spec, len(definitions))
        definitions.append(definition)
        env += headers
    if not definitions:
        return []
    return [{"name": MCP_SERVERS_ENV, "value": json.dumps(definitions, separators=(",", ":"))}, *env]


def turn_mcp_env(index: Mapping[tuple[str, str], Iterable[Mapping[str, Any]]] | None, task: Mapping[str, Any],
                 agent_spec: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The MCP variables of AgentTask ``task``'s next turn pod, from the MCPServer index (``indexes.mcpserver_index``:
    (namespace, name) -> specs) and the task's Agent's spec, if any."""
    namespace = task["metadata"]["namespace"]
    wanted = used_server_names(task.get("spec") or {}, agent_spec)
    servers: dict[str, Mapping[str, Any]] = {}
    for name in wanted:
        for spec in (index or {}).get((namespace, name)) or ():
            servers[name] = spec
            break
    return build_mcp_env(wanted, servers)


__all__ = ["HEADER_ENV_PREFIX", "MCP_SERVERS_ENV", "PLURAL", "build_mcp_env", "resolve_server", "turn_mcp_env",
           "used_server_names"]
