"""Property-based tests (hypothesis) of drain + history cleanup + request shaping.

Stateful, on the real redis-server: random interleavings of producers (user messages and completions, some with
an id already accepted), turns (acquire, drain, model answers with 0-3 tool calls, refused answers, end_turn,
release), tool results (possibly twice under one id, possibly for calls of a crashed turn or for unknown ids),
crashes (the lease expires without a release), writes by the crashed turns (zombies) and races inside a drain (a
producer, or a successor turn that takes over the task, between the drain's read of the inbox and its script).
After every step:

- every accepted message is stored in the history exactly once or still waits in the inbox exactly once (never
  both, never lost; a duplicate id is never stored twice), and nothing else is stored;
- the stored history is exactly what the steps predict (drain batching, turn boundaries, seq numbers);
- every stored tool result either answers a call of the assistant message right before it (and reaches the
  request) or is dropped by cleanup, and every call of the request is answered exactly once;
- the request built from a non-empty history is one Bedrock Converse accepts (``converse_problems`` is empty)
  and, when a turn would call the model, ends with a user message (a zombie turn's late tool result, which broke
  this, is refused by the fenced ``queue_own_result``: see the test below).

Pure: arbitrary sequences of user/assistant messages with arbitrary tool calls and results always shape to a
valid request starting with a user message, keeping every text and call, and never rewrite their input.
"""

from __future__ import annotations

import copy
import itertools
import json
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from unicore.api.schema import ContentBlock, InboxMessage, Message, TaskSpec, is_turn_ending, tool_result_block
from unicore.errors import LeaseBusy, LeaseLost
from unicore.store.records import Lease
from unicore.store.task_reads import history_messages
from unicore.store.tasks import TaskStore
from unicore.turn.history import (
    EMPTY_TEXT,
    INTERRUPTED_TEXT,
    ConverseMessage,
    build_request_messages,
    tool_use_ids,
)
from unicore.turn.outcome import EXIT_OK

from tests.converse_check import converse_problems
from tests.integration.conftest import TurnRunner
from tests.waiting import wait_for

# Sized to keep this file at about 13 s on a 2-core machine (the stateful test: up to 150 x 35 steps, about 10 s).
STATEFUL_EXAMPLES = 150
STATEFUL_STEPS = 35
PURE_EXAMPLES = 400

Signature = tuple[str, ...]


def block_signature(block: ContentBlock) -> Signature | None:
    """What identifies a text or tool-result block (every text and result the tests make is unique)."""
    if "text" in block:
        return ("text", block["text"])
    if "toolResult" in block:
        result = block["toolResult"]
        return ("result", result["toolUseId"], json.dumps(result["content"], sort_keys=True))
    return None


def content_signatures(content: Sequence[ContentBlock]) -> list[Signature]:
    return [sig for sig in map(block_signature, content) if sig is not None]


def shown_text(text: str) -> str:
    return text if text.strip() else EMPTY_TEXT


def kept_results(messages: Sequence[Message | ConverseMessage]) -> Counter[Signature]:
    """The stored tool results a request must carry: those in the message right after the assistant message that
    made the call (the first answer to each call). Any other stored result is dropped by cleanup."""
    dicts = [m.model_dump() if isinstance(m, Message) else m for m in messages]
    kept: Counter[Signature] = Counter()
    for previous, message in itertools.pairwise(dicts):
        if message["role"] != "user" or previous["role"] != "assistant":
            continue
        open_calls = set(tool_use_ids(previous["content"]))
        for block in message["content"]:
            if "toolResult" in block and block["toolResult"]["toolUseId"] in open_calls:
                open_calls.discard(block["toolResult"]["toolUseId"])
                kept[block_signature(block)] += 1  # type: ignore[index]
    return kept


