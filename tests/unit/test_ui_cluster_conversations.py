"""``kubectl agenttask ui``'s shared conversations (issue 33): ``ClusterBackend``'s conversation methods against a
local HTTP stub of the task API's ``conversations`` (the semantics of ``task_api/conversation_routes.py``: a post
once per id, 409 once closed, 404 with its details, a long poll of ``posts``, a create that says 201 or 200, a
task's join and leave, a task that does not exist its 404) that a kubeconfig points the plugin's real client at, as
tests/unit/test_plugin_conversations.py does; the AgentTasks come from the backend's watch cache. Then the refusals
through the real HTTP server: 403 (one line naming the right), 404, 409, 503."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from unicore_client.kubectl_plugin.kube import connect
from unicore_client.ui.backend_protocol import PARTICIPANT_STATES, Conflict, Forbidden, NotFound, Unavailable
from unicore_client.ui.cluster_backend import ClusterBackend
from unicore_client.ui.cluster_conversations import split_conversation
from unicore_client.ui.refusals import BadRequest
from unicore_client.ui.server import COOKIE, UIServer

from tests.task_api_stub import JsonRequest, serve_task_api

PREFIX = "/apis/tasks.unicore.dev/v1alpha1/namespaces/"
CLIENT = "c0ffee00-0000-4000-8000-000000000001"


# ------------------------------------------------------------------------------------------------ the fake task API


@dataclass
class Call:
    method: str
    namespace: str
    name: str
    sub: str
    query: dict[str, str]
    body: Any


@dataclass
class Conversation:
    title: str
    created_at: float
    created_by: str = "alice"
    status: str = "open"
    handoff_limit: int = 4
    posts: list[dict[str, Any]] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    participants: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, sender_kind: str, sender: str, text: str, post_id: str = "") -> int:
        seq = len(self.posts) + 1
        self.posts.append({"seq": seq, "id": post_id or f"{kind}:{seq}", "kind": kind, "senderKind": sender_kind,
                           "sender": sender, "text": text, "at": 100.0 + seq})
        return seq

    def join(self, kind: str, member: str) -> bool:
        """As the store's: True when it joined now (one that takes part already: nothing)."""
        held = next((p for p in self.participants if p["id"] == member and p["kind"] == kind), None)
        if held is not None and not held["left"]:
            return False
        if held is not None:
            self.participants.remove(held)
        name = member.rsplit("/", 1)[-1]
        self.participants.append({"kind": kind, "name": name, "id": member, "left": False})
        self.add("joined", kind, member, f"{member} joined")
        return True

    def leave(self, kind: str, member: str) -> bool:
        held = next((p for p in self.participants if p["id"] == member and p["kind"] == kind), None)
        if held is None or held["left"]:
            return False
        held["left"] = True
        self.add("left", kind, member, f"{member} left")
        return True


