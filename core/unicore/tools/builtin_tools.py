"""The built-in tools, by name: every deployment has them (``registry.known_tools`` adds the custom ones of
``UNICORE_EXTRA_TOOLS``; a task gets the ones its tool list or default toolset names). The tool registry and the
tool call metrics (a series of each built-in tool from the first scrape) both read them here."""

from __future__ import annotations

from unicore.tools.ask_user import AskUser
from unicore.tools.base import Tool
from unicore.tools.jobs import JobStatus, SubmitJob
from unicore.tools.run_command import RunCommand
from unicore.tools.tasks import MessageTask, SpawnTask, TaskStatus
from unicore.tools.workspace import ListFiles, ReadFile, WriteFile

ALL_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (ReadFile(), WriteFile(), ListFiles(), SpawnTask(), MessageTask(), TaskStatus(), AskUser(),
                 RunCommand(), SubmitJob(), JobStatus())
}

__all__ = ["ALL_TOOLS"]