def check_request(messages: Sequence[Message | ConverseMessage], request: list[ConverseMessage]) -> None:
    """What any request built from ``messages`` must satisfy (non-empty input with some text or call)."""
    dicts = [m.model_dump() if isinstance(m, Message) else m for m in messages]
    problems = converse_problems(request)
    assert problems == [], f"invalid request {problems}:\n{json.dumps(request, indent=1)}"
    assert request[0]["role"] == "user"
    # every text and every call reaches the request, in order (empty texts shown as EMPTY_TEXT)
    stored_texts = [shown_text(b["text"]) for m in dicts for b in m["content"] if "text" in b]
    request_texts = [b["text"] for m in request for b in m["content"] if "text" in b]
    if request_texts[:1] == ["(conversation start)"] and stored_texts[:1] != ["(conversation start)"]:
        request_texts = request_texts[1:]
    assert request_texts == stored_texts
    stored_calls = [tid for m in dicts if m["role"] == "assistant" for tid in tool_use_ids(m["content"])]
    assert [tid for m in request for tid in tool_use_ids(m["content"])] == stored_calls
    # results: the kept ones reach the request, right after their call; the others are synthetic errors
    kept = kept_results(dicts)
    real: Counter[Signature] = Counter()
    for i, message in enumerate(request):
        results = [b["toolResult"] for b in message["content"] if "toolResult" in b]
        if not results:
            continue
        assert message["role"] == "user" and i > 0
        calls = tool_use_ids(request[i - 1]["content"])
        for result in results:
            assert result["toolUseId"] in calls
            sig = block_signature({"toolResult": result})
            if sig in kept:
                real[sig] += 1  # type: ignore[index]
            else:
                assert result["status"] == "error" and result["content"] == [{"text": INTERRUPTED_TEXT}], result
    assert real == kept


# ================================================================== stateful: drain + cleanup + shaping on Redis


@dataclass
class Accepted:
    """A message the inbox accepted (queue_message returned True)."""

    id: str
    kind: str  # user | completion | tool_result
    block: ContentBlock  # the content block it becomes in the history

    @property
    def signature(self) -> Signature:
        sig = block_signature(self.block)
        assert sig is not None
        return sig


@dataclass
class Expected:
    role: str
    content: list[ContentBlock]
    inbox_ids: list[str]
    turn_number: int


@dataclass
class Turn:
    """One process holding the lease."""

    lease: Lease
    drained: bool = False  # the first drain of the process is done (first_drain=False from then on)


@dataclass
class Model:
    """What the steps so far must have left in Redis."""

    accepted: dict[str, Accepted] = field(default_factory=dict)  # in acceptance order
    inbox: list[str] = field(default_factory=list)  # ids, oldest first
    messages: list[Expected] = field(default_factory=list)
    turn_first_seq: list[int] = field(default_factory=list)
    refusals: set[Signature] = field(default_factory=set)
    tool_calls: list[str] = field(default_factory=list)  # every toolUseId an answer made, oldest first


# (number of tool calls, text beside them (None: none; always a text when there is no call), calls run at once)
ANSWERS = st.tuples(
    st.integers(0, 3), st.none() | st.sampled_from(["", " ", "thinking"]), st.integers(0, 3)
) | st.just("refused")


class DrainMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis) -> None:
        super().__init__()
        self.client = client
        self.store = TaskStore(client)
        self.task_id = f"prop-{uuid.uuid4().hex[:10]}"
        self.keys = self.store.keys(self.task_id)
        self.model = Model()
        self.turn: Turn | None = None
        self.zombies: list[Lease] = []
        self.counter = itertools.count(1)
        self.last_token = 0

    # ---------------------------------------------------------------- helpers

    def _nonce(self) -> int:
        return next(self.counter)

    def _queue(self, message: InboxMessage, block: ContentBlock) -> None:
        """Queue through the store and check idempotency against the model."""
        fresh = message.id not in self.model.accepted
        assert self.store.queue_message(self.task_id, message) is fresh, message.id
        if fresh:
            self.model.accepted[message.id] = Accepted(message.id, message.type, block)
            self.model.inbox.append(message.id)

    def _queue_text(self, kind: str, message_id: str) -> None:
        text = f"{kind} {message_id} #{self._nonce()}"
        self._queue(InboxMessage(id=message_id, type=kind, content=text, sender="producer"), {"text": text})

    def _queue_result(self, tool_id: str) -> None:
        """The way ``ToolCalls.queue_result`` (unicore.turn.tool_calls) queues a tool result."""
        result = tool_result_block(tool_id, f"result of {tool_id} #{self._nonce()}")
        message = InboxMessage(
            id=f"tr:{tool_id}", type="tool_result", content=result, sender=self.task_id, tool_use_id=tool_id
        )
        self._queue(message, result)

    def _expect_drain(self, ids: list[str], first_drain: bool) -> tuple[int, bool, list[Expected]]:
        """Seed 000 rules, written out again: all tool results in one user message first, then one user message
        per text entry (a user entry keeps its id); a new turn iff there is none yet, or this is the first drain of
        a process and the last message is a text-only assistant message."""
        model = self.model
        entries = [model.accepted[i] for i in ids]
        batch = []
        results = [e.block for e in entries if e.kind == "tool_result"]
        if results:
            batch.append(("user", results, []))
        batch += [("user", [e.block], [e.id] if e.kind == "user" else []) for e in entries if e.kind != "tool_result"]
        last = model.messages[-1] if model.messages else None
        new_turn = not model.turn_first_seq or (
            first_drain and last is not None and is_turn_ending({"role": last.role, "content": last.content})
        )
        if new_turn:
            model.turn_first_seq.append(len(model.messages))
        turn_number = len(model.turn_first_seq) - 1
        added = [Expected(role, content, inbox_ids, turn_number) for role, content, inbox_ids in batch]
        model.messages += added
        del model.inbox[: len(ids)]
        return turn_number, new_turn, added

    def _expire(self, lease: Lease) -> None:
        """A crash: the lease is never released; it expires (1 ms TTL) and vanishes."""
        self.client.pexpire(self.keys.lease, 1)
        wait_for(lambda: not self.client.exists(self.keys.lease), timeout=5, interval=0.001, what="lease expiry")
        self.zombies.append(lease)

    def _acquire(self) -> Turn:
        lease = self.store.acquire_lease(self.task_id, holder=f"proc-{self._nonce()}")
        assert lease.token > self.last_token
        self.last_token = lease.token
        return Turn(lease)

    def _drain(self, turn: Turn) -> None:
        first = not turn.drained
        ids = list(self.model.inbox)
        result = self.store.drain(turn.lease, first_drain=first)
        turn.drained = True
        self._check_drain(result, ids, first)

    def _check_drain(self, result: Any, ids: list[str], first: bool) -> None:
        if not ids:
            assert result.drained == 0 and result.messages == []
            return
        turn_number, new_turn, added = self._expect_drain(ids, first)
        assert result.drained == len(ids)
        assert (result.turn_number, result.new_turn) == (turn_number, new_turn)
        if new_turn and turn_number:
            event("a first drain started a new turn")
        assert [(m.role, m.content, m.inbox_ids) for m in result.messages] == [
            (e.role, e.content, e.inbox_ids) for e in added
        ]

    def _snapshot(self) -> dict[str, Any]:
        r = self.client
        return {
            "task": r.hgetall(self.keys.task),
            "turns": r.lrange(self.keys.turns, 0, -1),
            "messages": r.lrange(self.keys.messages, 0, -1),
            "turnmeta": r.hgetall(self.keys.turnmeta),
            "inbox": r.lrange(self.keys.inbox, 0, -1),
            "lease": r.hgetall(self.keys.lease),
        }

    def _open_calls(self) -> list[str]:
        """The calls of the last message if it is an answer with tool calls."""
        last = self.model.messages[-1] if self.model.messages else None
        return tool_use_ids(last.content) if last is not None and last.role == "assistant" else []

    def _answering(self) -> bool:
        return self.turn is not None and self.turn.drained and bool(self.model.messages)

    # ---------------------------------------------------------------- rules

    @initialize()
    def create(self) -> None:
        assert self.store.create_task(TaskSpec(id=self.task_id, prompt=f"the prompt #{self._nonce()}"))
        entry = self.store.inbox(self.task_id)[0]
        self.model.accepted[entry.id] = Accepted(entry.id, "user", {"text": entry.content})
        self.model.inbox.append(entry.id)

    @precondition(lambda self: len(self.model.inbox) < 4)  # keeps producers from crowding out the turns
    @rule(kind=st.sampled_from(["user", "completion"]), reuse=st.none() | st.integers(0, 1000))
    def producer_queues(self, kind: str, reuse: int | None) -> None:
        """A send / a parent's message / a child's completion; ``reuse`` redelivers an accepted id (any kind)."""
        ids = list(self.model.accepted)
        message_id = ids[reuse % len(ids)] if reuse is not None else f"{kind}-{self._nonce()}"
        self._queue_text(kind, message_id)

    @precondition(lambda self: self.turn is None)
    @rule()
    def turn_starts(self) -> None:
        self.turn = self._acquire()

    @precondition(lambda self: self.turn is not None)
    @rule(race=st.sampled_from(["none", "none", "rival", "producer", "successor"]))
    def turn_drains(self, race: str) -> None:
        """A drain; with a race, something happens between its LRANGE of the inbox and its fenced script. A rival
        process that tries to start meanwhile is refused and writes nothing."""
        turn = self.turn
        assert turn is not None
        if race == "rival":
            before = self._snapshot()
            with pytest.raises(LeaseBusy):
                self.store.acquire_lease(self.task_id, holder="rival")
            assert self._snapshot() == before
            race = "none"
        if race == "none" or not self.model.inbox:
            self._drain(turn)
            return
        first = not turn.drained
        ids = list(self.model.inbox)
        real = self.store._drain
        fired: list[str] = []

        def racing_script(keys: list[str], args: list[Any]) -> Any:
            self.store._drain = real
            fired.append(race)
            if race == "producer":
                self._queue_text("user", f"racer-{self._nonce()}")
            else:  # the turn is reaped (lease expired) and a successor takes over and drains first
                self._expire(turn.lease)
                self.turn = self._acquire()
                self._drain(self.turn)
            return real(keys=keys, args=args)

        self.store._drain = racing_script
        try:
            if race == "producer":
                result = self.store.drain(turn.lease, first_drain=first)
                turn.drained = True
                self._check_drain(result, ids, first)
                assert self.model.inbox, "the racing producer's message must stay in the inbox"
            else:
                with pytest.raises(LeaseLost):  # fenced: the successor's drain stands, nothing doubled
                    self.store.drain(turn.lease, first_drain=first)
        finally:
            self.store._drain = real
        assert fired == [race]
        event(f"drain raced by a {race}")

    @precondition(lambda self: self._answering())
    @rule(answer=ANSWERS)
    def model_answers(self, answer: tuple[int, str | None, int] | str) -> None:
        """A text-only answer (ends the turn) or 1-3 tool calls with unique ids, maybe with a (blank) text, of which
        the turn runs the first ``ran`` at once (queueing their results). A refused answer is not stored: the model
        is told why in a user message (no inbox id)."""
        assert self.turn is not None
        turn_number = len(self.model.turn_first_seq) - 1
        if answer == "refused":
            content = [{"text": f"[SYSTEM] refused #{self._nonce()}"}]
            self.store.append_message(self.turn.lease, "user", content)
            self.model.messages.append(Expected("user", content, [], turn_number))
            self.model.refusals.add(("text", content[0]["text"]))
            return
        calls, text, ran = answer
        event(f"answer with {calls} tool calls, {min(ran, calls)} run at once")
        content = []
        if text is not None or not calls:
            content.append({"text": text if text is not None else f"answer #{self._nonce()}"})
        for _ in range(calls):
            tool_id = f"tu{self._nonce()}"
            content.append({"toolUse": {"toolUseId": tool_id, "name": "note", "input": {"text": tool_id}}})
            self.model.tool_calls.append(tool_id)
        message = self.store.append_message(self.turn.lease, "assistant", content)
        self.model.messages.append(Expected("assistant", content, [], turn_number))
        assert (message.seq, message.turn_number) == (len(self.model.messages) - 1, turn_number)
        for tool_id in self._open_calls()[:ran]:
            self._queue_result(tool_id)

    @precondition(lambda self: self.turn is not None and self._open_calls())
    @rule(count=st.integers(1, 3))
    def tools_run(self, count: int) -> None:
        """The turn runs the first ``count`` calls of the last answer and queues their results."""
        for tool_id in self._open_calls()[:count]:
            self._queue_result(tool_id)

    @precondition(lambda self: self.model.tool_calls)
    @rule(pick=st.integers(0, 1000) | st.none(), twice=st.booleans())
    def tool_result_arrives(self, pick: int | None, twice: bool) -> None:
        """A result for any call ever made (a zombie may deliver one late), or (``pick`` None) for a call that was
        never made; maybe queued twice (same id)."""
        calls = self.model.tool_calls
        tool_id = calls[-1 - pick % len(calls)] if pick is not None else f"ghost{self._nonce()}"
        self._queue_result(tool_id)
        if twice:
            self._queue_result(tool_id)

    @precondition(lambda self: self.turn is not None)
    @rule(how=st.sampled_from(["release", "end turn, release", "crash", "end turn, crash"]))
    def turn_stops(self, how: str) -> None:
        """The process exits, after recording the turn's end or not: it releases the lease, or it crashes and the
        lease expires."""
        assert self.turn is not None
        if how.startswith("end turn") and self.model.turn_first_seq:
            number = len(self.model.turn_first_seq) - 1
            self.store.end_turn(self.turn.lease, number, last_response="done")
            assert self.store.turn_meta(self.task_id, number)["ended_at"]
        if how.endswith("crash"):
            self._expire(self.turn.lease)
        else:
            assert self.store.release_lease(self.turn.lease) is True
            assert self.store.get_task(self.task_id).status == "idle"
        self.turn = None
        assert self.store.lease_holder(self.task_id) is None

    @precondition(lambda self: self.zombies)
    @rule(pick=st.integers(0, 1000), write=st.sampled_from(["drain", "append", "end_turn", "renew", "release"]))
    def zombie_writes(self, pick: int, write: str) -> None:
        """A crashed turn wakes up: every write is refused and nothing changes."""
        zombie = self.zombies[pick % len(self.zombies)]
        before = self._snapshot()
        if write == "release":
            assert self.store.release_lease(zombie) is False
        elif write == "drain" and not self.model.inbox:
            assert self.store.drain(zombie, first_drain=False).drained == 0
        else:
            attempts: dict[str, Callable[[], Any]] = {
                "drain": lambda: self.store.drain(zombie, first_drain=False),
                "append": lambda: self.store.append_message(zombie, "assistant", [{"text": "zombie"}]),
                "end_turn": lambda: self.store.end_turn(zombie, 0, last_response="zombie"),
                "renew": lambda: self.store.renew_lease(zombie),
            }
            with pytest.raises(LeaseLost):
                attempts[write]()
        assert self._snapshot() == before

    # ---------------------------------------------------------------- invariants

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        """From Redis alone: each accepted message is in the history once or in the inbox once."""
        messages = history_messages(self.store.load_history(self.task_id))
        inbox = self.store.inbox(self.task_id)
        in_history = Counter(sig for m in messages if m.role == "user" for sig in content_signatures(m.content))
        inbox_ids = Counter(entry.id for entry in inbox)
        stored_ids = Counter(i for m in messages for i in m.inbox_ids)
        for accepted in self.model.accepted.values():
            where = (in_history[accepted.signature], inbox_ids[accepted.id])
            assert where in ((1, 0), (0, 1)), f"{accepted.id}: {where[0]}x in the history, {where[1]}x in the inbox"
            if accepted.kind == "user":
                assert stored_ids[accepted.id] == where[0], accepted.id
        assert set(inbox_ids) <= set(self.model.accepted), "a refused duplicate reached the inbox"
        known = {a.signature for a in self.model.accepted.values()} | self.model.refusals
        assert set(in_history) <= known, f"unknown content in the history: {set(in_history) - known}"
        assert self.client.zcard(self.keys.seen) == len(self.model.accepted)

    @invariant()
    def history_is_as_predicted(self) -> None:
        turns = self.store.load_history(self.task_id)
        messages = history_messages(turns)
        assert [(m.role, m.content, m.inbox_ids, m.turn_number) for m in messages] == [
            (e.role, e.content, e.inbox_ids, e.turn_number) for e in self.model.messages
        ]
        assert [m.seq for m in messages] == list(range(len(messages)))
        assert [(t.turn_number, t.first_seq) for t in turns] == list(enumerate(self.model.turn_first_seq))
        for turn in turns:
            assert [m.message_number for m in turn.messages] == list(range(len(turn.messages)))
        assert [e.id for e in self.store.inbox(self.task_id)] == self.model.inbox

    @invariant()
    def request_is_valid(self) -> None:
        messages = history_messages(self.store.load_history(self.task_id))
        if not messages:
            return
        request = build_request_messages(messages)
        check_request(messages, request)
        stored_results = sum(1 for m in messages for b in m.content if "toolResult" in b)
        if stored_results > sum(kept_results(messages).values()):
            event("a stored tool result was dropped by cleanup")
        if any(b["toolResult"]["content"] == [{"text": INTERRUPTED_TEXT}] for m in request for b in m["content"]
               if "toolResult" in b):
            event("a call got a synthetic error result")
        # After anything but a text-only answer a turn calls the model: the request must end with a user message.
        # Except when all that follows a text-only answer is tool results (late, for answered calls), which
        # cleanup drops: then it ends with that answer. Turns queue their own results fenced (queue_own_result), so
        # only an unfenced producer of tool results (which this machine models) can get there; see the test below.
        answers = [i for i, m in enumerate(messages) if m.role == "assistant"]
        tail = messages[answers[-1] + 1 :] if answers else messages
        only_late_results = bool(answers) and is_turn_ending(messages[answers[-1]]) and not any(
            "toolResult" not in block for m in tail for block in m.content
        )
        if not is_turn_ending(messages[-1]) and not only_late_results:
            assert request[-1]["role"] == "user"

    def teardown(self) -> None:
        self.store.delete_task(self.task_id)


