"""The live token stream of a task: a model's answer as it arrives, for live views only.

``uc:{<task id>}:tokens`` (``TaskKeys.tokens``; the task's hash tag, so the same slot as the task's other keys, and
inside the per-namespace ACL patterns of ``state.acl``: a turn pod's Redis user may XADD and PEXPIRE it, never read
it; readers are the CLI and the operator, with the admin user) is a Redis stream, capped with ``MAXLEN ~`` at
``UNICORE_LIVE_STREAM_ENTRIES`` (2000) entries and expiring ``UNICORE_LIVE_STREAM_TTL_SECONDS`` (1 h) after its last
write. Every entry has the same fields (Redis then stores the field names once per stream node):

``turn``     the turn (Redis's number, from 0)
``call``     the model call within the turn, as counted by the process that made it (from 0)
``seq``      the seq the call's answer gets when it is stored: the transcript message that ends this live text
``attempt``  the try of the call (from 1); text of an earlier try of the same call is void
``kind``     ``attempt`` (a try starts), ``text`` (a delta), ``end`` (the call returned or failed), ``turn_end``;
             ``output``: a ``run_command`` command's line and output as it runs (``CommandOutputStream``: ``seq`` is
             where the call's result will be stored, so followers show it until the result is)
``text``     the delta (``text`` entries), else empty

Bytes are bounded too, whatever a model (or an endpoint that ignores ``max_tokens``) writes:

- an entry's text is at most ``ENTRY_TEXT_BYTES`` (512) bytes of UTF-8 (a larger delta becomes several entries) and
  the stream is trimmed to exactly ``entries`` entries (``MAXLEN``, not ``MAXLEN ~``), so a stream holds at most
  ``entries`` x 512 bytes of text: 1,024,000 bytes at the default 2000 entries;
- one try of a call publishes at most ``answer_bytes`` bytes of text, the message cap (256 KiB: an answer longer
  than that is refused, never stored); past it, one text entry ``CUT_MARK`` says where the live text stopped and
  the rest of that try is not published. Readers show the mark as text, so every follower shows it.

Text is published valid (``state.codec.valid_text``: a lone surrogate as U+FFFD).

Stored history never comes from here: a turn stores one message per model answer after the call returns. So a
reader shows live text for calls whose answer is not stored yet and the stored message after
(``unicore_client.live_view``).

Writing (``TokenStreamSink``, the ``AnswerSink`` a turn gives a model call) never fails or stalls the turn: the
provider's thread only appends to a buffer; a worker thread publishes, batching deltas (a flush every
``flush_seconds`` or ``flush_chars`` characters, one pipelined round trip for what piled up), except that the first
delta of a try, a new try and the end go out at once (time to first token). A Redis error is logged and the batch
dropped; ``close`` waits at most ``close_wait_seconds`` for the worker. It takes the turn's client; the readers
(``read_after``, ``current_call``, ``live_state``) take the ``TaskStore`` their callers hold.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES
from unicore.log import get_logger
from unicore.store.client import RedisClient
from unicore.store.codec import valid_text
from unicore.store.keys import TaskKeys
from unicore.store.tasks import TaskStore

log = get_logger("state.token_stream")

Kind = Literal["attempt", "text", "output", "end", "turn_end"]
KINDS: tuple[str, ...] = ("attempt", "text", "output", "end", "turn_end")
SHOWN_KINDS: tuple[str, ...] = ("attempt", "text", "output", "end")  # what a live view shows (of one call's seq)
DEFAULT_ENTRIES = 2000
DEFAULT_TTL_SECONDS = 3600.0
ENTRY_TEXT_BYTES = 512  # UTF-8 bytes of text in one entry, at most
CUT_MARK = "\n[live text cut after {limit:,} bytes: the rest of this answer is not shown live]"
READ_COUNT = 500  # entries per read, at most
ENTRY_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")


@dataclass(frozen=True)
class StreamSettings:
    """How a TokenStreamSink publishes (``entries`` 0: not at all)."""

    entries: int = DEFAULT_ENTRIES
    ttl_seconds: float = DEFAULT_TTL_SECONDS
    answer_bytes: int = DEFAULT_MESSAGE_CAP_BYTES  # text of one try, at most (then CUT_MARK)
    entry_bytes: int = ENTRY_TEXT_BYTES  # text of one entry, at most
    flush_seconds: float = 0.05
    flush_chars: int = 64
    close_wait_seconds: float = 2.0


@dataclass(frozen=True)
class StreamEntry:
    id: str
    turn: int
    call: int
    seq: int
    attempt: int
    kind: str
    text: str

    @classmethod
    def of(cls, entry_id: Any, fields: Mapping[Any, Any]) -> StreamEntry:
        def field(name: str) -> str:
            value = fields.get(name, fields.get(name.encode(), ""))
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

        def number(name: str) -> int:
            try:
                return int(field(name) or 0)
            except ValueError:
                return 0

        raw_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        return cls(id=raw_id, turn=number("turn"), call=number("call"), seq=number("seq"),
                   attempt=number("attempt"), kind=field("kind"), text=field("text"))


def _fields(turn: int, call: int, seq: int, attempt: int, kind: str, text: str = "") -> dict[str, Any]:
    return {"turn": turn, "call": call, "seq": seq, "attempt": attempt, "kind": kind, "text": text}


def publish(client: RedisClient, task_id: str, events: list[dict[str, Any]], settings: StreamSettings) -> None:
    """XADD ``events`` (entry fields) to the task's stream and renew its expiry: one pipelined round trip. Raises
    the client's errors (the sink catches them)."""
    if not events or settings.entries <= 0:
        return
    key = TaskKeys(task_id).tokens
    pipe = client.pipeline(transaction=False)
    for fields in events:
        pipe.xadd(key, fields, maxlen=settings.entries, approximate=False)  # exact: the byte bound (module doc)
    pipe.pexpire(key, max(1, int(settings.ttl_seconds * 1000)))
    pipe.execute()


