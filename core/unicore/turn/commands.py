"""What a turn's ``run_command`` runs with (``ToolContext`` fields): where commands run (the workbench's exec server
when the turn pod has one, ``UNICORE_EXEC_SOCKET``; else local mode's sandbox over the workspace, or a plain
subprocess with ``UNICORE_COMMAND_SANDBOX=0``), the task's command timeout, and the turn's deadline. Nothing is
built for a task without ``run_command``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from unicore.api import pod_env
from unicore.commands.result import CommandRunner
from unicore.settings import RuntimeSettings
from unicore.store.client import RedisClient
from unicore.store.records import TaskRecord
from unicore.store.token_stream import CommandOutputStream, StreamSettings
from unicore.tools.base import CommandOutputSink, Tool, ToolContext
from unicore.tools.run_command import NAME

# The ``call`` number of command output entries (readers key live text by seq and try; this only tells them apart
# from the model's calls in the raw stream).
COMMAND_CALL = 1_000_000


class LiveCommandOutput:
    """A command's output to the task's live stream (``CommandOutputStream``), for ``unicore show --follow``,
    ``kubectl agenttask logs --follow`` and the web UI: the command line first, then its output as it comes."""

    def __init__(self, stream: CommandOutputStream, command: str) -> None:
        self.stream = stream
        stream.attempt_started()
        stream.text(f"$ {command}\n")

    def write(self, stream: str, text: str) -> None:
        self.stream.text(text)

    def close(self) -> None:
        self.stream.close()


def live_output(client: RedisClient, task_id: str, ctx: ToolContext, settings: StreamSettings
                ) -> Callable[[str], CommandOutputSink]:
    """The ``ToolContext.command_output`` of a turn: each command's output at the seq its result will be stored at."""

    def start(command: str) -> CommandOutputSink:
        stream = CommandOutputStream(client, task_id, turn=ctx.turn_number, call=COMMAND_CALL, seq=ctx.result_seq,
                                     settings=settings)
        return LiveCommandOutput(stream, command)

    return start


def command_runner(settings: RuntimeSettings, workspace: Path) -> CommandRunner:
    """The workbench's exec server when the turn pod has one, else the local runner (sandboxed unless the settings
    say otherwise)."""
    if settings.exec_socket:
        from unicore.commands.exec_client import ExecServerRunner

        return ExecServerRunner(settings.exec_socket)
    from unicore.commands.local_runner import LocalRunner

    return LocalRunner(workspace, sandbox=settings.command_sandbox, drop_env=endpoint_key_variables())


def endpoint_key_variables() -> tuple[str, ...]:
    """The variables the endpoint map names for its keys (``apiKeyEnv`` may be any name): never given to a command."""
    import os

    from unicore.providers.endpoints import parse_endpoints

    raw = os.environ.get(pod_env.OPENAI_ENDPOINTS)
    if not raw:
        return ()
    try:
        endpoints = parse_endpoints(raw)
    except Exception:  # noqa: BLE001 - a bad map fails the model call with its own error; drop nothing named here
        return ()
    return tuple(name for index in range(len(endpoints.endpoints)) if (name := endpoints.key_env(index)))


def command_fields(record: TaskRecord, tools: list[Tool], settings: RuntimeSettings, workspace: Path,
                   deadline: float) -> dict[str, Any]:
    """The ``ToolContext`` fields of ``run_command`` for a turn of ``record`` (none when it is not one of ``tools``);
    ``deadline``: the monotonic time by which the turn must have ended."""
    if not any(tool.name == NAME for tool in tools):
        return {}
    return {"command_runner": command_runner(settings, workspace),
            "command_timeout_seconds": float(record.limits.command_timeout_seconds),
            "deadline": deadline}


__all__ = ["LiveCommandOutput", "command_fields", "command_runner", "live_output"]