def test_drain_cleanup_and_shaping_under_random_interleavings(redis_client: redis.Redis) -> None:
    run_state_machine_as_test(
        lambda: DrainMachine(redis_client),
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )



def test_a_zombie_turns_late_tool_result_is_refused_and_starts_no_model_call(
    store: TaskStore, turn: TurnRunner
) -> None:
    """Found by the stateful test: a turn whose lease expired while its tool ran queued the result anyway (the write
    was not fenced); the next turn drained it alone and called the model with a request ending with the assistant's
    own final answer (a child then reported twice). A turn's own results are now queued fenced."""
    store.create_task(TaskSpec(id="late", prompt="hello"))
    zombie = store.acquire_lease("late", holder="zombie")
    store.drain(zombie, first_drain=True)
    store.append_message(zombie, "assistant", [{"toolUse": {"toolUseId": "t1", "name": "note", "input": {}}}])
    store.redis.delete(store.keys("late").lease)  # the lease expired while the zombie's tool ran
    assert turn("late").exit_code == EXIT_OK  # the successor: t1 gets an error result, the model answers, turn ends
    answered = len(turn.requests("late"))
    late = tool_result_block("t1", "late result")
    with pytest.raises(LeaseLost):  # the zombie's tool returns: what ToolCalls.queue_result does with its lease
        store.queue_own_result(
            zombie, InboxMessage(id="tr:t1", type="tool_result", content=late, sender="late", tool_use_id="t1")
        )
    assert store.pending_count("late") == 0
    assert turn("late").exit_code == EXIT_OK
    assert turn.requests("late")[answered:] == []


