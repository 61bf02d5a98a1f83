"""The web UI's shared conversations in local mode (issue 33): ``LocalBackend``'s conversation reads and writes over a
real redis-server (``unicore.store.conversations`` underneath): a post taken once per client id and delivered once,
a closed conversation's refusals in one line (409), participants with their live state, and the SSE feed resumed
from a seq with no gap and no duplicate; a conversation created with tasks (the person takes part; a second create
keeps it as it is), a task's join and leave, bad input and a closed conversation refused in one line, and the two
routes through the real HTTP server. No turn runs here (``run_conversation`` is recorded, not run)."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store import conversations
from unicore.store.tasks import TaskStore
from unicore_client.ui.backend_protocol import Conflict, NotFound
from unicore_client.ui.local_backend import LocalBackend
from unicore_client.ui.refusals import BadRequest
from unicore_client.ui.server import COOKIE, UIServer

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


# ------------------------------------------------------------------------------------------------ create, join, leave


def test_create_with_tasks_makes_the_person_and_the_tasks_take_part_and_a_second_create_changes_nothing(
        backend: Recorded, store: TaskStore):
    made = backend.conversation_create("room", "The <b>room</b> \u202e", ["alice", "bob", "alice"], 2)
    assert made == {"id": "room", "created": True}
    meta = conversations.read_meta(store, "room")
    assert (meta.title, meta.created_by, meta.handoff_limit, meta.status) == (
        "The <b>room</b> \u202e", "pat", 2, "open")
    members = conversations.members(store, "room")
    assert sorted((m.kind, m.id, m.left) for m in members) == [
        ("task", "alice", False), ("task", "bob", False), ("user", "pat", False)]
    posts = conversations.posts(store, "room")
    assert [(p.kind, p.sender) for p in posts] == [("joined", "pat"), ("joined", "alice"), ("joined", "bob")]

    again = backend.conversation_create("room", "Another title", ["alice", "bob"], 7)
    assert again == {"id": "room", "created": False}  # not an error, and nothing changed
    assert conversations.read_meta(store, "room") == meta
    assert conversations.members(store, "room") == members and conversations.posts(store, "room") == posts
    assert backend.ran == []  # joins are delivered to no one: nothing runs

    untitled = backend.conversation_create("bare", "", [], 4)  # no title: its name, as unicore conv create
    assert untitled == {"id": "bare", "created": True}
    assert conversations.read_meta(store, "bare").title == "bare"
    assert [(m.kind, m.id) for m in conversations.members(store, "bare")] == [("user", "pat")]
    listed = {c["id"]: c for c in backend.conversations()}
    assert listed["room"]["agents"] == ["alice", "bob"] and listed["room"]["people"] == ["pat"]
    assert backend.task("alice")["conversations"] == ["plan", "room"]


def test_a_task_joins_and_leaves_once_each(backend: Recorded, store: TaskStore):
    store.create_task(TaskSpec(id="carol", model="scripted"))
    assert backend.conversation_member("plan", "carol", "join") == {"changed": True}
    assert backend.conversation_member("plan", "carol", "join") == {"changed": False}  # takes part already
    carol = next(p for p in backend.conversation("plan")["participants"] if p["id"] == "carol")
    assert (carol["kind"], carol["state"]) == ("task", "idle")
    assert backend.conversation_member("plan", "carol", "leave") == {"changed": True}
    assert backend.conversation_member("plan", "carol", "leave") == {"changed": False}  # did not take part
    assert [p["text"] for p in backend.conversation_posts("plan", 2, 500)] == ["carol joined", "carol left"]
    assert next(p for p in backend.conversation("plan")["participants"] if p["id"] == "carol")["state"] == "left"
    assert backend.conversation_member("plan", "never-was", "leave") == {"changed": False}  # no task: nothing to do
    assert backend.conversation_member("plan", "carol", "join") == {"changed": True}  # back again
    assert conversations.task_conversations(store, "carol") == ["plan"]


@pytest.mark.parametrize(("call", "error", "needle"), [
    (lambda b: b.conversation_create("Not A Name", "", [], 4), BadRequest, "^not a conversation name: 'Not A Name'"),
    (lambda b: b.conversation_create("room\n", "", [], 4), BadRequest, "^not a conversation name"),
    (lambda b: b.conversation_create("room", "x" * 257, [], 4), BadRequest, "^the title is 257 characters"),
    (lambda b: b.conversation_create("room", "", [], 101), BadRequest, "^handoff_limit: a whole number from 0 to 100"),
    (lambda b: b.conversation_create("room", "", [f"t{n}" for n in range(65)], 4), BadRequest, "^65 tasks: at most 64"),
    (lambda b: b.conversation_create("room", "", ["Alice!"], 4), BadRequest, "^invalid task id 'Alice!'"),
    (lambda b: b.conversation_create("room", "", ["alice", "ghost", "gone"], 4), NotFound,
     r"^no task ghost, gone: run it first \(unicore run \.\.\. --name NAME, or New task\)$"),
    (lambda b: b.conversation_member("Bad Name", "alice", "join"), BadRequest, "^not a conversation name"),
    (lambda b: b.conversation_member("plan", "alice", "kick"), BadRequest, "^action 'kick': join or leave$"),
    (lambda b: b.conversation_member("plan", "ghost", "join"), NotFound, "^no task ghost: run it first"),
    (lambda b: b.conversation_member("plan", "a b", "leave"), BadRequest, "^invalid task id 'a b'"),
    (lambda b: b.conversation_member("nope", "alice", "join"), NotFound, "^no conversation 'nope'$"),
], ids=["name", "name-newline", "title", "limit", "too-many", "task-id", "no-task", "member-name", "action",
        "member-no-task", "member-task-id", "no-conversation"])
def test_bad_input_is_refused_in_one_line_and_changes_nothing(backend: Recorded, store: TaskStore, call, error,
                                                              needle: str):
    before = (conversations.list_conversations(store), conversations.posts(store, "plan"))
    with pytest.raises(error, match=needle) as refused:
        call(backend)
    assert "\n" not in str(refused.value)
    assert (conversations.list_conversations(store), conversations.posts(store, "plan")) == before
    assert not store.exists("ghost")  # a task named that does not exist is not made by joining it


def test_a_closed_conversation_takes_no_join_or_leave_409(backend: Recorded, store: TaskStore):
    store.create_task(TaskSpec(id="carol", model="scripted"))
    backend.conversation_control("plan", "close")
    with pytest.raises(Conflict, match="^conversation plan is closed: carol cannot join$") as refused:
        backend.conversation_member("plan", "carol", "join")
    assert refused.value.status == 409
    with pytest.raises(Conflict, match="^conversation plan is closed: alice cannot leave$"):
        backend.conversation_member("plan", "alice", "leave")
    with pytest.raises(Conflict, match="^conversation plan is closed: it takes no new participants$"):
        backend.conversation_create("plan", "", ["carol"], 4)
    assert sorted(m.id for m in conversations.members(store, "plan") if not m.left) == ["alice", "bob"]


# ------------------------------------------------------------------------------------------------ over HTTP


@pytest.fixture
def server(backend: Recorded) -> Iterator[UIServer]:
    running = UIServer(backend)
    thread = threading.Thread(target=running.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()


def call(server: UIServer, path: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, object]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    sent = {"Host": f"127.0.0.1:{server.port}", "Cookie": f"{COOKIE.format(port=server.port)}={server.token}",
            "X-CSRF-Token": server.csrf, **(headers or {})}
    conn.request("POST", path, body=json.dumps(body).encode(), headers=sent)
    reply = conn.getresponse()
    return reply.status, json.loads(reply.read() or b"null")


def test_the_create_and_members_routes_answer_as_the_backend_with_the_post_guards(server: UIServer, store: TaskStore):
    body = {"name": "room", "title": "Room", "tasks": ["alice"]}
    assert call(server, "/api/conversations", body, {"X-CSRF-Token": "wrong"})[0] == 403
    assert call(server, "/api/conversations", body, {"Origin": "http://evil.example"})[0] == 403
    assert conversations.list_conversations(store) == ["plan"]  # refused before the backend
    assert call(server, "/api/conversations", body) == (201, {"id": "room", "created": True})
    assert call(server, "/api/conversations", body) == (200, {"id": "room", "created": False})
    assert conversations.read_meta(store, "room").handoff_limit == 4  # the default
    for bad, needle in (({"name": "Room"}, "not a conversation name"),
                        ({"name": "r", "tasks": "alice"}, "tasks: a list"),
                        ({"name": "r", "handoff_limit": "4"}, "handoff_limit: a whole number"),
                        ({"name": "r", "handoff_limit": True}, "handoff_limit: a whole number"),
                        ({"name": ["r"]}, "name and title: strings")):
        status, refused = call(server, "/api/conversations", bad)
        assert status == 400 and needle in refused["error"] and "\n" not in refused["error"], (bad, refused)
    assert call(server, "/api/conversations", {"name": "r", "tasks": ["ghost"]})[0] == 404
    members = "/api/conversations/room/members"
    assert call(server, members, {"task": "bob", "action": "join"}) == (200, {"changed": True})
    assert call(server, members, {"task": "bob"}) == (200, {"changed": False})  # join: the task API's default
    assert call(server, members, {"task": "bob", "action": "leave"}) == (200, {"changed": True})
    assert call(server, members, {"task": "ghost", "action": "join"}) == (
        404, {"error": "no task ghost: run it first (unicore run ... --name NAME, or New task)"})
    assert call(server, members, {"task": "bob", "action": "kick"}) == (400, {"error": "action 'kick': join or leave"})
    assert call(server, "/api/conversations/nope/members", {"task": "bob", "action": "join"})[0] == 404
    assert call(server, "/api/conversations/room/close", {})[0] == 200
    assert call(server, members, {"task": "bob", "action": "join"}) == (
        409, {"error": "conversation room is closed: bob cannot join"})
