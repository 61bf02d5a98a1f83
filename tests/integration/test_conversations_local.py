"""Shared conversations in local mode (issue 33): two agents and a person, through ``unicore conv`` and ``unicore
run --conversation`` as subprocesses (real redis-server, scripted model), crashes injected with UNICORE_FAULTS, and the
store's delivery under crashes and concurrent deliverers.

Exactly once is checked on what is stored: every post id once in the conversation, and every post delivered to a
task at most once (its inbox message id, ``schema.conversation_message_id``, counted over the task's history and
its inbox)."""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from unicore import conversations as rules
from unicore.api.schema import TaskSpec, conversation_message_id
from unicore.launch.local import LocalSupervisor
from unicore.store import conversations, suspension
from unicore.store.keys import FAULTS_LOG
from unicore.store.tasks import TaskStore

from tests.unicore_cli import unicore

ROOM = "room"
AGENTS = ("writer", "critic")
READY = {"writer": "Writer here, ready.", "critic": "Critic here, ready."}


# ---- helpers


def write_script(tmp_path: Path, steps: dict[str, list[Any]]) -> str:
    """A scripted model file: each agent's first step says it is ready, then ``steps``; plain strings are texts."""
    tasks = {name: [{"text": READY[name]}, *({"text": s} if isinstance(s, str) else s for s in steps.get(name, []))]
             for name in AGENTS}
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump({"default": "Nothing more from me.", "tasks": tasks}))
    return str(path)


def open_room(cli_env: dict[str, str], tmp_path: Path, steps: dict[str, list[Any]], *,
              handoff_limit: int | None = None) -> None:
    """``conv create room``, then the writer and the critic run their first turn in it."""
    limit = ["--handoff-limit", str(handoff_limit)] if handoff_limit is not None else []
    create = unicore("conv", "create", ROOM, "--title", "Writers' room", *limit, env=cli_env)
    assert create.returncode == 0, create.stderr
    path = write_script(tmp_path, steps)
    for name, prompt in (("writer", "You write taglines."), ("critic", "You review taglines.")):
        run = unicore("run", "-q", "--name", name, "--conversation", ROOM, "--model", f"scripted:{path}",
                      "--no-summary", prompt, env=cli_env)
        assert run.returncode == 0, run.stderr
        assert READY[name] in run.stdout