# ================================================================== pure: any history shapes to a valid request

TEXTS = st.sampled_from(["", " ", "\n\t", "hi", "(empty)", "done"]) | st.text(max_size=6)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message | ConverseMessage]:
    """Arbitrary user/assistant sequences: assistant after assistant, empty texts and messages, results for
    unknown, later-answered or already answered calls. Tool-use ids are unique over the conversation, as
    ``unicore.turn.answers.accept_answer`` makes them before an answer is stored."""
    messages: list[Message | ConverseMessage] = []
    calls: list[str] = []
    serial = itertools.count()
    for seq in range(draw(st.integers(0, 10))):
        role = draw(st.sampled_from(["user", "assistant"]))
        content: list[ContentBlock] = []
        for kind in draw(st.lists(st.sampled_from(["text", "other"]), max_size=4)):
            if kind == "text":
                content.append({"text": draw(TEXTS)})
            elif role == "assistant":
                tool_id = f"t{next(serial)}"
                calls.append(tool_id)
                content.append({"toolUse": {"toolUseId": tool_id, "name": "note", "input": {}}})
            else:
                tool_id = draw(st.sampled_from([*calls, "unknown"]))
                error = draw(st.booleans())
                content.append(tool_result_block(tool_id, f"r{next(serial)}", error=error))
        if draw(st.booleans()):
            messages.append(Message(role=role, content=content, seq=seq))
        else:
            messages.append({"role": role, "content": content})
    return messages


@settings(max_examples=PURE_EXAMPLES, deadline=None, database=None)
@given(conversations())
def test_any_history_shapes_to_a_valid_request(messages: list[Message | ConverseMessage]) -> None:
    before = copy.deepcopy(messages)
    request = build_request_messages(messages)
    assert messages == before, "the stored history was rewritten"
    has_content = any(
        "text" in block or "toolUse" in block
        for m in messages
        for block in (m.content if isinstance(m, Message) else m["content"])
    )
    if not has_content:  # nothing but results for calls that were never made: nothing to send
        assert request == []
        return
    check_request(messages, request)