@dataclass
class FakeTaskApi:
    """The task API's conversations in memory, answered as ``conversation_routes`` answers; ``denied``: (namespace,
    method, subresource) the API server refuses with its 403 (subresource "list" for the collection, "" for the
    object);
    ``failures``: statuses answered first, one per request; ``tasks``: the AgentTasks (namespace, name) that exist,
    which a create or a join may name (any other is the task API's 404)."""

    conversations: dict[tuple[str, str], Conversation] = field(default_factory=dict)
    tasks: set[tuple[str, str]] = field(default_factory=lambda: {("team-a", "writer"), ("team-a", "critic")})
    denied: set[tuple[str, str, str]] = field(default_factory=set)
    failures: list[int] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, namespace: str, name: str, *tasks: str, title: str = "", created_at: float = 1.0) -> Conversation:
        conversation = Conversation(title=title or name, created_at=created_at)
        conversation.join("user", "alice")
        for task in tasks:
            conversation.join("task", f"{namespace}/{task}")
        self.conversations[(namespace, name)] = conversation
        return conversation

    def shape(self, namespace: str, name: str, conversation: Conversation, after: int) -> dict[str, Any]:
        return {"kind": "Conversation", "apiVersion": "tasks.unicore.dev/v1alpha1",
                "metadata": {"name": name, "namespace": namespace}, "title": conversation.title,
                "status": conversation.status, "createdBy": conversation.created_by,
                "createdAt": conversation.created_at, "handoffLimit": conversation.handoff_limit,
                "posts": [p for p in conversation.posts if p["seq"] > after][:500],
                "participants": [dict(p) for p in conversation.participants]}

    def answer(self, call: Call, *, record: bool = True) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if record:
                self.calls.append(call)
            if self.failures:
                status = self.failures.pop(0)
                return status, {"kind": "Status", "code": status, "message": "the operator is restarting"}
            what = "conversations" + (f"/{call.sub}" if call.sub else "")
            verb = {"GET": "get" if call.name else "list", "POST": "create", "DELETE": "delete"}[call.method]
            if (call.namespace, call.method, call.sub if call.name else "list") in self.denied:
                return 403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": (
                    f'{what}.tasks.unicore.dev "{call.name}" is forbidden: User "bob" cannot {verb} resource '
                    f'"{what}" in API group "tasks.unicore.dev" in the namespace "{call.namespace}"')}
            if not call.name and call.method == "POST":
                return self.create_posted(call)
            if not call.name:
                items = [{"name": name, "title": c.title, "status": c.status, "posts": len(c.posts)}
                         for (ns, name), c in self.conversations.items() if ns == call.namespace]
                return 200, {"kind": "ConversationList", "items": items}
            conversation = self.conversations.get((call.namespace, call.name))
            if conversation is None:
                return 404, {"kind": "Status", "code": 404, "reason": "NotFound",
                             "message": f"conversation {call.namespace}/{call.name} not found",
                             "details": {"name": call.name, "group": "tasks.unicore.dev", "kind": "conversations"}}
            after = int(call.query.get("after") or 0)
            if call.method == "GET" and not call.sub:
                return 200, self.shape(call.namespace, call.name, conversation, after)
            if call.method == "GET" and call.sub == "posts":
                found = [p for p in conversation.posts if p["seq"] > after][:500]
                return 200, {"kind": "ConversationPosts", "status": conversation.status, "posts": found}
            if call.sub == "posts":
                if conversation.status == "closed":
                    return 409, {"kind": "Status", "code": 409, "reason": "Conflict",
                                 "message": f"conversation {call.namespace}/{call.name} is closed"}
                key = f"user:{call.body['id']}"
                if key in conversation.ids:
                    return 200, {"kind": "PostReceipt", "seq": 0, "duplicate": True}
                conversation.ids.add(key)
                seq = conversation.add("post", "user", "alice", call.body["text"], key)
                return 201, {"kind": "PostReceipt", "seq": seq, "duplicate": False}
            if call.sub == "control":
                status = {"pause": "paused", "resume": "open", "close": "closed"}[call.body["action"]]
                if conversation.status == status:
                    return 200, {"kind": "ControlReceipt", "status": status, "changed": False}
                if conversation.status == "closed":
                    return 409, {"kind": "Status", "code": 409, "reason": "Conflict",
                                 "message": f"conversation {call.namespace}/{call.name} is closed"}
                conversation.status = status
                conversation.add("note", "system", "", f"alice {call.body['action']}d the conversation")
                return 200, {"kind": "ControlReceipt", "status": status, "changed": True}
            if call.sub == "members":
                return self.members_posted(call, conversation)
            return 404, {"kind": "Status", "code": 404, "message": "no route"}

    def missing_task(self, namespace: str, name: str) -> tuple[int, dict[str, Any]] | None:
        if (namespace, name) in self.tasks:
            return None
        return 404, {"kind": "Status", "code": 404, "reason": "NotFound",
                     "message": f'agenttask "{namespace}/{name}" not found',
                     "details": {"name": name, "group": "unicore.dev", "kind": "agenttasks"}}

    def create_posted(self, call: Call) -> tuple[int, dict[str, Any]]:
        """``POST .../conversations``: the tasks must exist; 201 made, 200 it existed (kept; the user and the tasks
        join it), as ``conversation_routes.create``."""
        body = call.body
        for task in body.get("tasks") or []:
            if (missing := self.missing_task(call.namespace, task)) is not None:
                return missing
        key = (call.namespace, body["name"])
        made = key not in self.conversations
        if made:
            self.conversations[key] = Conversation(title=body.get("title") or body["name"], created_at=5.0,
                                                   handoff_limit=body.get("handoffLimit", 4))
        conversation = self.conversations[key]
        conversation.join("user", "alice")
        for task in body.get("tasks") or []:
            conversation.join("task", f"{call.namespace}/{task}")
        return (201 if made else 200), self.shape(call.namespace, body["name"], conversation, 0)

    def members_posted(self, call: Call, conversation: Conversation) -> tuple[int, dict[str, Any]]:
        if (missing := self.missing_task(call.namespace, call.body["task"])) is not None:
            return missing
        if conversation.status == "closed":
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict",
                         "message": f"conversation {call.namespace}/{call.name} is closed"}
        task = f"{call.namespace}/{call.body['task']}"
        changed = (conversation.join if call.body["action"] == "join" else conversation.leave)("task", task)
        return 200, {"kind": "MemberReceipt", "task": call.body["task"], "action": call.body["action"],
                     "changed": changed}

    def long_poll(self, call: Call) -> tuple[int, dict[str, Any]]:
        """``posts?wait=``: held (briefly here) until a post after ``after`` comes."""
        deadline = time.monotonic() + min(float(call.query.get("wait") or 0), 0.3)
        status, body = self.answer(call)
        while status == 200 and not body.get("posts") and time.monotonic() < deadline:
            time.sleep(0.02)
            status, body = self.answer(call, record=False)  # one request, however long it is held
        return status, body

    def sent(self, method: str | None = None, sub: str | None = None) -> list[Call]:
        return [c for c in self.calls if (method is None or c.method == method) and (sub is None or c.sub == sub)]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeTaskApi, Path]]:
    api = FakeTaskApi()

    def answer(request: JsonRequest) -> tuple[int, dict[str, Any]]:
        assert request.path.startswith(PREFIX), request.path
        namespace, _, rest = request.path[len(PREFIX):].partition("/")
        segments = [unquote(s) for s in rest.split("/")]
        assert segments[0] == "conversations", request.path
        call = Call(request.method, namespace, segments[1] if len(segments) > 1 else "",
                    segments[2] if len(segments) > 2 else "", request.query, request.body)
        return api.long_poll(call) if "wait" in call.query else api.answer(call)

    with serve_task_api(answer, tmp_path) as kubeconfig:
        yield api, kubeconfig