def publish_turn_end(client: RedisClient, task_id: str, turn: int, settings: StreamSettings) -> None:
    """A ``turn_end`` entry (wakes readers waiting for more at once); logged, never raised."""
    try:
        publish(client, task_id, [_fields(turn, 0, 0, 0, "turn_end")], settings)
    except Exception as exc:  # noqa: BLE001 - the live view is best effort
        log.warning("task %s: live stream: turn end not published (%s)", task_id, exc)


class TokenStreamSink:
    """The ``AnswerSink`` of one model call: its text to the task's live stream (module doc). Thread-safe."""

    text_kind = "text"
    cut_mark = CUT_MARK

    def __init__(self, client: RedisClient, task_id: str, *, turn: int, call: int, seq: int,
                 settings: StreamSettings | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.task_id = task_id
        self.turn, self.call, self.seq = turn, call, seq
        self.settings = settings or StreamSettings()
        self._clock = clock
        self._cond = threading.Condition()
        self._events: list[dict[str, Any]] = []
        self._pending_chars = 0
        self._urgent = False
        self._closed = False
        self._attempt = 0
        self._text_sent = False  # the current try's first delta went out
        self._try_bytes = 0  # bytes of the current try's text taken (at most settings.answer_bytes)
        self._cut = False  # the current try passed settings.answer_bytes: CUT_MARK is queued, the rest dropped
        self._last_flush = float("-inf")
        self._worker: threading.Thread | None = None
        self._warned = False
        self.published = 0  # entries written (tests, diagnostics)
        self.dropped = 0  # entries lost to Redis errors

    # ---- AnswerSink

    def attempt_started(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._attempt += 1
            # Text of the earlier try not published yet is void: drop it.
            self._events = [e for e in self._events if e["kind"] != self.text_kind or e["attempt"] == self._attempt]
            self._pending_chars = 0
            self._events.append(_fields(self.turn, self.call, self.seq, self._attempt, "attempt"))
            self._text_sent = False
            self._try_bytes, self._cut = 0, False
            self._wake(urgent=True)

    def text(self, delta: str) -> None:
        if not delta:
            return
        with self._cond:
            if self._closed or self._cut:
                return
            if self._attempt == 0:  # a provider that does not announce tries: this is the first
                self._attempt = 1
            limit = self.settings.answer_bytes
            taken, rest = utf8_split(valid_text(delta), limit - self._try_bytes)
            self._try_bytes += len(taken.encode())
            self._add_text(taken)
            if rest:  # past the try's budget: say so once, publish nothing more of this try
                self._cut = True
                self._add_text(self.cut_mark.format(limit=limit), own_entry=True)
            urgent = not self._text_sent or self._pending_chars >= self.settings.flush_chars or self._cut
            self._text_sent = True
            self._wake(urgent=urgent)

    def _add_text(self, text: str, *, own_entry: bool = False) -> None:
        """Queue ``text`` (with the lock held): appended to the last queued entry of this try while that stays within
        ``entry_bytes``, the rest in new entries (``own_entry``: starts a new one)."""
        size = max(4, self.settings.entry_bytes)  # one character always fits an entry
        last = None if own_entry or not self._events else self._events[-1]
        if last is not None and (last["kind"] != self.text_kind or last["attempt"] != self._attempt):
            last = None
        pos = 0
        while pos < len(text):
            room = size - len(last["text"].encode()) if last is not None else 0
            piece = utf8_split(text[pos:pos + room], room)[0]
            if not piece:  # the last entry is full (or there is none): a new one
                last = _fields(self.turn, self.call, self.seq, self._attempt, self.text_kind)
                self._events.append(last)
                continue
            last["text"] += piece  # type: ignore[index]
            self._pending_chars += len(piece)
            pos += len(piece)

    # ---- the end of the call

    def close(self) -> None:
        """Publish what is left and the ``end`` entry; waits at most ``close_wait_seconds`` (never raises)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if self._attempt or self._events:
                self._events.append(_fields(self.turn, self.call, self.seq, max(1, self._attempt), "end"))
            self._wake(urgent=True)
            worker = self._worker
        if worker is not None:
            worker.join(self.settings.close_wait_seconds)
            if worker.is_alive():
                log.warning("task %s: live stream: still publishing after %.1fs; the turn goes on", self.task_id,
                            self.settings.close_wait_seconds)

    def __enter__(self) -> TokenStreamSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the worker

    def _wake(self, *, urgent: bool) -> None:
        """Called with the lock held: note urgency, start the worker once, wake it."""
        self._urgent = self._urgent or urgent
        if self._worker is None and self._events:
            self._worker = threading.Thread(target=self._run, name=f"live-stream-{self.call}", daemon=True)
            self._worker.start()
        self._cond.notify()

    def _next_batch(self) -> list[dict[str, Any]] | None:
        """Wait for something to publish (with the lock held); None once closed and drained."""
        while True:
            if self._events and (self._urgent or self._closed):
                break
            if self._events:
                remaining = self._last_flush + self.settings.flush_seconds - self._clock()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            elif self._closed:
                return None
            else:
                self._cond.wait()
        batch, self._events = self._events, []
        self._pending_chars, self._urgent = 0, False
        self._last_flush = self._clock()
        return batch

    def _run(self) -> None:
        while True:
            with self._cond:
                batch = self._next_batch()
            if batch is None:
                return
            try:
                publish(self.client, self.task_id, batch, self.settings)
                self.published += len(batch)
            except Exception as exc:  # noqa: BLE001 - a live view never fails a turn
                self.dropped += len(batch)
                if not self._warned:
                    self._warned = True
                    log.warning("task %s: live stream: %d entries dropped (%s: %s); the turn goes on",
                                self.task_id, len(batch), type(exc).__name__, exc)


class CommandOutputStream(TokenStreamSink):
    """A ``run_command`` command's live output: ``output`` entries at the seq its result will be stored at (the first
    one the command line), capped like an answer's text."""

    text_kind = "output"
    cut_mark = "\n[live output cut after {limit:,} bytes: the rest is not shown live; the result keeps the end]\n"


def utf8_split(text: str, limit: int) -> tuple[str, str]:
    """``text`` split where its UTF-8 encoding reaches ``limit`` bytes, between characters: (head, rest)."""
    if limit <= 0:
        return "", text
    data = text[:limit].encode()  # the first ``limit`` characters hold at least ``limit`` bytes, if there are that many
    if len(data) <= limit:
        return text[:limit], text[limit:]
    end = limit
    while end > 0 and data[end] & 0xC0 == 0x80:  # a continuation byte: back to the character's start
        end -= 1
    head = data[:end].decode()
    return head, text[len(head):]


# --------------------------------------------------------------------------- readers


def check_entry_id(value: str) -> str:
    """``value`` if it is a stream entry id (``<ms>-<n>`` or ``<ms>``), else ValueError."""
    if not ENTRY_ID.match(value):
        raise ValueError(f"not a stream entry id: {value!r}")
    return value


def read_after(store: TaskStore, task_id: str, after: str, *, wait_seconds: float = 0.0,
               count: int = READ_COUNT) -> list[StreamEntry]:
    """Entries after id ``after`` (``0``: from the oldest kept), at most ``count``; when there are none yet, waits up to
    ``wait_seconds`` for one (XREAD BLOCK; keep it below the client's socket timeout)."""
    check_entry_id(after)
    block = int(wait_seconds * 1000) if wait_seconds > 0 else None
    reply = store.redis.xread({TaskKeys(task_id).tokens: after}, count=count, block=block)
    entries: list[StreamEntry] = []
    for _key, items in reply or []:
        entries.extend(StreamEntry.of(entry_id, fields) for entry_id, fields in items)
    return entries


def current_call(store: TaskStore, task_id: str, *, scan: int = DEFAULT_ENTRIES) -> tuple[list[StreamEntry], str]:
    """Where a reader that has just printed the stored transcript starts: the entries of the call still in progress
    (from its latest try; none when the newest entry ends a call or a turn) and the id to read after next (``0``
    when the stream is empty). Reads at most ``scan`` entries back."""
    newest_first = [StreamEntry.of(i, f) for i, f in store.redis.xrevrange(TaskKeys(task_id).tokens, count=scan)]
    if not newest_first:
        return [], "0"
    last = newest_first[0].id
    if newest_first[0].kind in ("end", "turn_end"):
        return [], last
    call = newest_first[0]
    tail: list[StreamEntry] = []
    for entry in newest_first:
        if (entry.turn, entry.seq) != (call.turn, call.seq) or entry.attempt != call.attempt:
            break
        tail.append(entry)
        if entry.kind == "attempt":
            break
    return list(reversed(tail)), last


@dataclass(frozen=True)
class LiveState:
    """What a follower asks besides the stream: is the task busy, and how many messages are stored."""

    status: str | None  # the record's status; None: no record
    pending: int
    leased: bool
    messages: int

    @property
    def busy(self) -> bool:
        return bool(self.pending) or self.leased or self.status == "running"


def live_state(store: TaskStore, task_id: str) -> LiveState:
    """Status, inbox length, lease and message count: one round trip."""
    keys = TaskKeys(task_id)
    pipe = store.redis.pipeline(transaction=False)
    pipe.hget(keys.task, "status")
    pipe.llen(keys.inbox)
    pipe.exists(keys.lease)
    pipe.llen(keys.messages)
    status, pending, leased, total = pipe.execute()
    return LiveState(status=status, pending=int(pending), leased=bool(leased), messages=int(total))


__all__ = ["CUT_MARK", "ENTRY_TEXT_BYTES", "KINDS", "SHOWN_KINDS", "CommandOutputStream", "LiveState", "StreamEntry",
           "StreamSettings",
           "TokenStreamSink",
           "check_entry_id", "current_call", "live_state", "publish", "publish_turn_end", "read_after", "utf8_split"]
