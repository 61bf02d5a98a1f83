"""Model answers checked before they are stored (pure).

A model answer becomes part of the task's append-only history, so a bad one would poison every later turn.
``accept_answer`` runs on every answer before ``append_message``:

- **shape**: a list of blocks, each an object with a ``text`` string or a ``toolUse`` object whose ``name`` is
  a string and ``input`` an object (other block kinds, e.g. reasoning, are kept when they are objects);
- **valid text**: a lone surrogate (``"\ud800"``) becomes U+FFFD, as the store writes it (``state.codec``), so the
  turn goes on with the answer it stored;
- **tool call inputs** nested at most ``MAX_ARGUMENT_DEPTH`` deep; a deeper one is replaced by ``{UNPARSED: ...}``
  and the call gets an error result (``tool_input`` does the same for arguments sent as JSON text);
- **nesting depth** at most ``MAX_ANSWER_DEPTH`` and **size** at most the message cap: deeper or larger
  answers would fail JSON decoding (Python, pydantic and Redis' cjson all have depth limits) on every later
  history load;
- **tool-use ids owned by the runtime**: real OpenAI-compatible servers repeat ids (``call_0`` in every answer)
  or omit them. The inbox de-duplicates tool results by ``tr:<toolUseId>`` and history cleanup pairs results
  with calls by id, so ids must be unique over the task's whole history. A missing, repeated, too long or
  non-``[A-Za-z0-9_-]`` id (Bedrock's rule) is replaced by a fresh unique one when the answer is stored; the
  stored id is what every later request sends back, so the provider sees a consistent conversation.

A refused answer raises ``BadAnswer``; the turn tells the model what was wrong (a user message) and asks again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from unicore.api.schema import ContentBlock, Message
from unicore.errors import UniCoreError
from unicore.store import codec

MAX_ANSWER_DEPTH = 64  # JSON nesting of one content block list, far above any real answer
MAX_ARGUMENT_DEPTH = MAX_ANSWER_DEPTH - 3  # a tool call's input sits 3 levels into an answer (list, block, toolUse)
UNPARSED = "_unparsed_arguments"  # the input of a call whose arguments were not one object (tools.registry refuses it)
TOOL_USE_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class BadAnswer(UniCoreError):
    """A model answer that must not be stored; the message says why (shown to the model)."""


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of ``value`` (iterative, so a hostile depth cannot exhaust the stack); stops past
    ``limit``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return deepest


def tool_input(raw: str) -> dict[str, Any]:
    """A tool call's arguments, JSON text as model servers send them, as the call's input (``{}`` for none).

    Arguments that are not one JSON object nested at most ``MAX_ARGUMENT_DEPTH`` deep stay text, ``{UNPARSED: raw}``
    (cut to 200 characters when too deep), and the call gets an error result (``tools.registry``): arguments nested
    100,000 deep would exhaust the JSON parser's stack (RecursionError) and fail the turn."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except RecursionError:
        return {UNPARSED: raw[:200]}
    except ValueError:
        return {UNPARSED: raw}
    if not isinstance(value, dict):
        return {UNPARSED: raw}
    return bounded_input(value)


def bounded_input(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` (a tool call's input) when it is nested at most ``MAX_ARGUMENT_DEPTH`` deep, else
    ``{UNPARSED: <its start>}`` (the call gets an error result, the answer is kept)."""
    if json_depth(value, MAX_ARGUMENT_DEPTH) <= MAX_ARGUMENT_DEPTH:
        return value
    try:
        start = json.dumps(value)[:200]
    except (RecursionError, TypeError, ValueError):
        start = ""
    return {UNPARSED: start}


def used_tool_use_ids(messages: Iterable[Message]) -> set[str]:
    return {
        str(block["toolUse"].get("toolUseId"))
        for message in messages
        if message.role == "assistant"
        for block in message.content
        if isinstance(block, dict) and isinstance(block.get("toolUse"), dict)
    }


def _fresh_id(original: str, used: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]", "", original)[:40] or "call"
    counter = len(used)
    while True:
        candidate = f"{stem}_u{counter}"
        if candidate not in used:
            return candidate
        counter += 1


def _with_bounded_input(block: Any) -> Any:
    """A toolUse block whose input is nested too deep gets ``bounded_input``'s stand-in (an error result, not a
    refused answer); every other block as it is."""
    use = block.get("toolUse") if isinstance(block, dict) else None
    if not isinstance(use, dict) or not isinstance(use.get("input"), dict):
        return block
    bounded = bounded_input(use["input"])
    return block if bounded is use["input"] else {**block, "toolUse": {**use, "input": bounded}}


def _check_block(block: Any, index: int) -> None:
    if not isinstance(block, dict) or not block:
        raise BadAnswer(f"content block {index} is not an object")
    if "text" in block and not isinstance(block["text"], str):
        raise BadAnswer(f"content block {index}: text is not a string")
    if "toolUse" in block:
        use = block["toolUse"]
        if not isinstance(use, dict):
            raise BadAnswer(f"content block {index}: toolUse is not an object")
        if not isinstance(use.get("name"), str) or not use["name"]:
            raise BadAnswer(f"content block {index}: the tool call has no name")
        if not isinstance(use.get("input", {}), dict):
            raise BadAnswer(f"content block {index}: the input of tool call {use['name']!r} is not an object")


def accept_answer(content: Any, used_ids: set[str], *, max_bytes: int) -> list[ContentBlock]:
    """The answer as it will be stored (its text valid, ``state.codec``; tool-use ids made unique; ``used_ids`` is
    updated), or BadAnswer."""
    if not isinstance(content, list) or not content:
        raise BadAnswer("the answer has no content blocks")
    content = [_with_bounded_input(block) for block in content]
    depth = json_depth(content, MAX_ANSWER_DEPTH)
    if depth > MAX_ANSWER_DEPTH:
        raise BadAnswer(f"the answer is nested more than {MAX_ANSWER_DEPTH} levels deep")
    try:
        size = len(json.dumps(content).encode())
    except (TypeError, ValueError) as exc:
        raise BadAnswer(f"the answer is not JSON-serialisable ({exc})") from None
    if size > max_bytes:
        raise BadAnswer(f"the answer is {size:,} bytes, over the cap of {max_bytes:,} bytes")
    accepted: list[ContentBlock] = []
    for index, block in enumerate(content):
        _check_block(block, index)
        if "toolUse" not in block:
            accepted.append(block)
            continue
        use = dict(block["toolUse"])
        use.setdefault("input", {})
        original = use.get("toolUseId")
        original = original if isinstance(original, str) else ""
        if not TOOL_USE_ID_RE.match(original) or original in used_ids:
            use["toolUseId"] = _fresh_id(original, used_ids)
        used_ids.add(use["toolUseId"])
        accepted.append({**block, "toolUse": use})
    return codec.valid(accepted)  # a lone surrogate as U+FFFD: the turn goes on with what the store keeps


def refusal_text(reason: str) -> str:
    """What the model is told about its refused answer."""
    return (
        f"[SYSTEM] Your last answer could not be used and was discarded: {reason}. "
        "Answer again with plain text or well-formed tool calls."
    )


__all__ = [
    "BadAnswer",
    "MAX_ANSWER_DEPTH",
    "MAX_ARGUMENT_DEPTH",
    "UNPARSED",
    "accept_answer",
    "bounded_input",
    "json_depth",
    "refusal_text",
    "tool_input",
    "used_tool_use_ids",
]