def agenttask(namespace: str, name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-11-22T10:00:00Z"},
            "spec": {"prompt": "go"}, "status": {"phase": phase, "turns": 1}}


def backend_for(kubeconfig: Path, namespace: str | None = "team-a", *, timeout: float = 2.0,
                tasks: tuple[tuple[str, str, str], ...] = (("team-a", "writer", "Running"),
                                                          ("team-a", "critic", "Idle"))) -> ClusterBackend:
    """A ClusterBackend over the stub, its watch's cache holding ``tasks`` (namespace, name, phase): not started,
    so no AgentTask is listed or watched."""
    backend = ClusterBackend(connect(kubeconfig=str(kubeconfig)), namespace, api_timeout=timeout)
    for ns, name, phase in tasks:
        backend.watch.objects[(ns, name)] = agenttask(ns, name, phase)
    return backend


# ------------------------------------------------------------------------------------------------ reads


def test_ids_are_namespace_slash_name_and_a_bare_name_is_the_contexts_namespace() -> None:
    assert split_conversation("team-b/room", "team-a") == ("team-b", "room")
    assert split_conversation("room", "team-a") == ("team-a", "room")
    for bad in ("", "team-a/", "Team/room", "team-a/Room", "a/b/c", "team-a/room\n", "x" * 64):
        with pytest.raises(ValueError, match="bad conversation id"):
            split_conversation(bad, "team-a")


def test_the_list_is_the_namespaces_conversations_newest_first_with_who_takes_part(fake) -> None:
    api, kubeconfig = fake
    api.create("team-a", "old", "writer", created_at=1.0)
    api.create("team-a", "new", "writer", "critic", title="New room", created_at=2.0)
    api.create("team-b", "elsewhere", created_at=3.0)  # not the UI's namespace
    backend = backend_for(kubeconfig)
    listed = backend.conversations()
    assert listed == [
        {"id": "team-a/new", "title": "New room", "status": "open", "created_by": "alice", "created_at": 2.0,
         "posts": 3, "agents": ["writer", "critic"], "people": ["alice"]},
        {"id": "team-a/old", "title": "old", "status": "open", "created_by": "alice", "created_at": 1.0,
         "posts": 2, "agents": ["writer"], "people": ["alice"]}]
    assert {c.namespace for c in api.calls} == {"team-a"}
    gets = len(api.sent("GET"))
    assert backend.conversations() == listed
    assert len(api.sent("GET")) == gets + 1  # the list only: a row's details are kept while its last seq is
    api.conversations[("team-a", "old")].participants[1]["left"] = True
    api.conversations[("team-a", "old")].add("left", "task", "team-a/writer", "team-a/writer left")
    again = backend.conversations()
    assert again[1]["agents"] == [] and again[1]["posts"] == 3


