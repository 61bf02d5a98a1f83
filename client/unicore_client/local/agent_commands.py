"""Agents in local mode (docs/agents.md): ``unicore agents apply -f FILE|DIR``, ``unicore agents list``
and ``unicore run --agent NAME|FILE``.

The files are the Kubernetes manifests: YAML/JSON documents (``---`` between them) of kind ``Agent``
(``unicore.dev/v1alpha1``, ``metadata.name``, ``spec``); a directory means its ``*.yaml``, ``*.yml`` and ``*.json``
files, in name order, so ``examples/agents/`` works for ``kubectl apply -f`` and here alike. ``MCPServer`` documents
among them are the MCP servers of a run (as ``--mcp-server`` gives them); ``AgentTask`` documents are skipped by
``apply`` (``run --agent`` reads the agent one of them names when the files hold several Agents). Every Agent is
stored by its bare name (``unicore.store.agents``), so a run's children can be spawned by name. Every problem is one
line, exit code 2, and nothing is stored unless every document is good.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unicore.agents import AgentDefinition, AgentInvalid, definition_from_spec, validate_agent_name, widening
from unicore.api.contract import AGENT_KIND, API_VERSION, GROUP, KIND, MCP_SERVER_KIND
from unicore.api.schema import APPROVE_ALL, Approval, MCPServerRef, TaskSpec
from unicore.api.spec import task_spec_of
from unicore.errors import ConfigError
from unicore.mcp_config import ResolvedMCPServer, parse_document, resolved
from unicore.store.agents import list_agents, read_agent, write_agent
from unicore.store.client import RedisClient
from unicore.terminal import printable

from unicore_client.arguments import UsageError, read_yaml_documents

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class AgentFiles:
    """What the files of ``-f``/``--agent`` hold."""

    agents: dict[str, AgentDefinition] = field(default_factory=dict)
    mcp_servers: list[ResolvedMCPServer] = field(default_factory=list)
    task_agents: list[str] = field(default_factory=list)  # agentRef names of the AgentTask documents
    # Kubernetes objects of other API groups (e.g. the Deployment and Service of an MCP server), as kind/name: a
    # directory made for `kubectl apply -f` holds them; local mode does not run them and says so
    skipped: list[str] = field(default_factory=list)


def _files(path_text: str) -> list[str]:
    path = Path(path_text)
    if path.is_dir():
        found = sorted(str(p) for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
        if not found:
            raise UsageError(f"agent directory {path} holds no *.yaml, *.yml or *.json file")
        return found
    return [path_text]


def _read_document(files: AgentFiles, document: Any, where: str) -> None:
    if not isinstance(document, dict):
        raise UsageError(f"{where}: a document is a mapping with apiVersion, kind, metadata and spec")
    kind = document.get("kind")
    api_version = str(document.get("apiVersion") or "")
    if api_version and not api_version.startswith(f"{GROUP}/"):
        meta = document.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        files.skipped.append(f"{printable(str(kind))}/{printable(str(name))}")
        return
    if kind == MCP_SERVER_KIND:
        try:
            server = resolved(parse_document(document, where, local=True))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        if any(known.name == server.name for known in files.mcp_servers):
            raise UsageError(f"{where}: MCP server {server.name!r} is defined twice")
        files.mcp_servers.append(server)
        return
    if kind == KIND:
        ref = task_spec_of(document).agent_ref
        if ref is not None:
            files.task_agents.append(ref.name)
        return
    if kind != AGENT_KIND:
        raise UsageError(f"{where}: kind {printable(str(kind))!r} is not {AGENT_KIND} "
                         f"(nor {MCP_SERVER_KIND} or {KIND})")
    if document.get("apiVersion") != API_VERSION:
        raise UsageError(f"{where}: apiVersion must be {API_VERSION}")
    name = (document.get("metadata") or {}).get("name") if isinstance(document.get("metadata"), dict) else None
    try:
        validate_agent_name(name)  # type: ignore[arg-type]
        definition = definition_from_spec(document.get("spec"))
    except AgentInvalid as exc:
        raise UsageError(f"{where}: Agent {printable(str(name))}: {exc}") from None
    if name in files.agents:
        raise UsageError(f"{where}: Agent {name} is defined twice")
    files.agents[str(name)] = definition


def read_agent_files(paths: list[str]) -> AgentFiles:
    """Every document of ``paths`` (files or directories); UsageError for the first bad one (nothing is stored)."""
    files = AgentFiles()
    for path_text in paths:
        for file in _files(path_text):
            documents = read_yaml_documents(file, "agent file")
            for position, document in enumerate(documents, start=1):
                _read_document(files, document, file if len(documents) == 1 else f"{file} (document {position})")
    if not files.agents:
        raise UsageError(f"{', '.join(paths)}: no {AGENT_KIND} document found")
    return files


def store_agents(client: RedisClient, files: AgentFiles) -> list[tuple[str, bool]]:
    """Store every Agent of ``files`` by its bare name: [(name, changed)]."""
    return [(name, write_agent(client, name, definition)) for name, definition in files.agents.items()]


@dataclass
class AgentChoice:
    """What ``run --agent`` resolved: the agent to run, and the files to store first (None: a stored agent)."""

    name: str
    files: AgentFiles | None = None


def read_agent_option(value: str) -> AgentChoice:
    """``--agent NAME|FILE`` read before Redis is touched (bad files and names: UsageError)."""
    if Path(value).exists() or value.endswith(SUFFIXES) or "/" in value:
        files = read_agent_files([value])
        if len(files.agents) == 1:
            return AgentChoice(next(iter(files.agents)), files)
        named = sorted({name for name in files.task_agents if name in files.agents})
        if len(named) == 1:
            return AgentChoice(named[0], files)
        raise UsageError(f"--agent {value}: it holds several agents ({', '.join(sorted(files.agents))}) and no one "
                         "AgentTask naming one of them: store them with 'unicore agents apply -f "
                         f"{value}', then run with --agent NAME")
    try:
        validate_agent_name(value)
    except AgentInvalid as exc:
        raise UsageError(f"--agent: {exc} (or give an Agent file)") from None
    return AgentChoice(value)


def chosen_definition(client: RedisClient, choice: AgentChoice) -> AgentDefinition:
    """Store the choice's files (if any), then the definition it runs; UsageError for an agent never applied."""
    if choice.files is not None:
        store_agents(client, choice.files)
    definition = read_agent(client, choice.name)
    if definition is None:
        stored = ", ".join(list_agents(client)) or "none"
        raise UsageError(f"--agent {choice.name}: no such agent (stored: {stored}); store it with 'unicore agents "
                         "apply -f FILE', or give the file")
    return definition


