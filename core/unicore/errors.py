"""The one exception root of UniCore and its direct subclasses."""

from __future__ import annotations


class UniCoreError(Exception):
    """Root of every error UniCore raises on purpose."""


class ConfigError(UniCoreError):
    """Bad configuration or input at an edge (CLI argument, script file, model name, credentials)."""


class TaskNotFound(UniCoreError):
    """The task id names no task in Redis."""


class LeaseLost(UniCoreError):
    """A fenced write was refused: this process no longer holds the task's lease."""


class LeaseBusy(UniCoreError):
    """Another live holder has the task's lease; this turn must not run."""


class MessageTooLarge(UniCoreError):
    """An inbox message is over the configured size cap."""


class ModelError(UniCoreError):
    """A model provider failed for a reason other than throttling (or throttling outlasted the retries)."""


class ToolError(UniCoreError):
    """A tool refused its input or failed; becomes an error tool result for the model."""


class LimitExceeded(ToolError):
    """A policy limit (depth, fan-out, descendants, token budget, allowed tools) refused an action."""


class TurnCancelled(UniCoreError):
    """The turn was asked to stop (SIGTERM) and stopped at a safe point."""


class NoSuchCall(UniCoreError):
    """No tool call with that id waits for (or had) a person's decision in the task."""


class AlreadyDecided(UniCoreError):
    """The tool call was already approved, denied or answered; nothing was changed."""


class DecisionExpired(AlreadyDecided):
    """The approval waited past its timeout: no person may decide it any more (the timeout denies it); nothing was
    changed."""
