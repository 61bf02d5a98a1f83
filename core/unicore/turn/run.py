"""``run_turn``: run exactly one turn of a task in this process (``unicore-turn``, local mode, tests); the turn
itself is ``unicore.turn.agent_turn.AgentTurn``, its exit codes ``unicore.turn.outcome``."""

from __future__ import annotations

import threading
from pathlib import Path

import redis

from unicore.settings import RuntimeSettings
from unicore.store.task_leases import DEFAULT_LEASE_TTL_MS
from unicore.store.tasks import TaskStore
from unicore.tools.base import Spawner
from unicore.turn.agent_turn import AgentTurn
from unicore.turn.context_window import ContextSettings
from unicore.turn.defaults import (
    TURN_SETTINGS,
    ModelFactory,
    SystemPromptBuilder,
    ToolsetFactory,
    default_model_factory,
    default_system_prompt,
    default_toolset_factory,
)
from unicore.turn.outcome import TurnOutcome


def run_turn(
    task_id: str,
    *,
    redis: redis.Redis,
    model_factory: ModelFactory | None = None,
    toolset_factory: ToolsetFactory | None = None,
    spawner: Spawner | None = None,
    workspace: Path | None = None,
    cancel: threading.Event | None = None,
    holder: str | None = None,
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
    summarize: bool | None = None,
    system_prompt_builder: SystemPromptBuilder | None = None,
    stall_seconds: float | None = None,
    settings: RuntimeSettings | None = None,
    context: ContextSettings | None = None,
) -> TurnOutcome:
    """Run exactly one turn of ``task_id`` and return its outcome (``exit_code``: ``unicore.turn.outcome``).

    ``redis`` must decode responses. ``spawner`` defaults to the local spawner (Redis + activation).
    ``summarize`` None = ``limits.summarize_turns`` and ``$UNICORE_SUMMARIZE_TURNS`` (default on).
    ``stall_seconds`` None = ``$UNICORE_STALL_SECONDS`` (default 900; ConfigError if malformed): a step
    running longer stops the heartbeat, so the lease expires and the watchdog reaps the hung turn.
    ``settings`` None = the turn's variables (``unicore.turn.defaults.TURN_SETTINGS``) read from the environment
    now; ``context`` None = the context-window variables (``unicore.turn.context_window``) read from the
    environment now.
    """
    if settings is None:
        settings = RuntimeSettings.from_env(only=TURN_SETTINGS)
    stall = settings.stall_seconds if stall_seconds is None else stall_seconds
    if spawner is None:  # imported only here: a turn pod's spawner is the Kubernetes one
        from unicore.launch.local_spawner import LocalSpawner

        spawner = LocalSpawner(TaskStore(redis))
    return AgentTurn(
        task_id,
        redis,
        model_factory=model_factory or default_model_factory,
        toolset_factory=toolset_factory or default_toolset_factory,
        spawner=spawner,
        workspace=workspace,
        cancel=cancel or threading.Event(),
        holder=holder,
        lease_ttl_ms=lease_ttl_ms,
        summarize=summarize,
        system_prompt_builder=system_prompt_builder or default_system_prompt,
        stall_seconds=stall,
        settings=settings,
        context=context if context is not None else ContextSettings.from_env(),
    ).run()


__all__ = ["run_turn"]
