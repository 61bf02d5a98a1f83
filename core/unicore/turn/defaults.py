"""What a turn uses unless its caller passes its own (the seams of ``unicore.turn.run.run_turn``): the task's model,
its tools, its system prompt, its workspace and spawner; and the runtime settings a turn reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from unicore.errors import ToolError
from unicore.providers.base import Model
from unicore.providers.registry import resolve_model
from unicore.settings import RuntimeSettings
from unicore.store.records import TaskRecord
from unicore.store.tasks import TaskStore
from unicore.tools.base import Tool
from unicore.tools.registry import toolset_for
from unicore.turn.prompts import build_system_prompt

ModelFactory = Callable[[TaskRecord, redis.Redis], Model]
ToolsetFactory = Callable[[TaskRecord], Sequence[Tool]]
SystemPromptBuilder = Callable[[TaskStore, TaskRecord], str]

# The RuntimeSettings fields a turn uses (run_turn reads just these when it is not given settings).
TURN_SETTINGS = frozenset(
    {"stall_seconds", "summarize_turns", "workspace", "home", "live_stream_entries", "live_stream_ttl_seconds",
     "mcp_servers", "spawner"}
)


def default_model_factory(record: TaskRecord, client: redis.Redis) -> Model:
    """The task's model through ``unicore.providers.registry.resolve_model`` (scripted, bedrock, openai)."""
    return resolve_model(record.model, redis=client, script=record.script)


def default_toolset_factory(record: TaskRecord) -> Sequence[Tool]:
    return toolset_for(record)


def default_system_prompt(store: TaskStore, record: TaskRecord) -> str:
    return build_system_prompt(store, record)


def default_workspace(task_id: str, settings: RuntimeSettings | None = None) -> Path:
    """The workspace folder of a task tree (pass the ROOT id: a tree shares one workspace, so children with
    read-only tools can read what their parent and siblings wrote): ``$UNICORE_WORKSPACE``, else
    ``$UNICORE_HOME/workspaces/<root>`` (``settings`` None: read from the environment now)."""
    if settings is None:
        settings = RuntimeSettings.from_env(only={"workspace", "home"})
    if settings.workspace is not None:
        return settings.workspace
    return settings.home / "workspaces" / task_id.replace("/", "__")


class NoSpawner:
    """The spawner of a turn given none: ``spawn_task`` fails with a tool error the model reads."""

    def spawn(self, parent_id: str, name: str, prompt: str, tools: list[str] | None,
              agent: str | None = None) -> tuple[str, bool]:
        raise ToolError("spawning is not available in this process")


def start_kind(settings: RuntimeSettings) -> str:
    """How this turn's process started, for ``turn_start_seconds``: ``warm`` (a warm pod given the turn), ``cold`` (a
    turn pod started for it) or ``local`` (a local-mode process)."""
    if settings.warm_pool:
        return "warm"
    return "cold" if settings.namespace else "local"
