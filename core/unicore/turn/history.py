"""Pure functions from stored messages to what a provider accepts. Stored history is never rewritten.

``cleanup_conversation_history``: a toolUse with no result gets a synthetic error result, consecutive
assistant messages are repaired with a synthetic user message of error results, results for unknown (or already
answered) toolUse ids are dropped.

``shape_converse_messages`` (Bedrock Converse): strict user/assistant alternation starting with a user message;
consecutive messages of one role are merged at request-build time, toolResult blocks first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from unicore.api.schema import ContentBlock, Message, is_turn_ending, tool_result_block
from unicore.log import get_logger
from unicore.store.records import Turn

log = get_logger("history")

INTERRUPTED_TEXT = "Tool execution interrupted or failed to complete"
CANCELLED_TEXT = "Cancelled"
EMPTY_TEXT = "(empty)"

ConverseMessage = dict[str, Any]  # {"role": "user"|"assistant", "content": [blocks]}


def _as_dict(message: Message | ConverseMessage) -> ConverseMessage:
    if isinstance(message, Message):
        return {"role": message.role, "content": list(message.content)}
    return {"role": message["role"], "content": list(message.get("content") or [])}


def tool_use_ids(content: Iterable[ContentBlock]) -> list[str]:
    return [block["toolUse"]["toolUseId"] for block in content if "toolUse" in block]


def _synthetic_results(ids: Iterable[str], text: str = INTERRUPTED_TEXT) -> list[ContentBlock]:
    return [tool_result_block(tool_id, text, error=True) for tool_id in ids]


def cleanup_conversation_history(messages: Sequence[Message | ConverseMessage]) -> list[ConverseMessage]:
    """Repair tool-use/result pairing over the whole conversation (all turns, in order)."""
    out: list[ConverseMessage] = []
    pending: list[str] = []  # toolUse ids of the last assistant message still waiting for a result
    for original in messages:
        message = _as_dict(original)
        if message["role"] == "assistant":
            if pending:
                log.warning(
                    "assistant message follows unanswered tool calls %s; adding error results", pending
                )
                out.append({"role": "user", "content": _synthetic_results(pending)})
            pending = tool_use_ids(message["content"])
            out.append(message)
            continue
        results: list[ContentBlock] = []
        others: list[ContentBlock] = []
        for block in message["content"]:
            if "toolResult" not in block:
                others.append(block)
                continue
            tool_id = block["toolResult"].get("toolUseId")
            if tool_id in pending:
                pending.remove(tool_id)
                results.append(block)
            else:
                log.warning("dropping a result for unknown or already answered tool call %s", tool_id)
        results.extend(_synthetic_results(pending))
        pending = []
        content = results + others
        if content:
            out.append({"role": "user", "content": content})
    if pending:
        out.append({"role": "user", "content": _synthetic_results(pending)})
    return out


def _non_empty(block: ContentBlock) -> ContentBlock:
    if "text" in block and not str(block["text"]).strip():
        return {"text": EMPTY_TEXT}
    return block


def shape_converse_messages(messages: Sequence[ConverseMessage]) -> list[ConverseMessage]:
    """Strict alternation for Bedrock Converse: merge runs of one role; in user messages toolResult blocks first."""
    shaped: list[ConverseMessage] = []
    for message in messages:
        content = [_non_empty(block) for block in message["content"]]
        if not content:
            continue
        if shaped and shaped[-1]["role"] == message["role"]:
            shaped[-1]["content"].extend(content)
        else:
            shaped.append({"role": message["role"], "content": content})
    for message in shaped:
        if message["role"] == "user":
            blocks = message["content"]
            message["content"] = [b for b in blocks if "toolResult" in b] + [
                b for b in blocks if "toolResult" not in b
            ]
    if shaped and shaped[0]["role"] != "user":
        shaped.insert(0, {"role": "user", "content": [{"text": "(conversation start)"}]})
    return shaped


def build_request_messages(messages: Sequence[Message | ConverseMessage]) -> list[ConverseMessage]:
    """Cleanup, then shape: the messages of a model request."""
    return shape_converse_messages(cleanup_conversation_history(messages))


def latest_user_text(messages: Sequence[ConverseMessage]) -> str:
    """Text of the trailing user message(s) (after the last assistant message), joined by blank lines."""
    texts: list[str] = []
    for message in reversed(messages):
        if message["role"] != "user":
            break
        texts[:0] = [block["text"] for block in message["content"] if "text" in block]
    return "\n\n".join(texts)


def message_text(content: Iterable[ContentBlock]) -> str:
    return "\n".join(block["text"] for block in content if "text" in block)


def answer_to(turns: Sequence[Turn], inbox_id: str) -> str | None:
    """The answer to the request ``inbox_id`` (a ``user`` inbox entry: a send, a prompt, a parent's message).

    It is the text-only assistant message that ended the request's turn. When the following turns hold no new
    request (they were started by child completions or tool results only: the task waited for its children),
    they continue the same work and the answer is the one that ended the last of them. Requests drained into
    one turn share its answer. A turn that ended without a text-only answer (max_iterations, token budget)
    answers with its last assistant text, else its note. None while the request is not in the history or its
    work has not ended."""
    found = next(
        (
            (t, m)
            for t, turn in enumerate(turns)
            for m, message in enumerate(turn.messages)
            if message.role == "user" and inbox_id in message.inbox_ids
        ),
        None,
    )
    if found is None:
        return None
    first_turn, position = found
    answer: str | None = None
    for turn in turns[first_turn:]:
        later = turn.messages[position + 1 :] if turn is turns[first_turn] else turn.messages
        if turn is not turns[first_turn] and any(m.role == "user" and m.inbox_ids for m in later):
            break  # a new request: what follows answers it
        ending = next((reply for reply in later if is_turn_ending(reply)), None)
        if ending is not None:
            answer = message_text(ending.content)
        elif turn.ended_at is None:
            return None
        else:
            texts = [message_text(m.content) for m in later if m.role == "assistant" and message_text(m.content)]
            answer = texts[-1] if texts else turn.note
    return answer
