"""An OpenAI-compatible chat-completions stream (``stream: true``) -> one answer (pure: no I/O).

* :func:`sse_events` turns the response body's lines into the ``data`` of each server-sent event (the SSE rules:
  ``data:`` lines of one event are joined with newlines, a blank line ends the event, ``:`` lines are comments,
  an event left unfinished at the end of the body is dropped);
* :class:`StreamAssembler` folds the ``chat.completion.chunk`` objects into the answer: text deltas in order,
  ``tool_calls`` deltas by ``index`` (id, name and argument fragments; servers that omit the index or repeat the
  id or the whole name in every delta are handled), the finish reason, the usage of the final chunk (sent with
  ``stream_options.include_usage``) and whether the stream ended properly (``[DONE]`` or a finish reason);
* :class:`HeldText` passes text deltas to the live view (an ``AnswerSink``) but holds back an answer that may be
  a tool call written as text (``text_tool_calls.may_be_call``) until the answer is decided;
* :func:`answer_response` makes the assembled answer a ``ModelResponse`` (tool calls written as text parsed,
  tool-use ids made unique, usage estimated when the server sent none).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from unicore.api.schema import Usage
from unicore.log import get_logger
from unicore.providers.base import AnswerSink, ModelRequest, ModelResponse
from unicore.providers.calling import Retryable, estimate_tokens
from unicore.providers.text_tool_calls import may_be_call, parse_text_tool_calls, refusal_reason
from unicore.turn.answers import tool_input

log = get_logger("openai")

DONE = "[DONE]"

FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filtered",
}


class StreamError(Exception):
    """The server sent an error object inside the stream (``status``: its HTTP-like code, when it gave one)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


def sse_events(lines: Iterable[bytes | str]) -> Iterator[str]:
    """The data of each complete server-sent event in ``lines`` (bytes or str, with or without line ends)."""
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "error":  # a few servers name an error event this way
            data.append(json.dumps({"error": {"message": value}}))


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str = ""
    done: bool = False  # [DONE] seen
    choices_seen: int = 0

    @property
    def complete(self) -> bool:
        """The answer is whole: the server said it ended (a cut stream is neither)."""
        return self.done or self.finish_reason is not None

    def feed_data(self, data: str) -> str:
        """One event's data; returns the text delta it carried ("" for none). Raises StreamError, ValueError."""
        if data.strip() == DONE:
            self.done = True
            return ""
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"a stream chunk that is not an object: {data[:200]}")
        return self.feed(chunk)

    def feed(self, chunk: Mapping[str, Any]) -> str:
        error = chunk.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            code = error.get("code") if isinstance(error, dict) else None
            raise StreamError(str(message or error), code if isinstance(code, int) else None)
        if chunk.get("model"):
            self.model = str(chunk["model"])
        if isinstance(chunk.get("usage"), dict):
            self.usage = dict(chunk["usage"])
        delta_text = ""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n=1: only the first choice is ours
            self.choices_seen += 1
            whole = "delta" not in choice  # a server that ignored stream: true sends the whole message
            delta = choice.get("delta") or choice.get("message") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                delta_text += content
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._call_delta({**call, "index": len(self.calls)} if whole else call)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return delta_text

    def _call_delta(self, delta: Mapping[str, Any]) -> None:
        index = delta.get("index")
        call_id = delta.get("id") or ""
        if not isinstance(index, int):  # no index: a new id starts a new call, else the last call goes on
            known = {c.id for c in self.calls.values()}
            if not self.calls or (call_id and call_id not in known):
                index = len(self.calls)
            else:
                index = max(self.calls)
        call = self.calls.setdefault(index, _Call())
        if call_id and not call.id:
            call.id = str(call_id)
        function = delta.get("function") or {}
        name = function.get("name")
        if isinstance(name, str) and name and name != call.name:
            call.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few servers send the arguments as an object
            call.arguments = [json.dumps(arguments)]
        elif isinstance(arguments, str):
            call.arguments.append(arguments)

    def answer_text(self) -> str:
        return "".join(self.text)

    def tool_uses(self) -> list[dict[str, Any]]:
        """The assembled calls as toolUse inner dicts (arguments that are not one JSON object, or nested too deep,
        reach the tool layer as ``answers.UNPARSED``, which answers them with an error result)."""
        uses = []
        for index in sorted(self.calls):
            call = self.calls[index]
            uses.append({"toolUseId": call.id, "name": call.name, "input": tool_input("".join(call.arguments))})
        return uses


