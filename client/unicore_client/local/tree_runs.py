"""Running local task trees, for the ``unicore`` commands and the local web UI alike: the checks of a new root task
(its model and script, the tools whose calls wait for approval), the store at ``REDIS_URL``, and running a tree until
it settles (``settle``), with the commands' exit codes.

The checks load the model registry, the scripted model and the tool registry only when called, so a command that
creates no task does not pay for them at start-up.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import redis
from unicore.api.schema import APPROVE_ALL, MCPServerRef
from unicore.errors import ConfigError
from unicore.launch.embedded_redis import redis_url, unicore_home
from unicore.store import conversations
from unicore.store.client import RedisClient
from unicore.store.tasks import TaskStore, connect
from unicore.terminal import printable

from unicore_client.arguments import UsageError, read_script_file
from unicore_client.local.mcp_commands import is_mcp_tool_name

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def open_store() -> TaskStore:
    """The task store at ``REDIS_URL`` (unset: local mode's own redis-server, started when needed)."""
    return TaskStore(connect(redis_url()))


def script_spec(model: str, script_file: str | None) -> tuple[str, dict[str, Any] | None]:
    """(model spec to store, script dict to store) for ``--model``/``--script``; UsageError for a bad script.

    A script file is read once here (``arguments.read_script_file``: size cap, regular file, UTF-8, no YAML
    aliases) and stored with the root task (children inherit it), so turn processes do not depend on the
    working directory.
    """
    from unicore.providers.scripted import load_script

    if script_file and model not in ("scripted", ""):
        raise UsageError("--script goes with the scripted model (omit --model or use --model scripted)")
    path = script_file or (model.split(":", 1)[1] if model.startswith("scripted:") else None)
    if path is None:
        return model, None
    try:
        script = load_script(read_script_file(path)).model_dump(exclude_none=True)
    except ConfigError as exc:  # the content does not follow the script format
        raise UsageError(f"{exc} (in {path})") from None
    return "scripted", script


def check_model(model: str, script: dict[str, Any] | None, client: redis.Redis) -> None:
    """A bad model spec or missing credentials fail here, clearly, before the task is created."""
    from unicore.providers.registry import resolve_model

    resolve_model(model, redis=client, script=script)


def unknown_tools(names: Iterable[str], mcp: list[MCPServerRef] | None = None) -> list[str]:
    """The names among ``names`` (tools whose calls wait for approval) that are neither a known tool, a tool of the
    task's MCP servers (``<server>__<tool>``) nor ``*`` (every tool), sorted."""
    from unicore.tools.registry import known_tools

    return sorted({name for name in names
                   if name != APPROVE_ALL and name not in known_tools() and not is_mcp_tool_name(name, mcp)})


def known_tools_text() -> str:
    """The known tools, for a message about tools that are not."""
    from unicore.tools.registry import known_tools

    return ", ".join(sorted(known_tools()))


def check_gated_tools(names: list[str], mcp: list[MCPServerRef] | None = None) -> None:
    """``--require-approval`` names known tools, tools of the task's MCP servers (``<server>__<tool>``) or ``*``;
    UsageError otherwise, in the command line's words (the web UI words its own: ``ui.local_backend``)."""
    unknown = unknown_tools(names, mcp)
    if unknown:
        raise UsageError(f"--require-approval: unknown tool(s) {', '.join(unknown)}; known tools: "
                         f"{known_tools_text()}, <server>__<tool> of an --mcp server "
                         f"(or '{APPROVE_ALL}' for every tool)")


def settle(client: RedisClient, url: str, task_id: str, *, quiet: bool, timeout: float | None) -> int:
    """Run the tree of ``task_id`` in this process until it settles (progress lines on stderr unless ``quiet``);
    EXIT_FAILED when it does not within ``timeout`` seconds or a turn failed. ``client``: the Redis of ``url``,
    connected (the supervisor works on it; its turn processes connect to ``url``)."""
    store = TaskStore(client)
    # with the trees of the tasks it shares a conversation with: what it hands to them runs too (docs/conversations.md)
    roots = list(dict.fromkeys([store.get_task(task_id).root, *conversations.partner_roots(store, task_id)]))
    return settle_roots(client, url, roots, quiet=quiet, timeout=timeout)


def settle_roots(client: RedisClient, url: str, roots: list[str], *, quiet: bool, timeout: float | None) -> int:
    """``settle`` for the trees under ``roots`` together (a conversation's participants hand work to each other)."""
    from unicore.launch.local import LocalSupervisor

    store = TaskStore(client)

    def events(text: str) -> None:
        if not quiet:
            print(f"[unicore] {printable(text)}", file=sys.stderr)

    supervisor = LocalSupervisor(client, url, log_dir=unicore_home() / "logs", on_event=events)
    report = supervisor.run_until_settled(roots, timeout=timeout)
    if not report.settled:
        print(f"[unicore] the tree of {', '.join(roots)} did not settle within {timeout}s", file=sys.stderr)
        return EXIT_FAILED
    if report.failures:
        for failed, code in report.failures.items():
            error = store.get_task(failed).last_error
            print(f"[unicore] turn of {failed} failed (exit {code}): {printable(error)}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


__all__ = [
    "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "check_gated_tools", "check_model", "known_tools_text", "open_store",
    "script_spec", "settle", "settle_roots", "unknown_tools",
]
