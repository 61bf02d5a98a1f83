"""Tool interface: a name, a description, a pydantic input model (its JSON schema goes to the model), a run()."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    from unicore.commands.result import CommandRunner
    from unicore.store.tasks import TaskStore
    from unicore.store.telemetry import Telemetry


class Spawner(Protocol):
    """Creates (or resumes) a child task. Local: Redis + activation. Kubernetes: a child AgentTask via the API."""

    def spawn(self, parent_id: str, name: str, prompt: str, tools: list[str] | None,
              agent: str | None = None) -> tuple[str, bool]:
        """Create child ``<parent>-<name>`` with ``prompt``, or queue ``prompt`` to it if it exists. ``agent``: the
        name of an agent the parent may spawn (its agent's ``agents``); the child runs with that definition.

        Returns ``(child_id, created)``; raises ``unicore.errors.ToolError`` (or a subclass) with a clear message.
        """
        ...


@dataclass
class ToolContext:
    task_id: str
    store: TaskStore
    spawner: Spawner
    workspace: Path
    cancel: threading.Event = field(default_factory=threading.Event)
    # Why a tool name that is not among the task's tools is refused, when the turn knows (an MCP tool outside the
    # allow-list, a tool of an MCP server that could not be reached: ``tools.mcp_tools.McpToolbox.explain``).
    explain_unavailable: Callable[[str], str | None] | None = None
    # Where ``registry.run_tool_call`` counts and times each call (``tools.call_metrics``); None: not measured.
    telemetry: Telemetry | None = None
    # Where ``run_command`` runs commands (the workbench's exec server, a local sandbox); None: nowhere.
    command_runner: CommandRunner | None = None
    command_timeout_seconds: float = 600.0  # limits.command_timeout_seconds
    deadline: float | None = None  # time.monotonic() by which the turn must have ended; None: no limit known
    # A live view of a command's output (``turn.command_output``): called with the command, gives a sink to write
    # (stream, text) chunks to and close.
    command_output: Callable[[str], CommandOutputSink] | None = None
    # The turn's lease (``submit_job`` writes fenced) and the task's GPU limit of a command Job.
    lease: Callable[[], Any] | None = None
    max_job_gpus: int = 0
    # Where the results of the answer whose tools run now will be stored, for live views (set by the turn).
    turn_number: int = 0
    result_seq: int = 0
    tool_use_id: str = ""  # the call running now (``registry.run_tool_call`` sets it): ids of what a call writes


class CommandOutputSink(Protocol):
    def write(self, stream: str, text: str) -> None: ...

    def close(self) -> None: ...


class Tool:
    """Subclass with ``name``, ``description``, ``Input`` (a pydantic model) and ``run``."""

    name: ClassVar[str]
    description: ClassVar[str]
    Input: ClassVar[type[BaseModel]]

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema the model gets: the input model's, without pydantic's generated titles."""
        return strip_titles(self.Input.model_json_schema())

    def run(self, ctx: ToolContext, args: BaseModel) -> str | dict[str, Any] | list[Any]:
        raise NotImplementedError

    def target(self) -> str:
        """What this tool's name runs, for people and for approvals: an approval binds to it (``PendingCall.target``),
        and an approved call whose name runs something else by then is not run (an MCP tool: the server's own name
        for it, ``tools.mcp_tools``)."""
        return f"tool {self.name!r}"

    def metric_labels(self) -> dict[str, str]:
        """The labels of this tool's call metrics (``tools.call_metrics``): a built-in or custom tool is counted under
        its own name."""
        return {"tool": self.name, "source": "builtin", "server": ""}


def strip_titles(schema: Any) -> Any:
    """``schema`` without its ``title`` keywords (a property named "title" stays)."""
    if isinstance(schema, dict):
        return {k: strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [strip_titles(item) for item in schema]
    return schema