def test_every_namespace_lists_those_of_the_tasks_shown_and_leaves_out_one_it_may_not_list(fake) -> None:
    api, kubeconfig = fake
    api.create("team-a", "room", created_at=1.0)
    api.create("team-b", "hall", created_at=2.0)
    api.create("team-c", "closet", created_at=3.0)  # no AgentTask of team-c is shown: not listed
    backend = backend_for(kubeconfig, None, tasks=(("team-a", "writer", "Idle"), ("team-b", "critic", "Idle")))
    assert [c["id"] for c in backend.conversations()] == ["team-b/hall", "team-a/room"]
    api.denied.add(("team-b", "GET", "list"))
    assert [c["id"] for c in backend.conversations()] == ["team-a/room"]
    api.denied.add(("team-a", "GET", "list"))
    with pytest.raises(Forbidden, match="^forbidden: bob cannot list conversations .* in namespace team-a"):
        backend.conversations()


def test_a_conversation_has_its_participants_live_state_from_their_agenttasks(fake) -> None:
    api, kubeconfig = fake
    room = api.create("team-a", "room", "writer", "critic", "gone", title="Room")
    room.participants[2]["left"] = True  # critic left
    room.add("post", "user", "alice", "hello @writer")
    backend = backend_for(kubeconfig)
    shown = backend.conversation("team-a/room")
    assert {k: v for k, v in shown.items() if k != "participants"} == {
        "id": "team-a/room", "title": "Room", "status": "open", "created_by": "alice", "created_at": 1.0,
        "posts": 5, "handoff_limit": 4, "handoffs": None}
    states = {p["id"]: (p["kind"], p["name"], p["state"]) for p in shown["participants"]}
    assert states == {"alice": ("user", "alice", "person"), "team-a/writer": ("task", "writer", "running"),
                      "team-a/critic": ("task", "critic", "left"), "team-a/gone": ("task", "gone", "gone")}
    assert all(p["state"] in PARTICIPANT_STATES for p in shown["participants"])
    writer = next(p for p in shown["participants"] if p["id"] == "team-a/writer")
    assert writer["task"]["id"] == "team-a/writer" and writer["task"]["status"] == "Running"
    assert writer["joined_at"] is None
    assert backend.conversation("room")["id"] == "team-a/room"  # a bare name: the context's namespace
    json.dumps(shown)


def test_a_conversation_of_a_namespace_the_watch_does_not_cover_reads_its_agenttasks(fake, monkeypatch) -> None:
    api, kubeconfig = fake
    api.create("team-b", "hall", "critic")
    backend = backend_for(kubeconfig)  # the tree: team-a
    asked: list[tuple[str, str]] = []

    def get(namespace: str, name: str) -> dict[str, Any]:
        asked.append((namespace, name))
        return agenttask(namespace, name, "WaitingForApproval")

    monkeypatch.setattr(backend.conversation_source, "_get", get)
    critic = backend.conversation("team-b/hall")["participants"][1]
    assert asked == [("team-b", "critic")] and critic["state"] == "waiting" and critic["task"]["waiting"] == "approval"


def test_who_may_get_but_not_list_gets_the_post_count_by_reading_the_posts(fake) -> None:
    api, kubeconfig = fake
    room = api.create("team-a", "room")
    for n in range(600):  # more than one page of the posts route
        room.add("post", "user", "alice", f"post {n}")
    api.denied.add(("team-a", "GET", "list"))
    assert backend_for(kubeconfig).conversation("team-a/room")["posts"] == 601
    assert [c.query.get("after") for c in api.sent("GET", "posts")] == ["0", "500"]


def test_posts_after_a_seq_as_the_page_shows_them(fake) -> None:
    api, kubeconfig = fake
    room = api.create("team-a", "room", "writer")
    room.add("answer", "task", "team-a/writer", "<b>done</b>")
    room.add("note", "system", "", "alice paused the conversation")
    posts = backend_for(kubeconfig).conversation_posts("team-a/room", 2, 500)
    assert posts == [
        {"seq": 3, "id": "answer:3", "kind": "answer", "sender_kind": "task", "sender": "team-a/writer",
         "name": "writer", "text": "<b>done</b>", "at": 103.0},
        {"seq": 4, "id": "note:4", "kind": "note", "sender_kind": "system", "sender": "", "name": "",
         "text": "alice paused the conversation", "at": 104.0}]
    assert api.sent("GET", "posts")[-1].query == {"after": "2"}
    assert len(backend_for(kubeconfig).conversation_posts("team-a/room", 0, 1)) == 1


