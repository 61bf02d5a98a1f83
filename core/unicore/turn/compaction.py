"""Context compaction: a request whose estimated input passes the model's limit starts from a summary.

A turn keeps a ``HistoryView``: the newest compaction record (``unicore.store.compactions``) and the stored
messages after it. ``Compactor.fit`` builds the request's messages; while their estimate
(``providers.calling.estimate_input_tokens``) passes ``limit`` (``UNICORE_COMPACT_AT`` of the window,
``unicore.turn.context_window``), it writes a new record:

1. the cut: the earliest point where the messages after it fit half of the room left (system prompt, tools and
   the summary's own room taken off), and that never splits an exchange: a cut is before message ``c`` only when
   message ``c - 1`` is a user message or an assistant message without tool calls (a tool call's results are the
   user message right after it), and at least the newest message stays;
2. the summary: a model call with purpose ``summary`` over the previous summary and the messages before the cut,
   tool blocks flattened to text (``calling.flatten_tool_blocks``); input too large for one call is folded in
   parts (each part's summary feeds the next), a single message larger than a part is clipped for the summary;
3. the record (fenced, append-only), then the view drops the summarized messages.

Requests are then [the summary as a user message] + the messages after the cut. When even the newest message
alone does not fit, ``ContextTooLarge`` fails the turn with one line rather than compacting forever.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from unicore.api.schema import Message
from unicore.errors import ModelError
from unicore.providers.base import ModelRequest, ModelResponse, ToolSpec
from unicore.providers.calling import CHARS_PER_TOKEN, estimate_input_tokens, flatten_tool_blocks
from unicore.store.compactions import Compaction
from unicore.traces import genai, spans
from unicore.turn.history import ConverseMessage, build_request_messages, message_text, shape_converse_messages

SUMMARY_SYSTEM = "You summarize agent conversations."
COMPACTION_PROMPT = (
    "The conversation above is being compacted: it no longer fits the model's context window. Summarize it for "
    "the assistant that continues it: the task and its requirements, what was done (tools called and what they "
    "returned, children), decisions, open questions and what remains to do. Keep names, paths, ids and numbers "
    "exactly. Answer with the summary only."
)
MAX_ROUNDS = 64  # compactions one fit may write (each covers more; a bound, never reached in practice)
WRAPPER_TOKENS = 40  # the summary's framing text in a request


class ContextTooLarge(ModelError):
    """Even after compaction the request does not fit the model's context window."""


def message_tokens(message: Message | ConverseMessage) -> int:
    content = message.content if isinstance(message, Message) else message["content"]
    return len(json.dumps(content, default=str)) // CHARS_PER_TOKEN + 4


def summary_context(compaction: Compaction) -> ConverseMessage:
    """The user message a request starts with after a compaction."""
    return {
        "role": "user",
        "content": [{"text": f"[Summary of the conversation before this point (messages 1-{compaction.upto:,}, "
                             f"compacted to fit the context window)]\n{compaction.summary}"}],
    }


def cut_points(messages: Sequence[Message]) -> list[int]:
    """Indexes ``c`` (1..len-1) where the history may be cut before ``messages[c]`` without splitting a tool call
    from its results."""
    cuts = []
    for c in range(1, len(messages)):
        before = messages[c - 1]
        if before.role == "user" or not any("toolUse" in block for block in before.content):
            cuts.append(c)
    return cuts


@dataclass
class HistoryView:
    """The newest compaction and the messages after it, as a turn holds them (appended to as the turn goes)."""

    compaction: Compaction | None
    messages: list[Message] = field(default_factory=list)

    @property
    def earlier_answers(self) -> int:
        return self.compaction.answers if self.compaction is not None else 0

    def request_messages(self, extra: Sequence[ConverseMessage] = ()) -> list[ConverseMessage]:
        head = [summary_context(self.compaction)] if self.compaction is not None else []
        return build_request_messages([*head, *self.messages, *extra])

    def turn_messages(self, turn_number: int, first_seq: int) -> list[ConverseMessage | Message]:
        """Turn ``turn_number``'s messages in the view, led by the summary when a compaction cut into the turn."""
        own: list[ConverseMessage | Message] = [m for m in self.messages if m.turn_number == turn_number]
        if self.compaction is not None and self.compaction.upto > first_seq:
            own.insert(0, summary_context(self.compaction))
        return own


Summarize = Callable[[ModelRequest], ModelResponse]
WriteRecord = Callable[[Compaction], bool]


