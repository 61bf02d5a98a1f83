"""What a turn's ``run_command`` runs with (``ToolContext`` fields): where commands run (the workbench's exec server
when the turn pod has one, ``UNICORE_EXEC_SOCKET``; else local mode's sandbox over the workspace, or a plain
subprocess with ``UNICORE_COMMAND_SANDBOX=0``), the task's command timeout, and the turn's deadline. Nothing is
built for a task without ``run_command``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unicore.commands.result import CommandRunner
from unicore.settings import RuntimeSettings
from unicore.store.records import TaskRecord
from unicore.tools.base import Tool
from unicore.tools.run_command import NAME


def command_runner(settings: RuntimeSettings, workspace: Path) -> CommandRunner:
    """The workbench's exec server when the turn pod has one, else the local runner (sandboxed unless the settings
    say otherwise)."""
    if settings.exec_socket:
        from unicore.commands.exec_client import ExecServerRunner

        return ExecServerRunner(settings.exec_socket)
    from unicore.commands.local_runner import LocalRunner

    return LocalRunner(workspace, sandbox=settings.command_sandbox)


def command_fields(record: TaskRecord, tools: list[Tool], settings: RuntimeSettings, workspace: Path,
                   deadline: float) -> dict[str, Any]:
    """The ``ToolContext`` fields of ``run_command`` for a turn of ``record`` (none when it is not one of ``tools``);
    ``deadline``: the monotonic time by which the turn must have ended."""
    if not any(tool.name == NAME for tool in tools):
        return {}
    return {"command_runner": command_runner(settings, workspace),
            "command_timeout_seconds": float(record.limits.command_timeout_seconds),
            "deadline": deadline}


__all__ = ["command_fields", "command_runner"]