# ------------------------------------------------------------------------------------------------ writes


def test_a_post_is_taken_once_per_client_id_which_is_the_task_apis_post_id(fake) -> None:
    api, kubeconfig = fake
    room = api.create("team-a", "room", "writer")
    backend = backend_for(kubeconfig)
    assert backend.conversation_post("team-a/room", "hello @writer", CLIENT) == {"posted": True, "seq": 3}
    assert backend.conversation_post("team-a/room", "hello @writer", CLIENT) == {"posted": False, "seq": None}
    assert [c.body for c in api.sent("POST", "posts")] == [{"id": CLIENT, "text": "hello @writer"}] * 2
    assert [p["text"] for p in room.posts].count("hello @writer") == 1


def test_a_post_retried_after_the_operator_restarted_is_taken_once(fake) -> None:
    api, kubeconfig = fake
    room = api.create("team-a", "room")
    api.failures.extend([503, 502])  # the client retries the same request (the same id) until its deadline
    assert backend_for(kubeconfig).conversation_post("room", "once", CLIENT) == {"posted": True, "seq": 2}
    assert [c.body["id"] for c in api.sent("POST", "posts")] == [CLIENT] * 3
    assert [p["text"] for p in room.posts].count("once") == 1


@pytest.mark.parametrize(("text", "client_id", "needle"), [
    ("hi", "short", "id: 8-64 letters"), ("hi", "x" * 65, "id: 8-64 letters"), ("hi", "bad id!!", "id: 8-64"),
    ("  \n", CLIENT, "the post is empty"), ("x" * (64 * 1024 + 1), CLIENT, "the post is too long"),
], ids=["short-id", "long-id", "bad-id", "empty", "too-long"])
def test_a_bad_post_is_refused_before_any_request(fake, text: str, client_id: str, needle: str) -> None:
    api, kubeconfig = fake
    api.create("team-a", "room")
    with pytest.raises(BadRequest, match=needle):
        backend_for(kubeconfig).conversation_post("team-a/room", text, client_id)
    assert api.sent("POST") == []


def test_pause_resume_close_and_then_409(fake) -> None:
    api, kubeconfig = fake
    api.create("team-a", "room")
    backend = backend_for(kubeconfig)
    assert backend.conversation_control("team-a/room", "pause") == {"status": "paused", "changed": True}
    assert backend.conversation_control("team-a/room", "pause") == {"status": "paused", "changed": False}
    assert backend.conversation_control("team-a/room", "resume") == {"status": "open", "changed": True}
    assert backend.conversation_control("team-a/room", "close") == {"status": "closed", "changed": True}
    assert [c.body for c in api.sent("POST", "control")] == [{"action": a} for a in ("pause", "pause", "resume",
                                                                                     "close")]
    with pytest.raises(Conflict, match="^conversation team-a/room is closed$"):
        backend.conversation_post("team-a/room", "too late", CLIENT)
    with pytest.raises(Conflict, match="is closed"):
        backend.conversation_control("team-a/room", "resume")
    with pytest.raises(BadRequest, match="pause, resume or close"):
        backend.conversation_control("team-a/room", "delete")


def test_refusals_forbidden_names_the_right_404_and_503(fake) -> None:
    api, kubeconfig = fake
    api.create("team-a", "room")
    backend = backend_for(kubeconfig, timeout=0.3)
    api.denied.add(("team-a", "POST", "posts"))
    with pytest.raises(Forbidden) as denied:
        backend.conversation_post("team-a/room", "let me in", CLIENT)
    assert denied.value.message == (
        "forbidden: bob cannot create conversations/posts (tasks.unicore.dev) in namespace team-a, so cannot post to "
        "its conversations (ask for the unicore-agenttask-messenger role there)")
    api.denied.add(("team-a", "POST", "control"))
    with pytest.raises(Forbidden, match="cannot create conversations/control .* so cannot pause, resume or close"):
        backend.conversation_control("team-a/room", "close")
    api.denied.add(("team-a", "GET", "posts"))
    with pytest.raises(Forbidden, match="cannot get conversations/posts .* unicore-agenttask-reader role"):
        backend.conversation_posts("team-a/room", 0, 10)
    with pytest.raises(NotFound, match="^conversation team-a/nope not found$"):
        backend.conversation("team-a/nope")
    with pytest.raises(BadRequest, match="bad conversation id"):
        backend.conversation("team-a/No")
    api.failures.extend([503] * 50)
    with pytest.raises(Unavailable, match="not reachable through the API server"):
        backend.conversation_posts("team-a/room", 0, 10)