def post(cli_env: dict[str, str], text: str, post_id: str, *options: str,
         env: dict[str, str] | None = None) -> Any:
    done = unicore("conv", "post", ROOM, text, "--id", post_id, "--timeout", "240", *options, env=env or cli_env,
                   timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def posts(store: TaskStore, after: int = 0) -> list[rules.Post]:
    return conversations.posts(store, ROOM, after=after)


def seq_of(store: TaskStore, post_id: str) -> int:
    [item] = [p for p in posts(store) if p.id == post_id]
    return item.seq


def received(store: TaskStore, task_id: str) -> list[str]:
    """The inbox message ids ``task_id`` was given, in order: drained into its history, then still queued."""
    ids = [i for turn in store.load_history(task_id) for m in turn.messages for i in m.inbox_ids]
    return ids + [m.id for m in store.inbox(task_id)]


def deliveries(store: TaskStore, task_id: str, conversation: str = ROOM) -> list[str]:
    """The post ids of ``conversation`` delivered to ``task_id``, in order, each as often as it was delivered; an
    inbox message of the conversation that is no post of it fails the test."""
    by_message = {conversation_message_id(conversation, p.id, task_id): p.id
                  for p in conversations.posts(store, conversation)}
    got = [i for i in received(store, task_id) if i.startswith("conv:")]
    assert set(got) <= set(by_message), f"{task_id} got conversation messages that are no post"
    return [by_message[i] for i in got]


def check_exactly_once(store: TaskStore, tasks: tuple[str, ...] = AGENTS, conversation: str = ROOM) -> None:
    """Every post once, in order; every delivery to a task at most once."""
    items = conversations.posts(store, conversation)
    assert [p.seq for p in items] == list(range(1, len(items) + 1))
    assert len({p.id for p in items}) == len(items)
    for task_id in tasks:
        twice = [i for i, n in collections.Counter(deliveries(store, task_id, conversation)).items() if n > 1]
        assert twice == [], f"{task_id} got posts more than once: {twice}"


def answers(store: TaskStore, sender: str, after: int = 0) -> list[str]:
    return [p.text for p in posts(store, after) if p.kind == "answer" and p.sender == sender]


def answer_id(store: TaskStore, sender: str, text: str) -> str:
    [item] = [p for p in posts(store) if p.kind == "answer" and p.sender == sender and p.text == text]
    return item.id


# ---- two agents and a person


def test_a_persons_post_reaches_both_agents_and_a_mention_only_the_one_mentioned(cli_env, store, tmp_path):
    open_room(cli_env, tmp_path, {"writer": ["Three taglines from the writer.", "The writer again."],
                                  "critic": ["The critic likes the second one.", "The critic picks: the second."]})
    first = post(cli_env, "Ideas for a tagline, both of you.", "p1")
    p1 = seq_of(store, "user:p1")
    assert answers(store, "writer", p1) == ["Three taglines from the writer."]
    assert answers(store, "critic", p1) == ["The critic likes the second one."]
    assert len(posts(store, p1)) == 2  # the two answers, nothing else (no mention: no hand-off)
    assert "Three taglines from the writer." in first.stdout and "The critic likes the second one." in first.stdout
    for name in AGENTS:
        assert deliveries(store, name).count("user:p1") == 1

    second = post(cli_env, "@critic which one is best?", "p2")
    p2 = seq_of(store, "user:p2")
    assert [(p.kind, p.sender, p.text) for p in posts(store, p2)] == [
        ("answer", "critic", "The critic picks: the second.")]
    assert "The critic picks: the second." in second.stdout and "writer" not in second.stdout
    assert "user:p2" not in deliveries(store, "writer") and deliveries(store, "critic").count("user:p2") == 1
    assert store.get_task("writer").turns == 2 and store.get_task("critic").turns == 3

    again = unicore("conv", "post", ROOM, "@critic which one is best?", "--id", "p2", env=cli_env)
    assert again.returncode == 0 and "was posted before" in again.stderr
    assert len(posts(store, p2)) == 1
    check_exactly_once(store)

    shown = unicore("conv", "show", ROOM, env=cli_env)
    assert shown.returncode == 0 and "Writers' room [open]" in shown.stdout
    assert "participants: " in shown.stdout and "writer (agent)" in shown.stdout


# ---- crashes


@pytest.mark.parametrize("step", ["after end turn", "after notify", "after conversation post"])
def test_the_writers_answer_is_posted_and_handed_on_once_when_its_turn_is_killed_after_it_ended(
        cli_env, store, tmp_path, step):
    """The writer's turn SIGKILLed once right after it ended, after its report, or after its answer was posted and
    before it was delivered: the supervisor's catch-up after the kill posts it (or finds it posted) and delivers it,
    once."""
    draft = "Draft: UniCore runs your agents. @critic, what do you think?"
    open_room(cli_env, tmp_path, {"writer": [draft], "critic": ["Fine by me."]})
    killing = {**cli_env, "UNICORE_FAULTS": f"kill-once@writer:{step}"}
    done = post(cli_env, "@writer write a one-line tagline for UniCore.", "t1", env=killing)
    assert store.redis.lrange(FAULTS_LOG, 0, -1) == [f"writer#1:{step}"]  # the turn was killed there, once
    assert "turn CRASHED: writer" in done.stderr
    assert done.stderr.count("turn started: writer") == 1  # killed once its turn was done: no process ran it again
    [writer_turn] = [t for t in store.load_history("writer") if t.turn_number == 1]
    assert writer_turn.ended_at is not None
    assert answers(store, "writer") == [READY["writer"], draft]  # posted once, by the supervisor's catch-up
    assert answer_id(store, "writer", draft) == "answer:writer:1"
    assert deliveries(store, "critic").count("answer:writer:1") == 1
    assert answers(store, "critic", seq_of(store, "user:t1")) == ["Fine by me."]
    assert draft in done.stdout and "Fine by me." in done.stdout
    check_exactly_once(store)


def test_every_turn_killed_at_every_step_loses_and_repeats_no_post(cli_env, store, tmp_path):
    """kill-once: each agent's turn is SIGKILLed once at each named step it reaches (after its model call, after its
    answer is stored, after the turn ended, after the report, ...), so the answer is posted and delivered by
    whichever process gets there: the turn's end, the supervisor's catch-up after the kill, or the next turn's
    start. Every post is stored once and reaches each recipient once."""
    draft = "Draft: agents that share a room. @critic?"
    open_room(cli_env, tmp_path, {"writer": [draft], "critic": ["Approved, @writer."]})
    conversations.join(store, ROOM, "user", "ann")
    conversations.post(store, ROOM, "user:k1", kind="post", sender_kind="user", sender="ann", text="@writer go")
    conversations.deliver(store, ROOM)
    env = {"UNICORE_FAULTS": "kill-once", "UNICORE_HOME": cli_env["UNICORE_HOME"]}
    supervisor = LocalSupervisor(store.redis, cli_env["REDIS_URL"], env=env, scan_seconds=0.2,
                                 max_crash_restarts=100, on_event=lambda _text: None)
    report = supervisor.run_until_settled(list(AGENTS), timeout=400)
    assert report.settled and not report.failures, report
    kills = store.redis.lrange(FAULTS_LOG, 0, -1)
    for name in AGENTS:  # the answer's turn was killed before, at and after storing it, and after its end
        assert {f"{name}#1:{step}" for step in ("after model call", "after answer", "after end turn")} <= set(kills)
    k1 = seq_of(store, "user:k1")
    assert [(p.kind, p.sender, p.text) for p in posts(store, k1)] == [
        ("answer", "writer", draft), ("answer", "critic", "Approved, @writer."),
        ("answer", "writer", "Nothing more from me.")]  # the critic's hand-off back, answered once
    assert deliveries(store, "writer") == ["user:k1", "answer:critic:1"]
    assert deliveries(store, "critic") == ["answer:writer:1"]
    assert conversations.read_meta(store, ROOM).handoffs == 2
    check_exactly_once(store)


class Crash(BaseException):
    """A process killed at this point (nothing after it runs; not an Exception, so nothing catches it)."""


def room_in_store(store: TaskStore, agents: tuple[str, ...], limit: int = rules.DEFAULT_HANDOFF_LIMIT) -> None:
    for name in agents:
        store.create_task(TaskSpec(id=name, prompt="hi"))
    assert conversations.create(store, ROOM, title="t", created_by="ann", handoff_limit=limit)
    conversations.join(store, ROOM, "user", "ann")
    for name in agents:
        conversations.join(store, ROOM, "task", name)


def queued_only(store: TaskStore, task_id: str) -> list[str]:
    """Post ids queued into ``task_id``'s inbox (nothing drains it here)."""
    by_message = {conversation_message_id(ROOM, p.id, task_id): p.id for p in posts(store)}
    return [by_message[m.id] for m in store.inbox(task_id) if m.id.startswith("conv:")]  # not the prompt


THREE = ("writer", "critic", "editor")
# (post id, sender, kind, text): a person's post to all, two hand-offs, one answer to no one
SCENE = [("user:a", "ann", "post", "All of you: a tagline?"),
         ("answer:writer:1", "writer", "answer", "Here it is, @critic @editor."),
         ("answer:critic:1", "critic", "answer", "Too long, @writer."),
         ("answer:editor:1", "editor", "answer", "Fine.")]
EXPECTED = {"writer": ["user:a", "answer:critic:1"], "critic": ["user:a", "answer:writer:1"],
            "editor": ["user:a", "answer:writer:1"]}
QUEUES = sum(len(v) for v in EXPECTED.values())  # inbox messages the scene makes: 6


def post_scene(store: TaskStore) -> None:
    """The scene's posts, posted but not delivered: what a publisher killed between its post and its delivery
    leaves behind."""
    for post_id, sender, kind, text in SCENE:
        assert conversations.post(store, ROOM, post_id, kind=kind, sender_kind="user" if sender == "ann" else "task",
                                  sender=sender, text=text) > 0


@pytest.mark.parametrize("crash_at", range(QUEUES))
def test_a_deliverer_killed_in_the_middle_leaves_the_rest_to_the_next_one(redis_client, crash_at):
    """Delivery killed after its ``crash_at``-th inbox message (before the recipient's activation and the post's
    compare-and-set): the next deliverer (the supervisor's catch-up, a later post) queues the rest, each once, and
    counts each hand-off once."""
    store = TaskStore(redis_client)
    room_in_store(store, THREE)
    post_scene(store)
    assert conversations.read_meta(store, ROOM).delivered == 0  # posted, nothing delivered yet

    crashing = TaskStore(redis_client)
    calls = {"activations": 0}
    real_activate = crashing.activate

    def activate(task_id: str, reason: str, **kwargs: Any) -> str:
        calls["activations"] += 1
        if calls["activations"] > crash_at:
            raise Crash
        return real_activate(task_id, reason, **kwargs)

    crashing.activate = activate  # type: ignore[method-assign]
    with pytest.raises(Crash):
        conversations.deliver(crashing, ROOM)
    assert sum(len(queued_only(store, t)) for t in THREE) == crash_at + 1  # the crash was after a queue, mid-way

    conversations.deliver(store, ROOM)
    assert {t: queued_only(store, t) for t in THREE} == EXPECTED
    meta = conversations.read_meta(store, ROOM)
    assert (meta.delivered, meta.seq, meta.handoffs) == (meta.seq, len(SCENE) + len(THREE) + 1, 2)
    conversations.deliver(store, ROOM)  # again: nothing more
    assert {t: queued_only(store, t) for t in THREE} == EXPECTED


def test_a_post_already_posted_is_delivered_by_the_senders_catch_up(redis_client):
    """A turn killed between posting its answer and delivering it: the supervisor's catch-up for that task finds
    the answer posted (same id: not again) and delivers it."""
    store = TaskStore(redis_client)
    room_in_store(store, ("writer", "critic"))
    conversations.post(store, ROOM, "user:a", kind="post", sender_kind="user", sender="ann", text="@writer hi")
    conversations.deliver(store, ROOM)
    conversations.queue_outbox(store, "writer", ROOM, "post:writer:t1", "A question for @critic.")
    conversations.post(store, ROOM, "post:writer:t1", kind="post", sender_kind="task", sender="writer",
                       text="A question for @critic.")  # taken from the outbox, then killed before the delivery
    assert queued_only(store, "critic") == []
    assert conversations.catch_up(store, "writer") == [ROOM]
    assert queued_only(store, "critic") == ["post:writer:t1"]
    assert conversations.outbox(store, "writer") == []
    assert [p.id for p in posts(store)].count("post:writer:t1") == 1
    conversations.catch_up(store, "writer")
    assert queued_only(store, "critic") == ["post:writer:t1"]


@pytest.mark.parametrize("what", ["outbox", "answer"])
def test_a_publisher_killed_between_posting_and_delivering_leaves_it_to_the_next_catch_up(
        redis_client, monkeypatch, what):
    """``publish`` killed at "after conversation post" (the post taken, its delivery not run): the next catch-up
    of the task (the supervisor's after the process died, the next turn's start) delivers it, even though the
    turn that made it never ended (a post_message in a turn killed there)."""
    store = TaskStore(redis_client)
    room_in_store(store, ("writer", "critic"))
    text = "A question for @critic."
    if what == "outbox":
        conversations.queue_outbox(store, "writer", ROOM, "post:writer:t1", text)
        post_id, kwargs = "post:writer:t1", {}
    else:
        post_id, kwargs = "answer:writer:0", {"answer": (0, text, time.time())}

    def killed(step: str) -> None:
        assert step == "after conversation post"
        raise Crash

    monkeypatch.setattr(conversations, "fault_point", killed)
    with pytest.raises(Crash):
        conversations.publish(store, "writer", **kwargs)
    assert [p.id for p in posts(store)].count(post_id) == 1 and queued_only(store, "critic") == []
    monkeypatch.undo()

    conversations.publish(store, "writer")  # a catch-up that knows of no answer (the turn never ended)
    conversations.publish(store, "writer", **kwargs)  # or one that does
    assert queued_only(store, "critic") == [post_id]
    assert [p.id for p in posts(store)].count(post_id) == 1
    assert conversations.outbox(store, "writer") == []


def test_deliverers_running_at_once_queue_each_post_once_and_count_the_limit_once(redis_client):
    store = TaskStore(redis_client)
    room_in_store(store, ("writer", "critic"), limit=2)
    conversations.post(store, ROOM, "user:a", kind="post", sender_kind="user", sender="ann", text="@writer go")
    for n in range(1, 7):  # six hand-offs asked for, two allowed
        sender, other = ("writer", "critic") if n % 2 else ("critic", "writer")
        conversations.post(store, ROOM, f"answer:{sender}:{n}", kind="answer", sender_kind="task", sender=sender,
                           text=f"Round {n}, @{other}.")
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            barrier.wait()
            conversations.deliver(TaskStore(redis_client), ROOM)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert queued_only(store, "writer") == ["user:a", "answer:critic:2"]
    assert queued_only(store, "critic") == ["answer:writer:1"]
    notes = [p for p in posts(store) if p.kind == "note"]
    assert [n.text for n in notes] == [rules.limit_note(2)]
    meta = conversations.read_meta(store, ROOM)
    assert meta.handoffs == 2 and meta.delivered == meta.seq


# ---- the hand-off limit


def test_the_hand_off_limit_stops_a_ping_pong_and_a_persons_post_starts_a_new_round(cli_env, store, tmp_path):
    writer = [f"Writer, draft {n}: over to you, @critic." for n in range(1, 6)]
    critic = [f"Critic, review {n}: not yet, @writer." for n in range(1, 6)]
    open_room(cli_env, tmp_path, {"writer": writer, "critic": critic}, handoff_limit=2)

    first = post(cli_env, "@writer write a tagline.", "r1")
    r1 = seq_of(store, "user:r1")
    assert [(p.kind, p.sender, p.text) for p in posts(store, r1)] == [
        ("answer", "writer", writer[0]),  # hand-off 1
        ("answer", "critic", critic[0]),  # hand-off 2
        ("answer", "writer", writer[1]),  # held back: the limit
        ("note", "", rules.limit_note(2))]
    assert rules.limit_note(2) in first.stdout
    assert deliveries(store, "critic") == ["answer:writer:1"]  # the writer's second draft reached no one
    assert deliveries(store, "writer") == ["user:r1", "answer:critic:1"]
    assert conversations.read_meta(store, ROOM).handoffs == 2

    second = post(cli_env, "@critic what now?", "r2")
    r2 = seq_of(store, "user:r2")
    assert [(p.kind, p.sender, p.text) for p in posts(store, r2)] == [
        ("answer", "critic", critic[1]), ("answer", "writer", writer[2]), ("answer", "critic", critic[2]),
        ("note", "", rules.limit_note(2))]
    assert critic[1] in second.stdout
    assert len([p for p in posts(store) if p.kind == "note"]) == 2  # one per round
    assert conversations.read_meta(store, ROOM).handoffs == 2
    check_exactly_once(store)


# ---- pause, close, leave, suspend


def test_pause_keeps_posts_until_resume_and_close_refuses_posts(cli_env, store, tmp_path):
    open_room(cli_env, tmp_path, {"writer": ["The writer read the paused post."],
                                  "critic": ["The critic read the paused post."]})
    pause = unicore("conv", "pause", ROOM, env=cli_env)
    assert pause.returncode == 0 and "is now paused" in pause.stdout
    post(cli_env, "While paused: ideas?", "w1")
    w1 = seq_of(store, "user:w1")  # kept
    assert posts(store, w1) == [] and all("user:w1" not in deliveries(store, t) for t in AGENTS)
    assert conversations.read_meta(store, ROOM).delivered < w1

    resume = unicore("conv", "resume", ROOM, env=cli_env, timeout=300)
    assert resume.returncode == 0, resume.stderr
    assert "is now open" in resume.stdout
    for name in AGENTS:
        assert deliveries(store, name) == ["user:w1"]
    # resumed, the tasks the waiting post reached run: their answers follow
    assert answers(store, "writer", w1) == ["The writer read the paused post."]
    assert answers(store, "critic", w1) == ["The critic read the paused post."]
    assert "The writer read the paused post." in resume.stdout

    close = unicore("conv", "close", ROOM, env=cli_env)
    assert close.returncode == 0 and "is now closed" in close.stdout
    refused = unicore("conv", "post", ROOM, "anyone?", env=cli_env)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "conversation room is closed" in refused.stderr
    assert not any(p.text == "anyone?" for p in posts(store))
    assert conversations.read_meta(store, ROOM).status == "closed"
    check_exactly_once(store)


def test_a_task_that_left_gets_nothing_and_a_suspended_one_gets_its_post_when_resumed(cli_env, store, tmp_path):
    open_room(cli_env, tmp_path, {"writer": ["Ideas from the writer, @critic?", "The writer is back."],
                                  "critic": ["The critic should not be asked."]})
    leave = unicore("conv", "leave", ROOM, "critic", env=cli_env)
    assert leave.returncode == 0 and "critic left" in leave.stdout
    post(cli_env, "Everyone: ideas?", "l1")
    l1 = seq_of(store, "user:l1")
    assert answers(store, "writer", l1) == ["Ideas from the writer, @critic?"]
    assert answers(store, "critic", l1) == []
    assert deliveries(store, "critic") == [] and store.get_task("critic").turns == 1  # no post, no turn
    assert conversations.task_conversations(store, "critic") == []

    suspend = unicore("suspend", "writer", env=cli_env)
    assert suspend.returncode == 0, suspend.stderr
    held = post(cli_env, "@writer one more, please.", "s1")
    s1 = seq_of(store, "user:s1")
    assert posts(store, s1) == [] and "The writer is back." not in held.stdout
    assert deliveries(store, "writer").count("user:s1") == 1  # queued while it is suspended
    assert suspension.is_suspended(store, "writer") and store.get_task("writer").turns == 2

    resume = unicore("resume", "writer", env=cli_env, timeout=300)
    assert resume.returncode == 0, resume.stderr
    assert answers(store, "writer", s1) == ["The writer is back."]
    assert deliveries(store, "writer").count("user:s1") == 1
    check_exactly_once(store)


# ---- post_message during a turn


@pytest.mark.parametrize("faults", ["", "kill-once@writer:after conversation post"])
def test_post_message_during_a_turn_reaches_the_agent_it_mentions(cli_env, store, tmp_path, faults):
    """Also when the writer's turn is killed inside post_message, right after the post was taken and before it was
    delivered: the supervisor's catch-up delivers it though the turn has not ended (the retried turn is told the
    call was interrupted; it is not run again)."""
    ask = "Quick question @critic: short or long?"
    open_room(cli_env, tmp_path, {
        "writer": [{"tool_use": [{"name": "post_message", "input": {"text": ask}}]}, "Draft done."],
        "critic": ["Short is better."]})
    done = post(cli_env, "@writer write a tagline.", "m1", env={**cli_env, "UNICORE_FAULTS": faults})
    assert store.redis.lrange(FAULTS_LOG, 0, -1) == (["writer#1:after conversation post"] if faults else [])
    m1 = seq_of(store, "user:m1")
    [asked] = [p for p in posts(store, m1) if p.kind == "post"]
    assert (asked.sender_kind, asked.sender, asked.text) == ("task", "writer", ask)
    assert asked.id.startswith("post:writer:")
    assert deliveries(store, "critic") == [asked.id]
    assert answers(store, "critic", m1) == ["Short is better."]
    assert answers(store, "writer", m1) == ["Draft done."]  # no mention: reached no one
    assert "Short is better." in done.stdout and ask in done.stdout
    results = [b["toolResult"]["content"][0]["text"] for turn in store.load_history("writer") for m in turn.messages
               for b in m.content if "toolResult" in b]
    # killed: no result was stored (the retried turn's model is shown the call as interrupted), and it never ran again
    assert results == ([] if faults else ["Posted to conversation room."])
    assert conversations.outbox(store, "writer") == []
    check_exactly_once(store)


# ---- bad input


def test_bad_input_is_a_one_line_error(cli_env, store):
    bad_name = unicore("conv", "create", "BAD_NAME", env=cli_env)
    assert bad_name.returncode == 2 and bad_name.stderr.count("\n") == 1, bad_name.stderr
    assert "not a conversation name" in bad_name.stderr and "Traceback" not in bad_name.stderr
    newline = unicore("conv", "create", "room\n", env=cli_env)
    assert newline.returncode == 2 and "not a conversation name" in newline.stderr
    assert unicore("conv", "create", ROOM, env=cli_env).returncode == 0
    reserved = unicore("conv", "post", ROOM, "hi", "--id", "completion:x", env=cli_env)
    assert reserved.returncode == 2 and reserved.stderr.count("\n") == 1, reserved.stderr
    assert "only the runtime's own messages use" in reserved.stderr and "Traceback" not in reserved.stderr
    unknown = unicore("conv", "post", "nowhere", "hi", env=cli_env)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert "no conversation 'nowhere'" in unknown.stderr and "Traceback" not in unknown.stderr
    no_task = unicore("conv", "join", ROOM, "nobody", env=cli_env)
    assert no_task.returncode == 2 and no_task.stderr.count("\n") == 1 and "no task nobody" in no_task.stderr
    no_room = unicore("run", "--name", "x", "--conversation", "nowhere", "hi", env=cli_env)
    assert no_room.returncode == 1 and no_room.stderr.count("\n") == 1 and "no conversation" in no_room.stderr
    assert not store.exists("x")  # checked before the task was created


def test_an_agents_conversations_are_joined_by_its_tasks_on_creation(cli_env, store, tmp_path):
    """An Agent that names conversations (spec.conversations) puts each task that runs as it into them before its
    first turn (its first answer is posted there); one that does not exist is skipped and the task runs all the same."""
    assert unicore("conv", "create", ROOM, env=cli_env).returncode == 0
    agent = tmp_path / "agent.yaml"
    agent.write_text(yaml.safe_dump({
        "apiVersion": "unicore.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "scribe"},
        "spec": {"model": "scripted", "conversations": [ROOM, "no-such-room"]}}))
    assert unicore("agents", "apply", "-f", str(agent), env=cli_env).returncode == 0
    script = tmp_path / "scribe.yaml"
    script.write_text(yaml.safe_dump({"default": "Scribe, ready."}))
    run = unicore("run", "-q", "--agent", "scribe", "--name", "scribe-1", "--script", str(script), "Hello.",
                  env=cli_env)
    assert run.returncode == 0, run.stderr
    assert ROOM in conversations.task_conversations(store, "scribe-1")
    assert answers(store, "scribe-1") == ["Scribe, ready."]