def agent_task_spec(args: argparse.Namespace, name: str, definition: AgentDefinition, agent: str,
                    model: str | None, script: dict[str, Any] | None, mcp_refs: list[MCPServerRef] | None,
                    mcp_servers: list[ResolvedMCPServer]) -> TaskSpec:
    """The root's TaskSpec for ``run --agent``: only what the options set (``TaskSpec.model_fields_set``), each a
    narrowing of ``definition``; an option that would widen it is a UsageError."""
    fields: dict[str, Any] = {"id": name, "prompt": args.prompt, "agent": agent}
    if model is not None:
        fields["model"] = model
    if script is not None:
        fields["script"] = script
    if args.system:
        fields["system_prompt"] = args.system
    if mcp_refs is not None:
        fields["mcp_servers"] = mcp_refs
    if mcp_servers:
        fields["mcp_definitions"] = [server.dump() for server in mcp_servers]
    limits: dict[str, Any] = {}
    if args.max_iterations is not None:
        limits["max_iterations"] = args.max_iterations
    if args.no_summary:
        limits["summarize_turns"] = False
    if limits:
        fields["limits"] = limits
    if args.require_approval:
        stray = [tool for tool in args.require_approval if tool != APPROVE_ALL and not definition.has_tool(tool)]
        if stray:
            raise UsageError(f"--require-approval: {', '.join(stray)} is not among agent {agent}'s tools "
                             f"({', '.join(definition.tools)})")
        fields["approval"] = Approval(tools=list(dict.fromkeys(args.require_approval)),
                                      timeout_seconds=args.approval_timeout or Approval().timeout_seconds)
    if args.ask_user and "ask_user" not in definition.tools:
        raise UsageError(f"--ask-user: agent {agent} does not have the ask_user tool (a task only narrows its "
                         "agent: add ask_user to the agent's tools)")
    spec = TaskSpec.model_validate(fields)
    problems = widening(spec, definition)
    if problems:
        raise UsageError(f"--agent {agent}: " + "; ".join(problems))
    return spec


def cmd_agents_apply(args: argparse.Namespace) -> int:
    from unicore.launch.embedded_redis import redis_url
    from unicore.store.tasks import connect

    files = read_agent_files(args.filename)
    client = connect(redis_url())
    for name, changed in store_agents(client, files):
        print(f"agent/{name} {'configured' if changed else 'unchanged'}")
    if files.skipped:
        print(f"[unicore] skipped {', '.join(files.skipped)} (Kubernetes objects local mode does not run)")
    if files.mcp_servers:
        names = ", ".join(server.name for server in files.mcp_servers)
        print(f"[unicore] MCP servers ({names}) are not stored: give their file to 'unicore run' "
              "(--agent FILE or --mcp-server FILE)")
    return 0


def cmd_agents_list(args: argparse.Namespace) -> int:
    from unicore.launch.embedded_redis import redis_url
    from unicore.store.tasks import connect

    client = connect(redis_url())
    names = list_agents(client)
    if not names:
        print("no agents stored (unicore agents apply -f FILE)")
        return 0
    print(f"{'NAME':<24} {'MODEL':<28} {'TOOLS':<40} AGENTS")
    for name in names:
        definition = read_agent(client, name)
        if definition is None:
            continue
        print(f"{printable(name):<24} {printable(definition.model):<28} {','.join(definition.tools):<40} "
              f"{','.join(definition.agents) or '-'}")
    return 0


def add_agents_command(sub: Any) -> None:
    agents = sub.add_parser("agents", help="store and list agent definitions (Agent documents; docs/agents.md)")
    actions = agents.add_subparsers(dest="agents_command", required=True, parser_class=type(agents))
    apply = actions.add_parser("apply", help="store the Agents of files or directories (as kubectl apply -f)")
    apply.add_argument("-f", "--filename", action="append", required=True, metavar="FILE|DIR",
                       help="YAML/JSON file or directory of Agent documents (repeatable)")
    apply.set_defaults(func=cmd_agents_apply)
    listing = actions.add_parser("list", help="the stored agents")
    listing.set_defaults(func=cmd_agents_list)


__all__ = ["AgentChoice", "AgentFiles", "add_agents_command", "agent_task_spec", "chosen_definition",
           "read_agent_files", "read_agent_option", "store_agents"]