# ------------------------------------------------------------------------------------------------ create, join, leave


def test_create_sends_the_task_apis_body_and_says_whether_it_made_it(fake) -> None:
    api, kubeconfig = fake
    backend = backend_for(kubeconfig)
    made = backend.conversation_create("room", "<img src=x onerror=alert(1)> \u202e", ["team-a/writer", "critic"], 3)
    assert made == {"id": "team-a/room", "created": True}
    create = api.sent("POST", "")
    assert [(c.namespace, c.name, c.body) for c in create] == [("team-a", "", {
        "name": "room", "title": "<img src=x onerror=alert(1)> \u202e", "handoffLimit": 3,
        "tasks": ["writer", "critic"]})]  # a bare task name: of the conversation's namespace
    shown = backend.conversation("team-a/room")
    assert shown["title"] == "<img src=x onerror=alert(1)> \u202e" and shown["handoff_limit"] == 3
    assert [(p["kind"], p["id"]) for p in shown["participants"]] == [
        ("user", "alice"), ("task", "team-a/writer"), ("task", "team-a/critic")]

    again = backend.conversation_create("team-a/room", "Other", ["writer"], 5)
    assert again == {"id": "team-a/room", "created": False}  # the task API's 200: kept as it is
    assert backend.conversation("room")["title"] == "<img src=x onerror=alert(1)> \u202e"
    assert backend.conversation_create("team-a/empty", "", [], 4) == {"id": "team-a/empty", "created": True}
    assert api.sent("POST", "")[-1].body == {"name": "empty", "title": "", "handoffLimit": 4, "tasks": []}
    with pytest.raises(NotFound, match='^agenttask "team-a/ghost" not found$'):
        backend.conversation_create("team-a/haunted", "", ["ghost"], 4)
    assert ("team-a", "haunted") not in api.conversations


def test_a_task_joins_and_leaves_through_members_and_a_closed_one_is_409(fake) -> None:
    api, kubeconfig = fake
    room = api.create("team-a", "room", "writer")
    backend = backend_for(kubeconfig)
    assert backend.conversation_member("team-a/room", "team-a/critic", "join") == {"changed": True}
    assert backend.conversation_member("room", "critic", "join") == {"changed": False}
    assert backend.conversation_member("team-a/room", "team-a/writer", "leave") == {"changed": True}
    assert [(c.name, c.body) for c in api.sent("POST", "members")] == [
        ("room", {"task": "critic", "action": "join"}), ("room", {"task": "critic", "action": "join"}),
        ("room", {"task": "writer", "action": "leave"})]
    states = {p["name"]: p["state"] for p in backend.conversation("team-a/room")["participants"]}
    assert states == {"alice": "person", "writer": "left", "critic": "idle"}
    with pytest.raises(NotFound, match='^agenttask "team-a/ghost" not found$'):
        backend.conversation_member("team-a/room", "ghost", "join")
    with pytest.raises(NotFound, match="^conversation team-a/nope not found$"):
        backend.conversation_member("team-a/nope", "writer", "join")
    room.status = "closed"
    with pytest.raises(Conflict, match="^conversation team-a/room is closed$") as refused:
        backend.conversation_member("team-a/room", "writer", "join")
    assert refused.value.status == 409