class HeldText:
    """Text deltas -> the sink, holding back an answer that may be a tool call written as text."""

    def __init__(self, sink: AnswerSink, *, hold: bool) -> None:
        self.sink = sink
        self.hold = hold
        self.held: list[str] = []
        self.seen = ""  # the answer so far while undecided

    def text(self, delta: str) -> None:
        if not delta:
            return
        if self.hold:
            self.seen += delta
            if may_be_call(self.seen):
                self.held.append(delta)
                return
            self.hold = False
            delta, self.held, self.seen = "".join(self.held) + delta, [], ""
        self.sink.text(delta)

    def release(self) -> None:
        """The answer is plain text: give the live view what was held back."""
        if self.held:
            self.sink.text("".join(self.held))
        self.held, self.hold = [], False


def answer_response(
    request: ModelRequest, assembled: StreamAssembler, held: HeldText, *, model: str, text_calls: bool
) -> ModelResponse:
    """An assembled answer -> ModelResponse in Converse shape (text tool calls parsed, ids made unique)."""
    if assembled.choices_seen == 0:
        raise Retryable("empty choices", f"openai model {model} answered without any choice", throttle=False)
    text = assembled.answer_text()
    uses = assembled.tool_uses()
    refused = ""
    if not uses and text_calls and request.tools:
        parsed = parse_text_tool_calls(text, request.tools)
        if parsed.kind == "calls":
            log.info("openai model %s wrote %d tool call(s) as text; running them", model, len(parsed.calls))
            uses, text = [{"toolUseId": "", **call} for call in parsed.calls], parsed.prose
        elif parsed.kind == "failed":
            refused = refusal_reason(parsed, text, request.tools, cut=assembled.finish_reason == "length")
            log.warning("openai model %s: a failed tool call written as text: %s", model, parsed.problem)
    if not uses and not refused:
        held.release()
    content: list[dict[str, Any]] = [{"text": text}] if text else []
    content += [{"toolUse": use} for use in unique_ids(uses)]
    stop = "tool_use" if uses else FINISH_REASONS.get(str(assembled.finish_reason), "end_turn")
    return ModelResponse(
        content=content,
        stop_reason=stop,
        usage=usage_of(assembled.usage, request, content),
        model_id=assembled.model or model,
        refused=refused,
    )


def unique_ids(uses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-use ids unique within the answer: a missing or repeated id gets a fresh one (``answers`` makes them
    unique over the task's history when the answer is stored)."""
    seen: set[str] = set()
    out = []
    for use in uses:
        use_id = str(use.get("toolUseId") or "")
        if not use_id or use_id in seen:
            use_id = f"call_{uuid.uuid4().hex[:20]}"
        seen.add(use_id)
        out.append({**use, "toolUseId": use_id})
    return out


def usage_of(raw: Mapping[str, Any] | None, request: ModelRequest, content: list[dict[str, Any]]) -> Usage:
    """The server's usage; missing (some servers send none while streaming): estimated at ~4 characters a token."""
    raw = raw or {}
    inp, out = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if not isinstance(inp, int) or not isinstance(out, int):
        estimated_in = max(estimate_tokens(request) - request.max_tokens, 1)
        estimated_out = max(len(json.dumps(content)) // 4, 1)
        log.debug("no usage in the answer; estimated %d input and %d output tokens", estimated_in, estimated_out)
        inp = inp if isinstance(inp, int) else estimated_in
        out = out if isinstance(out, int) else estimated_out
    total = raw.get("total_tokens")
    return Usage(input_tokens=inp, output_tokens=out, total_tokens=total if isinstance(total, int) else inp + out)


__all__ = [
    "DONE",
    "FINISH_REASONS",
    "HeldText",
    "StreamAssembler",
    "StreamError",
    "answer_response",
    "sse_events",
    "unique_ids",
    "usage_of",
]
