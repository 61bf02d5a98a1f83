"""The web UI's shared conversations without Redis (issue 33): a participant's state from its task's tree row, a
post's JSON, and the cluster backend's one-line 501 through the real HTTP server (the cluster side comes later)."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from unicore import conversations as rules
from unicore_client.ui.backend_protocol import PARTICIPANT_STATES
from unicore_client.ui.cluster_backend import NO_CONVERSATIONS, ClusterBackend
from unicore_client.ui.conversation_views import participant_state, post_json
from unicore_client.ui.server import COOKIE, UIServer


@pytest.mark.parametrize(("member", "phase", "state"), [
    (rules.Member(kind="task", id="alice"), "done", "idle"),
    (rules.Member(kind="task", id="alice"), "queued", "idle"),
    (rules.Member(kind="task", id="alice"), "running", "running"),
    (rules.Member(kind="task", id="alice"), "waiting", "waiting"),
    (rules.Member(kind="task", id="alice"), "suspended", "suspended"),
    (rules.Member(kind="task", id="alice"), "failed", "failed"),
    (rules.Member(kind="task", id="alice"), None, "gone"),
    (rules.Member(kind="task", id="alice", left=True), "running", "left"),
    (rules.Member(kind="user", id="ana"), None, "person"),
    (rules.Member(kind="user", id="ana", left=True), None, "left"),
])
def test_a_participants_state_comes_from_its_tree_row(member: rules.Member, phase: str | None, state: str):
    node = None if phase is None else {"phase": phase}
    assert participant_state(member, node) == state
    assert state in PARTICIPANT_STATES


def test_a_posts_json_names_its_sender_as_shown():
    post = rules.Post(seq=3, id="answer:team/alice:0", kind="answer", sender_kind="task", sender="team/alice",
                      text="<b>hi</b>", at=1.5)
    assert post_json(post) == {"seq": 3, "id": "answer:team/alice:0", "kind": "answer", "sender_kind": "task",
                               "sender": "team/alice", "name": "alice", "text": "<b>hi</b>", "at": 1.5}
    note = rules.Post(seq=4, id="note:x", kind="note", sender_kind="system", sender="", text="paused", at=2.0)
    assert post_json(note)["name"] == ""


@pytest.fixture
def cluster_server() -> Iterator[UIServer]:
    backend: Any = ClusterBackend.__new__(ClusterBackend)  # its conversation methods need no cluster
    server = UIServer(backend)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/conversations"), ("GET", "/api/conversations/standup"),
    ("GET", "/api/conversations/standup/posts?after=0"), ("GET", "/api/conversations/standup/events?after=0"),
    ("POST", "/api/conversations/standup/posts"), ("POST", "/api/conversations/standup/close"),
])
def test_the_cluster_backend_answers_conversations_with_one_line_501(cluster_server: UIServer, method: str, path: str):
    conn = http.client.HTTPConnection("127.0.0.1", cluster_server.port, timeout=10)
    headers = {"Host": f"127.0.0.1:{cluster_server.port}",
               "Cookie": f"{COOKIE.format(port=cluster_server.port)}={cluster_server.token}"}
    body = None
    if method == "POST":
        headers["X-CSRF-Token"] = cluster_server.csrf
        body = json.dumps({"text": "hi", "id": "c0ffee00-0001"}).encode()
    conn.request(method, path, body=body, headers=headers)
    reply = conn.getresponse()
    assert reply.status == 501
    assert json.loads(reply.read()) == {"error": NO_CONVERSATIONS}
    assert "\n" not in NO_CONVERSATIONS
