"""The scripted model: deterministic answers from a script, for tests and demos.

Script format (YAML or JSON file, or a dict)::

    default: "Done."            # the answer once a task's steps are used up
    tasks:                      # the MOST SPECIFIC glob matching the task name (or id) is used; see below
      "demo":
        - tool_use: [{name: spawn_task, input: {name: a, prompt: "Find A"}}]
        - text: "Waiting for my researchers."
        - echo: true            # answer with the text of the latest user message(s)
        - echo_results: true    # answer with the toolResults of the latest user message(s) the model was sent
      "demo-*":
        - sleep: 0.5            # wait this many seconds (interruptible), then take the step's other fields
          text: "Result from a child."
      "victim":
        - gate: go              # wait until a test opens the task's gate "go" (interruptible), then the rest
          timeout: 120          # ... for at most this many seconds (default 300), else the model call fails
          text: "Past the gate."

A gate lets a test hold a task's model call until its fault is in place (a pod killed, Redis down, the operator
stopped), instead of racing a sleep: the test opens it with ``unicore.store.gates.open_gate(client, task_id, name)``
(the key ``uc:{<task id>}:gate:<name>``, which the model polls every ``GATE_POLL_SECONDS`` with the turn's own Redis
client; a namespace's Redis user may read it, not write it). An opened gate stays open, so a retried turn passes it
at once. A step with both waits for the gate, then sleeps. A gate not opened within ``timeout`` fails the model call
(``ModelError`` naming the gate, the task and the key); a gate without a Redis client fails it at once.

Which entry a task uses never depends on the order of the keys (the Kubernetes API server does not keep the order
of an object's keys, and YAML/JSON mappings are unordered): among the globs (``fnmatch``: ``*``, ``?``, ``[...]``)
that match the task's name or its full id (``<namespace>/<name>`` on Kubernetes), the most specific wins:

1. an exact name (a key without wildcards) beats every glob;
2. then the key with more literal characters (every character outside ``*``, ``?`` and ``[...]``);
3. then the key with fewer ``*`` (a ``*`` matches any run of characters, ``?`` and ``[...]`` exactly one);
4. then the key with fewer ``?`` and ``[...]``;
5. then the lexically smaller key, so the choice is always deterministic.

So ``"demo-a"`` beats ``"demo-*"``, which beats ``"*-a"``, which beats ``"*"``, whatever order they are written in.
Local and cluster mode use the same function (``Script.steps_for``, through ``resolve_model``).

The step is the number of assistant messages in the request (plus those a compaction summary at its start stands
for, ``ModelRequest.earlier_answers``), so the answer is a function of the stored history: deterministic across
processes and restarts. ``context_window: N`` (top level) gives the model a window of N tokens
(``unicore.turn.context_window``), so a test's history is compacted early.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from unicore.api.schema import ContentBlock, Usage, task_name
from unicore.errors import ConfigError, ModelError, TurnCancelled
from unicore.glob_order import specificity
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse
from unicore.providers.calling import CallRunner
from unicore.providers.retry import RetryPolicy
from unicore.store.client import RedisClient
from unicore.store.gates import gate_is_open
from unicore.store.keys import GATE_NAME_PATTERN, gate_key
from unicore.turn.history import latest_user_text

GATE_POLL_SECONDS = 0.05  # how often a gated model call asks whether its gate is open
GATE_TIMEOUT_SECONDS = 300.0  # a gate step's default deadline


class ScriptToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class ScriptStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    tool_use: list[ScriptToolCall] | None = None
    echo: bool = False
    echo_results: bool = False
    sleep: float | None = Field(None, ge=0, le=3600)
    gate: str | None = Field(default=None, pattern=GATE_NAME_PATTERN)  # wait until a test opens it (store.gates)
    timeout: float | None = Field(default=None, gt=0, le=3600)  # the gate's deadline (default GATE_TIMEOUT_SECONDS)

    @model_validator(mode="after")
    def _has_an_action(self) -> ScriptStep:
        acts = self.text is not None or self.tool_use or self.echo or self.echo_results
        if not acts and self.sleep is None and self.gate is None:
            raise ValueError("a step needs at least one of text, tool_use, echo, echo_results, sleep or gate")
        if self.timeout is not None and self.gate is None:
            raise ValueError("timeout is a gate's deadline: a step with timeout needs a gate")
        return self


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str = "Done."
    tasks: dict[str, list[ScriptStep]] = Field(default_factory=dict)
    # The model's context window in tokens (unicore.turn.context_window): small, a test's history is compacted soon.
    context_window: int | None = Field(default=None, ge=256)

    def steps_for(self, task_id: str) -> list[ScriptStep]:
        pattern = pick_pattern(self.tasks, task_id)
        return self.tasks[pattern] if pattern is not None else []


def pick_pattern(patterns: Iterable[str], task_id: str) -> str | None:
    """The most specific of ``patterns`` matching the task's name or full id (see the module doc), or None."""
    name = task_name(task_id)
    matching = [p for p in patterns if fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(task_id, p)]
    return min(matching, key=specificity, default=None)


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item.get("loc", ())) or "(top level)"
        parts.append(f"{where}: {item.get('msg')}")
    return "; ".join(parts)


