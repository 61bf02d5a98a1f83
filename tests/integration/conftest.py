"""Fixtures for the runtime's integration tests: a TaskStore on the real Redis and an in-process turn runner."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import BaseModel
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse
from unicore.providers.scripted import ScriptedModel, load_script
from unicore.store.records import TaskRecord
from unicore.store.tasks import TaskStore
from unicore.tools.base import Tool, ToolContext
from unicore.turn.outcome import TurnOutcome
from unicore.turn.run import run_turn


class NoteTool(Tool):
    """A test tool: returns what it was given (or fails on request)."""

    name = "note"
    description = "Write a note."

    class Input(BaseModel):
        text: str
        fail: bool = False

    Input.__name__ = "NoteInput"

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        assert isinstance(args, NoteTool.Input)
        if args.fail:
            raise RuntimeError("the note tool failed on purpose")
        return f"noted: {args.text}"


@dataclass
class RecordingModel:
    """Wraps a model; remembers every request; can run a hook before answering."""

    inner: Any
    requests: list[ModelRequest] = field(default_factory=list)
    before: Callable[[ModelRequest], None] | None = None

    @property
    def provider(self) -> str:
        return self.inner.provider

    @property
    def name(self) -> str:
        return self.inner.name

    def set_cancel_event(self, event: Any) -> None:
        if hasattr(self.inner, "set_cancel_event"):
            self.inner.set_cancel_event(event)

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        self.requests.append(request)
        if self.before is not None:
            self.before(request)
        return self.inner.converse(request, sink)


@pytest.fixture
def store(redis_client: redis.Redis) -> TaskStore:
    return TaskStore(redis_client)


@pytest.fixture
def cli_env(redis_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a ``unicore`` command (tests/unicore_cli.py) on the test's Redis, with its own home."""
    return {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home")}


@dataclass
class TurnRunner:
    client: redis.Redis
    workspace: Path
    models: dict[str, RecordingModel] = field(default_factory=dict)
    hooks: dict[str, Callable[[ModelRequest], None]] = field(default_factory=dict)
    extra_tools: list[Tool] = field(default_factory=list)

    def model_for(self, record: TaskRecord, client: redis.Redis) -> RecordingModel:
        model = self.models.get(record.id)
        if model is None:
            model = RecordingModel(ScriptedModel(load_script(record.script or {}), redis_client=client))
            self.models[record.id] = model
        model.before = self.hooks.get(record.id)
        return model

    def toolset(self, record: TaskRecord) -> list[Tool]:
        from unicore.tools.registry import toolset_for

        return [*toolset_for(record), *self.extra_tools]

    def __call__(self, task_id: str, **kwargs: Any) -> TurnOutcome:
        kwargs.setdefault("summarize", False)
        return run_turn(
            task_id,
            redis=self.client,
            model_factory=self.model_for,
            toolset_factory=self.toolset,
            workspace=self.workspace / task_id.replace("/", "__"),
            **kwargs,
        )

    def requests(self, task_id: str) -> list[ModelRequest]:
        return self.models[task_id].requests if task_id in self.models else []


@pytest.fixture
def turn(redis_client: redis.Redis, tmp_path: Path) -> TurnRunner:
    return TurnRunner(redis_client, tmp_path, extra_tools=[NoteTool()])