class Compactor:
    """Fits requests into ``limit`` estimated input tokens (see the module docstring)."""

    def __init__(self, view: HistoryView, *, task_id: str, window: int, limit: int, summarize: Summarize,
                 write: WriteRecord) -> None:
        self.view = view
        self.task_id = task_id
        self.window = window
        self.limit = limit
        self.summarize = summarize
        self.write = write
        self.summary_room = max(64, min(1024, limit // 4))  # max_tokens of a summary, and its room in requests
        self.written = 0  # records this compactor wrote

    def estimate(self, system: str, tools: Sequence[ToolSpec], messages: list[ConverseMessage]) -> int:
        return estimate_input_tokens(
            ModelRequest(task_id=self.task_id, system=system, messages=messages, tools=list(tools)))

    def fit(self, system: str, tools: Sequence[ToolSpec] = (),
            extra: Sequence[ConverseMessage] = ()) -> list[ConverseMessage]:
        """The request's messages (shaped), compacting first while they pass the limit."""
        for _ in range(MAX_ROUNDS):
            messages = self.view.request_messages(extra)
            if self.estimate(system, tools, messages) <= self.limit:
                return messages
            fixed = self.estimate(system, tools, []) + sum(message_tokens(m) for m in extra)
            self._compact(fixed)
        raise ContextTooLarge(f"the request still passes {self.limit:,} tokens after {MAX_ROUNDS} compactions")

    def _too_large(self, room: int) -> ContextTooLarge:
        largest = max((message_tokens(m) for m in self.view.messages), default=0)
        return ContextTooLarge(
            f"the request does not fit the model's context window of {self.window:,} tokens even after compaction "
            f"({room:,} tokens left for messages once the system prompt, tools and summary are counted; the "
            f"largest message takes ~{largest:,}): raise UNICORE_CONTEXT_WINDOW_TOKENS / UNICORE_CONTEXT_WINDOWS if "
            "the model has a larger window")

    def _compact(self, fixed: int) -> None:
        messages = self.view.messages
        room = self.limit - fixed - self.summary_room - WRAPPER_TOKENS
        cuts = cut_points(messages)
        sizes = [message_tokens(m) for m in messages]
        tails = [0] * (len(messages) + 1)  # tails[c] = tokens of messages[c:]
        for i in range(len(messages) - 1, -1, -1):
            tails[i] = tails[i + 1] + sizes[i]
        fitting = [c for c in cuts if tails[c] <= room // 2]
        if fitting:
            cut = fitting[0]
        elif cuts and tails[cuts[-1]] <= room:
            cut = cuts[-1]
        else:
            raise self._too_large(room)
        previous = self.view.compaction
        with spans.span(genai.COMPACTION, {genai.TASK_ID: self.task_id, "unicore.compaction.messages": cut,
                                           "unicore.compaction.upto": messages[cut].seq}):
            summary = self._summary(previous, messages[:cut])
        record = Compaction(
            upto=messages[cut].seq,
            summary=summary,
            answers=self.view.earlier_answers + sum(1 for m in messages[:cut] if m.role == "assistant"),
            turn_number=messages[cut - 1].turn_number,
        )
        self.write(record)  # False (an equal record already stored, e.g. by a crashed try): the view is the same
        self.written += 1
        self.view.compaction = record
        self.view.messages = messages[cut:]

    def _summary(self, previous: Compaction | None, messages: Sequence[Message]) -> str:
        """The summary of ``previous`` + ``messages``: one call, or several folding parts that fit one call."""
        prompt: ConverseMessage = {"role": "user", "content": [{"text": COMPACTION_PROMPT}]}
        overhead = self.estimate(SUMMARY_SYSTEM, [], [prompt]) + self.summary_room + WRAPPER_TOKENS
        budget = self.limit - overhead  # what the summarized messages may take in one call
        if budget < 32:
            raise self._too_large(budget)
        flat = flatten_tool_blocks([{"role": m.role, "content": list(m.content)} for m in messages])
        flat = [_clipped(m, budget) for m in flat]
        summary = previous.summary if previous is not None else ""
        part: list[dict[str, Any]] = []
        used = 0
        for message in flat:
            size = message_tokens(message)
            if part and used + size > budget:
                summary = self._call(summary, part, prompt)
                part, used = [], 0
            part.append(message)
            used += size
        return self._call(summary, part, prompt) if part else summary

    def _call(self, summary: str, part: list[dict[str, Any]], prompt: ConverseMessage) -> str:
        head = [{"role": "user", "content": [{"text": f"[Summary so far]\n{summary}"}]}] if summary else []
        request = ModelRequest(task_id=self.task_id, system=SUMMARY_SYSTEM,
                               messages=shape_converse_messages([*head, *part, prompt]), purpose="summary",
                               max_tokens=self.summary_room)
        text = message_text(self.summarize(request).content).strip()
        limit_chars = self.summary_room * CHARS_PER_TOKEN
        if len(text) > limit_chars:  # a model that overran its max_tokens still fits the room kept for it
            text = text[:limit_chars] + " [...]"
        return text or summary


def _clipped(message: dict[str, Any], budget: int) -> dict[str, Any]:
    """``message`` with its text blocks cut so it takes at most ``budget`` tokens (for a summary's input only)."""
    if message_tokens(message) <= budget:
        return message
    per_block = max(16, (budget - 8) * CHARS_PER_TOKEN // max(1, len(message["content"])) - 64)
    while True:  # escaped characters count more than one: halve until it fits
        blocks = []
        for block in message["content"]:
            text = str(block.get("text", ""))
            if len(text) > per_block:
                text = text[:per_block] + f" [... {len(text) - per_block:,} characters clipped for the summary]"
            blocks.append({"text": text})
        clipped = {**message, "content": blocks}
        if message_tokens(clipped) <= budget or per_block <= 16:
            return clipped
        per_block //= 2


def answer_tool_ids(content: Any) -> list[str]:
    """The string tool-use ids of a model answer (before ``answers.accept_answer`` checked its shape)."""
    if not isinstance(content, list):
        return []
    ids = []
    for block in content:
        use = block.get("toolUse") if isinstance(block, dict) else None
        if isinstance(use, dict) and isinstance(use.get("toolUseId"), str):
            ids.append(use["toolUseId"])
    return ids


__all__ = ["COMPACTION_PROMPT", "Compactor", "ContextTooLarge", "HistoryView", "answer_tool_ids", "cut_points",
           "message_tokens", "summary_context"]

