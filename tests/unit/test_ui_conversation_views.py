"""The web UI's shared conversations without Redis (issue 33): a participant's state from its task's tree row and a
post's JSON (the cluster backend's conversations: tests/unit/test_ui_cluster_conversations.py)."""

from __future__ import annotations

import pytest
from unicore import conversations as rules
from unicore_client.ui.backend_protocol import PARTICIPANT_STATES
from unicore_client.ui.conversation_views import participant_state, post_json


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