@pytest.mark.parametrize(("call", "needle"), [
    (lambda b: b.conversation_create("team-a/room", "", ["team-b/critic"], 4),
     "^task team-b/critic is not in namespace team-a: a conversation's tasks are AgentTasks of its namespace$"),
    (lambda b: b.conversation_member("team-a/room", "team-b/critic", "join"),
     "^task team-b/critic is not in namespace"),
    (lambda b: b.conversation_create("team-b/room", "", ["writer", "team-a/critic"], 4),
     "^task team-a/critic is not in namespace team-b"),
    (lambda b: b.conversation_create("team-a/room", "", ["Writer!"], 4), "^bad task id 'Writer!'"),
    (lambda b: b.conversation_create("team-a/Room", "", [], 4), "^bad conversation id"),
    (lambda b: b.conversation_create("team-a/room", "x" * 257, [], 4), "^the title is 257 characters"),
    (lambda b: b.conversation_create("team-a/room", "", [], -1), "^handoff_limit: a whole number from 0 to 100"),
    (lambda b: b.conversation_create("team-a/room", "", [f"t{n}" for n in range(65)], 4), "^65 tasks: at most 64"),
    (lambda b: b.conversation_member("team-a/room", "writer", "kick"), "^action 'kick': join or leave$"),
], ids=["create-other-namespace", "join-other-namespace", "create-mixed", "task-id", "name", "title", "limit",
        "too-many", "action"])
def test_a_task_of_another_namespace_or_bad_input_is_refused_before_any_request(fake, call, needle: str) -> None:
    api, kubeconfig = fake
    api.create("team-a", "room", "writer")
    with pytest.raises(BadRequest, match=needle):
        call(backend_for(kubeconfig))
    assert api.sent("POST") == []


def test_create_and_members_without_the_right_are_403_naming_it(fake) -> None:
    api, kubeconfig = fake
    api.create("team-a", "room")
    backend = backend_for(kubeconfig)
    api.denied |= {("team-a", "POST", "list"), ("team-a", "POST", "members")}
    with pytest.raises(Forbidden) as denied:
        backend.conversation_create("team-a/new", "", ["writer"], 4)
    assert denied.value.status == 403 and denied.value.message == (
        "forbidden: bob cannot create conversations (tasks.unicore.dev) in namespace team-a, so cannot create "
        "conversations (ask for the unicore-agenttask-messenger role there)")
    with pytest.raises(Forbidden) as denied:
        backend.conversation_member("team-a/room", "writer", "join")
    assert denied.value.message == (
        "forbidden: bob cannot create conversations/members (tasks.unicore.dev) in namespace team-a, so cannot add "
        "tasks to or take tasks out of its conversations (ask for the unicore-agenttask-messenger role there)")
    assert ("team-a", "new") not in api.conversations


# ------------------------------------------------------------------------------------------------ the live feed


def test_the_feed_sends_posts_after_the_seq_then_the_conversation_then_what_comes(fake) -> None:
    api, kubeconfig = fake
    room = api.create("team-a", "room", "writer")
    room.add("post", "user", "alice", "first")
    backend = backend_for(kubeconfig)
    stop = threading.Event()
    feed = backend.conversation_events("team-a/room", 2, wait_seconds=1, stop=stop)
    first = [next(feed), next(feed)]
    assert [(e[0], e[1]) for e in first] == [("3", "post"), ("3", "conversation")]
    assert first[0][2]["text"] == "first" and first[1][2]["posts"] == 3
    assert "wait" not in api.sent("GET", "posts")[0].query  # the first round answers at once
    assert next(feed) == ("3", "", {})  # a quiet long poll: a keepalive
    assert api.sent("GET", "posts")[-1].query == {"after": "3", "wait": "1"}

    room.join("task", "team-a/critic")  # a join is a post: the participants are read again
    joined = [next(feed), next(feed)]
    assert [(e[0], e[1]) for e in joined] == [("4", "post"), ("4", "conversation")]
    assert joined[0][2]["kind"] == "joined"
    assert [p["name"] for p in joined[1][2]["participants"]] == ["alice", "writer", "critic"]
    assert joined[1][2]["posts"] == 4

    backend.watch.objects[("team-a", "writer")] = agenttask("team-a", "writer", "Idle")  # a phase change: no post
    changed = next(feed)
    assert changed[1] == "conversation"
    assert {p["name"]: p["state"] for p in changed[2]["participants"]}["writer"] == "idle"

    room.status = "paused"
    room.add("note", "system", "", "alice paused the conversation")
    assert [e[1] for e in (next(feed), next(feed))] == ["post", "conversation"]
    stop.set()
    assert list(feed) == []


def test_the_feed_of_a_missing_conversation_raises_before_its_first_event(fake) -> None:
    api, kubeconfig = fake
    with pytest.raises(NotFound):
        next(backend_for(kubeconfig).conversation_events("team-a/nope", 0))
    api.create("team-a", "room")
    api.denied |= {("team-a", "GET", "list"), ("team-a", "GET", "posts")}  # may neither list nor read posts
    with pytest.raises(Forbidden, match="cannot get conversations/posts"):
        next(backend_for(kubeconfig).conversation_events("team-a/room", 0))


