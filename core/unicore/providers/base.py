"""The Model interface every provider implements (Bedrock Converse shapes on both sides)."""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from unicore.api.schema import ContentBlock, Usage

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filtered", "guardrail_intervened"]


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


class ModelRequest(BaseModel):
    """One model call. ``messages`` are already cleaned and shaped (alternating roles, tool results first)."""

    task_id: str
    system: str = ""
    messages: list[dict[str, Any]]  # [{"role": "user"|"assistant", "content": [blocks]}]
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None
    purpose: Literal["turn", "summary"] = "turn"
    # Assistant messages a compaction summary at the start of ``messages`` stands for (unicore.turn.compaction): the
    # scripted model counts its steps over the whole history with them.
    earlier_answers: int = 0


class ModelResponse(BaseModel):
    content: list[ContentBlock]
    stop_reason: str
    usage: Usage = Field(default_factory=Usage)
    model_id: str = ""
    latency_seconds: float = 0.0
    # Not "" when the answer must not be stored (a tool call written as text that cannot be run): why, for the
    # model. The turn refuses such an answer as it refuses an ``answers.BadAnswer`` and asks again.
    refused: str = ""


@runtime_checkable
class AnswerSink(Protocol):
    """Where a model call puts its answer's text as it arrives (the live view; ``unicore.store.token_stream``
    publishes it to the task's bounded Redis stream). Only live views read it: stored history stays one message
    per model answer, written by the turn after the call returns.

    ``attempt_started`` is called before each try of the call (a retried or cut stream starts again: whatever was
    published for an earlier try is void); ``text`` with each text delta, in order."""

    def attempt_started(self) -> None: ...

    def text(self, delta: str) -> None: ...


class NoSink:
    """An AnswerSink that drops everything (calls made without a live view: summaries, tools, tests)."""

    def attempt_started(self) -> None:
        pass

    def text(self, delta: str) -> None:
        pass


@runtime_checkable
class Model(Protocol):
    """A chat model. Implementations raise ``unicore.errors.ModelError`` on failure.

    ``sink`` (None: no live view) receives the answer's text as it arrives; a provider that cannot stream gives
    the whole text as one delta when the call returns."""

    provider: str  # "scripted", "bedrock", "openai"
    name: str  # the resolved model name/id

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse: ...