def load_script(source: str | Path | dict[str, Any]) -> Script:
    """Validate a script given as a dict, or read it from a YAML/JSON file. ConfigError if malformed."""
    where = "script"
    if isinstance(source, dict):
        data: Any = source
    else:
        path = Path(source)
        where = str(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read script {path}: {exc.strerror or exc}") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"script {path} is not valid YAML/JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a script is a mapping with 'default' and 'tasks'")
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid {where}: {_describe(exc)}") from None


def count_tokens(text: str) -> int:
    """Approximate tokens as words (enough for budgets and metrics)."""
    return len(text.split())


def _request_text(request: ModelRequest) -> str:
    parts = [request.system]
    for message in request.messages:
        for block in message.get("content", []):
            if "text" in block:
                parts.append(str(block["text"]))
            elif "toolResult" in block:
                parts.extend(
                    str(c.get("text", c.get("json", ""))) for c in block["toolResult"].get("content", [])
                )
            elif "toolUse" in block:
                parts.append(str(block["toolUse"].get("input", "")))
    return " ".join(parts)


def _latest_tool_results(messages: list[dict[str, Any]]) -> str:
    """``[status] toolUseId: text`` for each toolResult of the trailing user message(s) of a request."""
    lines: list[str] = []
    for message in reversed(messages):
        if message.get("role") != "user":
            break
        blocks = [b["toolResult"] for b in message.get("content", []) if "toolResult" in b]
        lines[:0] = [
            f"[{r.get('status', 'success')}] {r.get('toolUseId')}: "
            + " ".join(str(c.get("text", c.get("json", ""))) for c in r.get("content", []))
            for r in blocks
        ]
    return "\n".join(lines)


class ScriptedModel:
    """A ``Model`` answering from a ``Script``."""

    provider = "scripted"

    def __init__(self, script: Script, *, name: str = "scripted", redis_client: RedisClient | None = None) -> None:
        self.script = script
        self.name = name
        self.cancel: threading.Event | None = None  # set by the turn runner so a sleep or gate can be interrupted
        self.redis = redis_client  # where a gate step looks for its gate
        # the one owner of the model metrics, as for the remote providers (no Redis: no metrics)
        self.runner = CallRunner(
            "scripted", name, policy=RetryPolicy(max_attempts=1), redis_client=redis_client
        )

    @property
    def context_window(self) -> int | None:
        return self.script.context_window

    def set_cancel_event(self, event: threading.Event) -> None:
        self.cancel = event

    def _sleep(self, seconds: float, what: str = "sleep") -> None:
        if self.cancel is None:
            time.sleep(seconds)
        elif self.cancel.wait(seconds):
            raise TurnCancelled(f"cancelled during the scripted model's {what}")

    def _wait_for_gate(self, task_id: str, name: str, timeout: float) -> None:
        """Return once the gate ``name`` of ``task_id`` is open; ModelError past ``timeout`` seconds."""
        key = gate_key(task_id, name)
        if self.redis is None:
            raise ModelError(f"the scripted model's gate {name!r} ({key}) needs Redis: this model has no client")
        deadline = time.monotonic() + timeout
        while not gate_is_open(self.redis, task_id, name):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ModelError(
                    f"the scripted model's gate {name!r} of task {task_id} was not opened within {timeout:g} s "
                    f"(key {key}; a test opens it with unicore.store.gates.open_gate)"
                )
            self._sleep(min(GATE_POLL_SECONDS, left), f"gate {name!r}")

    def converse(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        return self.runner.run(request, lambda: self._answer(request, sink))

    def _answer(self, request: ModelRequest, sink: AnswerSink | None = None) -> ModelResponse:
        started = time.monotonic()
        if request.purpose == "summary":
            content: list[ContentBlock] = [{"text": self._summary(request)}]
            stop = "end_turn"
        else:
            step_index = request.earlier_answers + sum(1 for m in request.messages if m.get("role") == "assistant")
            steps = self.script.steps_for(request.task_id)
            if step_index < len(steps):
                step = steps[step_index]
            else:
                step = ScriptStep(text=self.script.default, sleep=None)
            if step.gate is not None:
                self._wait_for_gate(request.task_id, step.gate, step.timeout or GATE_TIMEOUT_SECONDS)
            if step.sleep:
                self._sleep(step.sleep)
            content = self._content(request, step, step_index)
            stop = "tool_use" if any("toolUse" in block for block in content) else "end_turn"
            if sink is not None:  # the answer's text word by word, as a streaming model gives it
                for block in content:
                    for word in re.findall(r"\S+\s*|\s+", str(block.get("text", ""))):
                        sink.text(word)
        input_tokens = count_tokens(_request_text(request))
        output_tokens = sum(count_tokens(str(b.get("text", b.get("toolUse", "")))) for b in content)
        return ModelResponse(
            content=content,
            stop_reason=stop,
            model_id=self.name,
            usage=Usage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                total_tokens=input_tokens + output_tokens,
            ),
            latency_seconds=time.monotonic() - started,
        )

    def _content(self, request: ModelRequest, step: ScriptStep, step_index: int) -> list[ContentBlock]:
        texts = []
        if step.text is not None:
            texts.append(step.text)
        if step.echo:
            texts.append(latest_user_text(request.messages) or "(nothing to echo)")
        if step.echo_results:
            texts.append(_latest_tool_results(request.messages) or "(no tool results)")
        if not texts and not step.tool_use:
            texts.append(self.script.default)
        content: list[ContentBlock] = [{"text": "\n\n".join(texts)}] if texts else []
        for i, call in enumerate(step.tool_use or []):
            digest = hashlib.sha1(f"{request.task_id}|{step_index}|{i}".encode()).hexdigest()[:10]
            content.append(
                {
                    "toolUse": {
                        "toolUseId": f"tooluse_{step_index}_{i}_{digest}",
                        "name": call.name,
                        "input": call.input,
                    }
                }
            )
        return content

    def _summary(self, request: ModelRequest) -> str:
        last = latest_user_text(request.messages[:-1]) if len(request.messages) > 1 else ""
        answers = [
            b["text"]
            for m in request.messages
            if m.get("role") == "assistant"
            for b in m.get("content", [])
            if "text" in b
        ]
        final = answers[-1] if answers else last
        return f"Scripted turn: {len(answers)} answers; final: {final[:200]}"


def resolve_scripted(spec: str, *, redis: RedisClient | None = None,
                     script: dict[str, Any] | None = None) -> ScriptedModel:
    """``scripted`` (the record's stored script, or an empty script) or ``scripted:PATH`` (a script file)."""
    if spec == "scripted":
        return ScriptedModel(load_script(script) if script else Script(), redis_client=redis)
    if spec.startswith("scripted:"):
        return ScriptedModel(load_script(spec.split(":", 1)[1]), name=spec, redis_client=redis)
    raise ConfigError(f"unknown model {spec!r}: use scripted, scripted:PATH, bedrock:<name> or openai:<name>")
