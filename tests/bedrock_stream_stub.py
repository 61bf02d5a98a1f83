"""ConverseStream answers for botocore's Stubber.

Stubber validates the request against the bedrock-runtime service model (the point of using it) and the response
too, but its validator cannot take an event stream (it checks ``stream`` as one event structure). So
:func:`add_stream` validates every event against the service model's ``ConverseStreamOutput`` with the same
validator, queues the response with the first event, then puts in its place a real ``botocore.eventstream.EventStream``
over the events encoded in the AWS event-stream wire format (prelude, headers, JSON payload, CRCs), parsed by
botocore's own parser: what a real ConverseStream answer is, including exception events (they raise
``EventStreamError`` while iterating) and :func:`connection_reset_after` (urllib3's ``ProtocolError`` mid-body, as
a reset connection raises).
"""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Iterator
from typing import Any

from botocore.eventstream import EventStream
from botocore.parsers import EventStreamJSONParser
from botocore.stub import Stubber
from botocore.validate import validate_parameters
from urllib3.exceptions import ProtocolError

Event = dict[str, Any]


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("!B", len(raw_name)) + raw_name + struct.pack("!BH", 7, len(raw_value)) + raw_value


def encode(event: Event) -> bytes:
    """One event (``{"contentBlockDelta": {...}}``, or ``{"throttlingException": {"message": ...}}``) on the wire."""
    (kind, body), = event.items()
    if kind.endswith("Exception"):
        headers = {":message-type": "exception", ":exception-type": kind, ":content-type": "application/json"}
    else:
        headers = {":message-type": "event", ":event-type": kind, ":content-type": "application/json"}
    raw_headers = b"".join(_header(k, v) for k, v in headers.items())
    payload = json.dumps(body).encode()
    total = 12 + len(raw_headers) + len(payload) + 4
    prelude = struct.pack("!II", total, len(raw_headers))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + raw_headers + payload
    return message + struct.pack("!I", binascii.crc32(message) & 0xFFFFFFFF)


class RawStream:
    """The HTTP body a ConverseStream answer reads from (``stream()`` yields bytes as urllib3's response does)."""

    def __init__(self, events: list[Event], reset_after: int | None = None) -> None:
        self.events = events
        self.reset_after = reset_after

    def stream(self) -> Iterator[bytes]:
        for index, event in enumerate(self.events):
            if self.reset_after is not None and index == self.reset_after:
                raise ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')")
            data = encode(event)
            yield data[: len(data) // 2]  # a message split across reads, as TCP may
            yield data[len(data) // 2 :]

    def close(self) -> None:
        pass


def add_stream(stubber: Stubber, client: Any, events: list[Event], expected_params: dict[str, Any] | None = None,
               *, reset_after: int | None = None) -> None:
    output = client.meta.service_model.operation_model("ConverseStream").output_shape
    stream_shape = output.members["stream"]
    for event in events:
        if not any(k.endswith("Exception") for k in event):
            validate_parameters(event, stream_shape)  # what Stubber checks, event by event
    response: dict[str, Any] = {"stream": next(e for e in events if not any(k.endswith("Exception") for k in e))}
    stubber.add_response("converse_stream", response, expected_params)
    response["stream"] = EventStream(RawStream(events, reset_after), stream_shape, EventStreamJSONParser(),
                                     "ConverseStream")


def text_events(text: str, *, pieces: int = 3, stop: str = "end_turn", inp: int = 11, out: int = 7) -> list[Event]:
    size = max(1, -(-len(text) // pieces))
    return [
        {"messageStart": {"role": "assistant"}},
        *({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": text[i:i + size]}}}
          for i in range(0, len(text), size)),
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": stop}},
        {"metadata": {"usage": {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out},
                      "metrics": {"latencyMs": 42}}},
    ]


def tool_events(text: str, tool_id: str, name: str, arguments: str, *, inp: int = 11, out: int = 7) -> list[Event]:
    half = len(arguments) // 2
    return [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": text}}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": tool_id, "name": name}}}},
        {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": arguments[:half]}}}},
        {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": arguments[half:]}}}},
        {"contentBlockStop": {"contentBlockIndex": 1}},
        {"messageStop": {"stopReason": "tool_use"}},
        {"metadata": {"usage": {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out},
                      "metrics": {"latencyMs": 42}}},
    ]


def answer_events(content: list[dict[str, Any]], stop: str = "end_turn", inp: int = 11, out: int = 7) -> list[Event]:
    """The events of a ConverseStream answer with these content blocks (text in pieces, tool input in fragments)."""
    events: list[Event] = [{"messageStart": {"role": "assistant"}}]
    for index, block in enumerate(content):
        if "toolUse" in block:
            use = block["toolUse"]
            arguments = json.dumps(use.get("input", {}))
            events.append({"contentBlockStart": {"contentBlockIndex": index, "start": {
                "toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}}})
            half = len(arguments) // 2
            events += [{"contentBlockDelta": {"contentBlockIndex": index, "delta": {"toolUse": {"input": part}}}}
                       for part in (arguments[:half], arguments[half:])]
        else:
            text = block["text"]
            size = max(1, len(text) // 2)
            events += [{"contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": text[i:i + size]}}}
                       for i in range(0, len(text), size)]
        events.append({"contentBlockStop": {"contentBlockIndex": index}})
    events.append({"messageStop": {"stopReason": stop}})
    events.append({"metadata": {"usage": {"inputTokens": inp, "outputTokens": out, "totalTokens": inp + out},
                                "metrics": {"latencyMs": 42}}})
    return events
