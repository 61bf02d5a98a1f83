"""Bedrock ConverseStream events -> one answer (pure apart from iterating the stream).

The events, in order: ``messageStart`` (role), per content block ``contentBlockStart`` (``start.toolUse``: id and
name of a tool call), ``contentBlockDelta`` (``delta.text``, or ``delta.toolUse.input``: a fragment of the call's
JSON input), ``contentBlockStop``; then ``messageStop`` (``stopReason``) and ``metadata`` (``usage``). Text deltas go
to the call's ``AnswerSink`` as they arrive. A stream that ends before ``messageStop`` is :class:`StreamCut`; an
exception event (``throttlingException``, ``modelStreamErrorException``, ...) raises botocore's ``EventStreamError``
while iterating (a ``ClientError``; lists of plain event dicts, as tests may give, carry it as a key instead).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError, ResponseStreamingError
from urllib3.exceptions import HTTPError as Urllib3Error

from unicore.api.schema import Usage
from unicore.log import get_logger
from unicore.providers.base import AnswerSink, ModelResponse
from unicore.turn.answers import tool_input

log = get_logger("bedrock")

# What iterating a stream raises when the connection breaks or a read times out mid-answer.
STREAM_CUT_ERRORS: tuple[type[BaseException], ...] = (
    Urllib3Error,
    ResponseStreamingError,
    ReadTimeoutError,
    ConnectionError,
    TimeoutError,
)


class StreamCut(Exception):
    """The stream ended before ``messageStop``."""


@dataclass
class _Block:
    text: list[str] = field(default_factory=list)
    tool: dict[str, Any] | None = None  # {"toolUseId", "name"}
    tool_input: list[str] = field(default_factory=list)


def stream_response(model_id: str, events: Iterable[Mapping[str, Any]], sink: AnswerSink) -> ModelResponse:
    blocks: dict[int, _Block] = {}
    stop: str | None = None
    usage: Mapping[str, Any] = {}
    for event in events:
        for key, body in event.items():
            if key.endswith("Exception"):
                code = key[:1].upper() + key[1:]
                message = body.get("message", "") if isinstance(body, Mapping) else str(body)
                raise ClientError({"Error": {"Code": code, "Message": message}}, "ConverseStream")
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = (start.get("start") or {}).get("toolUse")
            block = blocks.setdefault(int(start.get("contentBlockIndex", 0)), _Block())
            if use:
                block.tool = {"toolUseId": use.get("toolUseId", ""), "name": use.get("name", "")}
        elif "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            delta = body.get("delta") or {}
            block = blocks.setdefault(int(body.get("contentBlockIndex", 0)), _Block())
            if isinstance(delta.get("text"), str):
                block.text.append(delta["text"])
                if delta["text"]:
                    sink.text(delta["text"])
            elif isinstance(delta.get("toolUse"), Mapping):
                block.tool_input.append(str(delta["toolUse"].get("input", "")))
        elif "messageStop" in event:
            stop = str(event["messageStop"].get("stopReason", "end_turn"))
        elif "metadata" in event:
            usage = event["metadata"].get("usage") or {}
    if stop is None:
        got = sum(len("".join(b.text)) for b in blocks.values())
        raise StreamCut(f"the stream ended before messageStop ({got} characters of text in)")
    content: list[dict[str, Any]] = []
    for index in sorted(blocks):
        block = blocks[index]
        if block.tool is not None:
            content.append({"toolUse": {**block.tool, "input": tool_input("".join(block.tool_input))}})
        elif block.text:
            content.append({"text": "".join(block.text)})
    inp, out = int(usage.get("inputTokens", 0)), int(usage.get("outputTokens", 0))
    return ModelResponse(
        content=content,
        stop_reason=stop,
        usage=Usage(input_tokens=inp, output_tokens=out, total_tokens=int(usage.get("totalTokens", inp + out))),
        model_id=model_id,
    )


__all__ = ["STREAM_CUT_ERRORS", "StreamCut", "stream_response"]
