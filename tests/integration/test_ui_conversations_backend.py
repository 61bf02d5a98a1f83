"""The web UI's shared conversations in local mode (issue 33): ``LocalBackend``'s conversation reads and writes over a
real redis-server (``unicore.store.conversations`` underneath): a post taken once per client id and delivered once,
a closed conversation's refusals in one line (409), participants with their live state, and the SSE feed resumed
from a seq with no gap and no duplicate. No turn runs here (``run_conversation`` is recorded, not run)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store import conversations
from unicore.store.tasks import TaskStore
from unicore_client.ui.backend_protocol import Conflict, NotFound
from unicore_client.ui.local_backend import LocalBackend
from unicore_client.ui.refusals import BadRequest

CLIENT_ID = "5f0c1b2a-0000-4000-8000-000000000001"


class Recorded(LocalBackend):
    """The backend without its background runs: which conversations it would have run."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.ran: list[str] = []

    def run_conversation(self, name: str) -> None:
        self.ran.append(name)


@pytest.fixture
def backend(store: TaskStore, redis_client: redis.Redis, redis_url: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Recorded:
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    for task in ("alice", "bob"):
        store.create_task(TaskSpec(id=task, model="scripted"))  # no prompt: idle until a post reaches it
    conversations.create(store, "plan", title="The plan", created_by="someone")
    for task in ("alice", "bob"):
        conversations.join(store, "plan", "task", task)
    return Recorded(redis_client, redis_url, person="pat")


def test_a_post_is_taken_once_per_client_id_and_delivered_once(backend: Recorded, store: TaskStore):
    first = backend.conversation_post("plan", "Hello <b>team</b>", CLIENT_ID)
    again = backend.conversation_post("plan", "Hello <b>team</b>", CLIENT_ID)
    assert first["posted"] is True and first["seq"] > 0
    assert again == {"posted": False, "seq": None}
    posts = backend.conversation_posts("plan", 0, 500)
    mine = [p for p in posts if p["kind"] == "post"]
    assert [(p["sender_kind"], p["name"], p["text"]) for p in mine] == [("user", "pat", "Hello <b>team</b>")]
    assert [p["kind"] for p in posts] == ["joined", "joined", "joined", "post"]  # alice, bob, then pat on posting
    for task in ("alice", "bob"):
        assert len(store.inbox(task)) == 1  # delivered once, whatever the repeats
    assert backend.ran == ["plan", "plan"]  # a repeat delivers and runs again (its first request may have died)

    info = backend.conversation("plan")
    assert info["status"] == "open" and info["title"] == "The plan" and info["posts"] == first["seq"]
    states = {p["name"]: (p["kind"], p["state"]) for p in info["participants"]}
    assert states == {"alice": ("task", "idle"), "bob": ("task", "idle"), "pat": ("user", "person")}
    alice = next(p for p in info["participants"] if p["name"] == "alice")
    assert alice["task"]["id"] == "alice" and alice["task"]["phase"] == "queued"
    assert backend.conversations()[0] | {"created_at": 0} == {
        "id": "plan", "title": "The plan", "status": "open", "created_by": "someone", "created_at": 0,
        "posts": first["seq"], "agents": ["alice", "bob"], "people": ["pat"]}
    assert backend.task("alice")["conversations"] == ["plan"]


def test_a_closed_conversation_refuses_posts_and_controls_in_one_line(backend: Recorded):
    assert backend.conversation_control("plan", "pause") == {"status": "paused", "changed": True}
    kept = backend.conversation_post("plan", "kept while paused", CLIENT_ID)
    assert kept["posted"] is True  # a paused conversation keeps posts (delivered when resumed)
    assert backend.conversation_control("plan", "close") == {"status": "closed", "changed": True}
    assert backend.conversation_control("plan", "close") == {"status": "closed", "changed": False}
    with pytest.raises(Conflict) as refused:
        backend.conversation_post("plan", "too late", "5f0c1b2a-0000-4000-8000-000000000002")
    assert refused.value.status == 409
    assert refused.value.message == "conversation plan is closed: it takes no more posts"
    assert backend.conversation_post("plan", "kept while paused", CLIENT_ID) == {"posted": False, "seq": None}
    with pytest.raises(Conflict, match="^conversation plan is closed: it cannot resume$"):
        backend.conversation_control("plan", "resume")
    assert not [p for p in backend.conversation_posts("plan", 0, 500) if p["text"] == "too late"]
    with pytest.raises(NotFound, match="no conversation 'nope'"):
        backend.conversation_post("nope", "hi", CLIENT_ID)
    with pytest.raises(BadRequest, match="not a conversation name"):
        backend.conversation("Not A Name")
    with pytest.raises(BadRequest, match="^id: 8-64"):
        backend.conversation_post("plan", "hi", "<b>")


def test_the_feed_sends_posts_in_order_then_resumes_after_a_seq(backend: Recorded, store: TaskStore):
    for n in range(3):
        backend.conversation_post("plan", f"post {n}", f"5f0c1b2a-0000-4000-8000-00000000001{n}")
    stop = threading.Event()
    feed = backend.conversation_events("plan", 0, wait_seconds=0.05, stop=stop)
    events = [next(feed) for _ in range(7)]  # 3 joins, 3 posts, then the state
    assert [name for _, name, _ in events] == ["post"] * 6 + ["conversation"]
    seqs = [data["seq"] for _, name, data in events if name == "post"]
    assert seqs == list(range(1, 7)) and [event_id for event_id, _, _ in events[:6]] == [str(s) for s in seqs]
    assert events[6][0] == "6" and events[6][2]["posts"] == 6
    assert next(feed)[1] == ""  # nothing new: a keepalive
    conversations.post(store, "plan", "note:x", kind="note", sender_kind="system", sender="", text="a note")
    later = next(feed)
    while later[1] != "post":
        later = next(feed)
    assert later[0] == "7" and later[2]["kind"] == "note" and later[2]["name"] == ""
    resumed = backend.conversation_events("plan", 5, wait_seconds=0.05, stop=stop)
    assert [next(resumed)[2]["seq"] for _ in range(2)] == [6, 7]  # after seq 5: no gap, no duplicate
    stop.set()
    with pytest.raises(NotFound):
        next(backend.conversation_events("gone", 0, stop=stop))