# ------------------------------------------------------------------------------------------------ HTTP


@pytest.fixture
def ui(fake) -> Iterator[tuple[FakeTaskApi, UIServer]]:
    api, kubeconfig = fake
    server = UIServer(backend_for(kubeconfig, timeout=0.3))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield api, server
    server.shutdown()
    server.server_close()


def call(server: UIServer, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Host": f"127.0.0.1:{server.port}", "Cookie": f"{COOKIE.format(port=server.port)}={server.token}"}
    if method == "POST":
        headers["X-CSRF-Token"] = server.csrf
    conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
    reply = conn.getresponse()
    return reply.status, json.loads(reply.read() or b"null")


def test_the_pages_urls_work_in_cluster_mode_with_the_refusals_as_one_line(ui) -> None:
    api, server = ui
    api.create("team-a", "room", "writer")
    assert call(server, "GET", "/api/conversations")[1]["conversations"][0]["id"] == "team-a/room"
    path = "/api/conversations/team-a%2Froom"  # the page's encodeURIComponent of the id
    status, shown = call(server, "GET", path)
    assert status == 200 and shown["id"] == "team-a/room" and shown["posts"] == 2
    assert call(server, "POST", f"{path}/posts", {"text": "hi", "id": CLIENT}) == (200, {"posted": True, "seq": 3})
    assert call(server, "POST", f"{path}/posts", {"text": "hi", "id": CLIENT}) == (200, {"posted": False, "seq": None})
    assert [p["text"] for p in call(server, "GET", f"{path}/posts?after=2&limit=500")[1]["posts"]] == ["hi"]
    assert call(server, "POST", f"{path}/close", {}) == (200, {"status": "closed", "changed": True})
    status, refused = call(server, "POST", f"{path}/posts", {"text": "late", "id": CLIENT.replace("1", "2")})
    assert (status, refused) == (409, {"error": "conversation team-a/room is closed"})
    assert call(server, "GET", "/api/conversations/team-a%2Fnope")[0] == 404
    assert call(server, "GET", "/api/conversations/team-a%2Fnope/events?after=0")[0] == 404
    api.denied.add(("team-a", "GET", "list"))
    status, refused = call(server, "GET", "/api/conversations")
    assert status == 403 and refused["error"].startswith("forbidden: bob cannot list conversations (tasks.unicore.dev)")
    assert "\n" not in refused["error"]
    assert refused["error"].endswith("(ask for the unicore-agenttask-reader role there)")
    api.failures.extend([503] * 50)
    status, refused = call(server, "GET", f"{path}/posts?after=0")
    assert status == 503 and "\n" not in refused["error"]


def test_the_create_and_members_routes_in_cluster_mode(ui) -> None:
    api, server = ui
    body = {"name": "team-a/room", "title": "Room", "tasks": ["team-a/writer"], "handoff_limit": 2}
    assert call(server, "POST", "/api/conversations", body) == (201, {"id": "team-a/room", "created": True})
    assert call(server, "POST", "/api/conversations", body) == (200, {"id": "team-a/room", "created": False})
    assert api.sent("POST", "")[0].body == {"name": "room", "title": "Room", "handoffLimit": 2, "tasks": ["writer"]}
    members = "/api/conversations/team-a%2Froom/members"
    assert call(server, "POST", members, {"task": "team-a/critic", "action": "join"}) == (200, {"changed": True})
    assert call(server, "POST", members, {"task": "team-a/critic", "action": "leave"}) == (200, {"changed": True})
    status, refused = call(server, "POST", members, {"task": "team-b/critic", "action": "join"})
    assert status == 400 and refused["error"].startswith("task team-b/critic is not in namespace team-a")
    status, refused = call(server, "POST", "/api/conversations", {"name": "team-a/x", "tasks": ["ghost"]})
    assert (status, refused) == (404, {"error": 'agenttask "team-a/ghost" not found'})
    api.denied.add(("team-a", "POST", "members"))
    status, refused = call(server, "POST", members, {"task": "team-a/critic", "action": "join"})
    assert status == 403 and "cannot create conversations/members" in refused["error"] and "\n" not in refused["error"]
    assert len(api.sent("POST", "members")) == 3  # the one of another namespace was never sent
