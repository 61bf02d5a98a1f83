"""``kubectl agenttask conv ...`` (issue 33): argument errors, the pure rendering of the task API's answers, and the
requests each command makes, against a local HTTP stub that a kubeconfig points the plugin's real client at."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from unicore import conversations as rules
from unicore_client.kubectl_plugin import main as cli
from unicore_client.kubectl_plugin.conversation_commands import (
    POSTS_PAGE,
    render_conversation,
    render_list,
    render_post,
)
from unicore_client.kubectl_plugin.proxy import conversation_path, forbidden_message

from tests.task_api_stub import JsonRequest, serve_task_api

BASE = "/apis/tasks.unicore.dev/v1alpha1/namespaces/team-a/conversations"
ESC, RLO, OSC_TITLE = "\x1b[2J", "\u202e", "\x1b]0;pwned\x07"


# ------------------------------------------------------------------------------------------------ the stub


@dataclass
class Stub:
    """Answers ``(method, path)`` with the next scripted ``(status, body)`` (the last one again when they run out);
    a long poll (``wait``) with nothing scripted for it waits a little, as the server would, and finds nothing."""

    answers: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    calls: list[JsonRequest] = field(default_factory=list)

    def on(self, method: str, path: str, *answers: tuple[int, dict[str, Any]]) -> None:
        self.answers[(method, path)] = list(answers)

    def answer(self, call: JsonRequest) -> tuple[int, dict[str, Any]]:
        self.calls.append(call)
        scripted = self.answers.get((call.method, call.path))
        if not scripted:
            if "wait" in call.query:
                time.sleep(0.2)
                return 200, {"kind": "ConversationPosts", "status": "open", "posts": []}
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "no route"}
        return scripted.pop(0) if len(scripted) > 1 else scripted[0]


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[tuple[Stub, Path]]:
    state = Stub()
    with serve_task_api(state.answer, tmp_path) as kubeconfig:
        yield state, kubeconfig


def run(kubeconfig: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["--kubeconfig", str(kubeconfig), "conv", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def sent(stub: Stub) -> list[tuple[str, str, dict[str, str], Any]]:
    return [(c.method, c.path, c.query, c.body) for c in stub.calls]


def post(seq: int, text: str, *, kind: str = "post", sender_kind: str = "user", sender: str = "alice") -> dict:
    return {"seq": seq, "id": f"p{seq}", "kind": kind, "senderKind": sender_kind, "sender": sender, "text": text,
            "at": 1.0}


def conversation(posts: list[dict], *, status: str = "open", **extra: Any) -> dict[str, Any]:
    return {"kind": "Conversation", "apiVersion": "tasks.unicore.dev/v1alpha1",
            "metadata": {"name": "room", "namespace": "team-a"}, "title": "Room", "status": status,
            "createdBy": "alice", "createdAt": 1.0, "handoffLimit": 4, "posts": posts,
            "participants": [{"kind": "user", "name": "alice", "id": "alice", "left": False},
                             {"kind": "task", "name": "writer", "id": "team-a/writer", "left": False},
                             {"kind": "task", "name": "critic", "id": "team-a/critic", "left": True}], **extra}


# ------------------------------------------------------------------------------------------------ arguments


@pytest.mark.parametrize(("argv", "needle"), [
    (["conv"], "the following arguments are required: ACTION"),
    (["conv", "chat", "room"], "invalid choice: 'chat'"),
    (["conv", "create", "Bad_Name"], "argument name: not a conversation name: 'Bad_Name'"),
    (["conv", "create", "room\n"], "argument name: not a conversation name: 'room\\n'"),
    (["conv", "create", "room", "--task", "Writer"], "argument --task: not an agenttask name: 'Writer'"),
    (["conv", "create", "room", "--handoff-limit", "101"], "argument --handoff-limit: must be from 0 to 100"),
    (["conv", "create", "room", "--handoff-limit", "x"], "argument --handoff-limit: not a whole number: 'x'"),
    (["conv", "create", "room", "--title", "t" * 257], "argument --title: is 257 characters, over the cap of 256"),
    (["conv", "create", "room", *[f"--task=t{i}" for i in range(65)]], "conv create: 65 tasks: at most 64"),
    (["conv", "join", "room"], "the following arguments are required: TASK"),
    (["conv", "leave", "room", "a/b"], "argument TASK: not an agenttask name: 'a/b'"),
    (["conv", "post", "room"], "the following arguments are required: TEXT"),
    (["conv", "post", "room", "   "], "conv post: the post is empty"),
    (["conv", "post", "room", "x" * (rules.MAX_POST_BYTES + 1)], "conv post: the post is 65537 bytes, over the cap"),
    (["conv", "post", "room", "caf\udce9"], "argument TEXT: the post is not valid UTF-8 text"),
    (["conv", "post", "room", "hi", "--id", "p", "caf\udce9"], "conv post: the post is not valid UTF-8 text"),
    (["conv", "post", "room", "hi", "--id", "prompt:1"], "argument --id: message id"),
    (["conv", "post", "room", "hi", "--id", ""], "argument --id: must be 1-256 characters"),
    (["conv", "show", "room", "--follow", "--timeout", "0"], "argument --timeout: must be a positive number"),
    (["conv", "show", "room", "--bogus"], "unrecognized arguments: --bogus"),
    (["conv", "pause"], "the following arguments are required: name"),
    (["conv", "delete", "-room"], "the following arguments are required: name"),
    (["conv", "list", "extra"], "unrecognized arguments: extra"),
])
def test_bad_arguments_exit_2_with_one_error_line_before_anything_is_asked(
        argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--kubeconfig", "/nonexistent", *argv], out=io.StringIO(), err=io.StringIO())
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and needle in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("kubectl agenttask")] == [err.splitlines()[-1]]


def test_flags_go_before_or_after_the_action_and_words_of_a_post_are_joined() -> None:
    args = cli.parse(["-n", "team", "conv", "post", "room", "--id", "p1", "hello", "world"])
    assert (args.namespace, args.conv_command, args.name, args.id, args.text) == (
        "team", "post", "room", "p1", ["hello", "world"])
    assert cli.parse(["conv", "post", "room", "hello", "--id", "p1", "big", "world"]).text == [
        "hello", "big", "world"]
    args = cli.parse(["conv", "create", "room", "--task", "writer", "--task", "critic", "-n", "team"])
    assert (args.namespace, args.task, args.title, args.handoff_limit) == (
        "team", ["writer", "critic"], None, rules.DEFAULT_HANDOFF_LIMIT)
    args = cli.parse(["conv", "show", "room", "-f", "--timeout", "2.5", "--json"])
    assert (args.follow, args.timeout, args.json) == (True, 2.5, True)


# ------------------------------------------------------------------------------------------------ rendering


def test_show_renders_like_unicore_conv_with_hostile_text_escaped() -> None:
    posts = [post(1, "alice joined", kind="joined", sender_kind="system", sender=""),
             post(2, f"@writer hi{ESC}\nsecond line", sender=f"alice{RLO}"),
             post(3, f"Tagline{OSC_TITLE}", kind="answer", sender_kind="task", sender="team-a/writer"),
             post(4, "odd", kind=f"weird{ESC}")]
    shown = conversation(posts, title=f"Room{OSC_TITLE}\nfake: line")
    text = render_conversation(shown)
    assert text == (
        "conversation team-a/room: Room\\x1b]0;pwned\\x07\\x0afake: line [open]\n"
        "participants: alice, writer (agent), critic (agent) (left)\n"
        "#1 - joined: alice joined\n"
        "#2 alice\\u202e posted: @writer hi\\x1b[2J\nsecond line\n"
        "#3 writer (agent) answered: Tagline\\x1b]0;pwned\\x07\n"
        "#4 alice weird\\x1b[2J: odd\n")
    assert "\x1b" not in text and RLO not in text
    assert render_post({"seq": 9}) == "#9 - : \n"  # whatever is missing: no crash


def test_list_renders_one_line_a_conversation_escaped() -> None:
    answer = {"kind": "ConversationList", "items": [
        {"name": "room", "title": "Room", "status": "open", "posts": 3},
        {"name": "ops", "title": f"multi\nline{ESC}", "status": "closed", "posts": 12}]}
    assert render_list(answer, "team-a") == ("room  [open]  posts=3  Room\n"
                                             "ops  [closed]  posts=12  multi\\x0aline\\x1b[2J\n")
    assert render_list({"items": []}, "team-a") == "no conversations in namespace team-a\n"


def test_a_refused_conversation_request_says_which_right_is_missing() -> None:
    denied = ('conversations.tasks.unicore.dev "room" is forbidden: User "bob" cannot create resource '
              '"conversations/posts" in API group "tasks.unicore.dev" in the namespace "team-a"')
    assert forbidden_message(denied, method="POST", path=conversation_path("team-a", "room", "posts")) == (
        "forbidden: bob cannot create conversations/posts (tasks.unicore.dev) in namespace team-a, so cannot post "
        "to its conversations (ask for the unicore-agenttask-messenger role there)")
    assert forbidden_message(denied, method="GET", path=conversation_path("team-a") + "?x=1").startswith(
        "forbidden: bob cannot list conversations (tasks.unicore.dev) in namespace team-a, so cannot read its "
        "conversations (ask for the unicore-agenttask-reader role there)")
    assert "cannot get conversations/posts" in forbidden_message(
        denied, method="GET", path=conversation_path("team-a", "room", "posts"))
    assert "so cannot pause, resume or close its conversations" in forbidden_message(
        denied, method="POST", path=conversation_path("team-a", "room", "control"))
    assert forbidden_message(denied, method="DELETE", path=conversation_path("team-a", "room")).endswith(
        "cannot delete conversations (tasks.unicore.dev) in namespace team-a, so cannot delete its conversations "
        "(ask for the unicore-agenttask-editor role there)")
    assert conversation_path("a b", "x/y", "posts") == (
        "/apis/tasks.unicore.dev/v1alpha1/namespaces/a%20b/conversations/x%2Fy/posts")


# ------------------------------------------------------------------------------------------------ requests


def test_create_join_and_leave(stub: tuple[Stub, Path], capsys: pytest.CaptureFixture[str]) -> None:
    state, kubeconfig = stub
    made = conversation([])
    state.on("POST", BASE, (201, made), (200, made))
    assert run(kubeconfig, "create", "room", "--title", "Room", "--task", "writer", "--handoff-limit", "2") == (
        0, "conversation room: alice, writer\n", "")
    assert capsys.readouterr().err == ""
    assert run(kubeconfig, "create", "room")[:2] == (0, "conversation room: alice, writer\n")
    assert capsys.readouterr().err == "note: conversation room exists: kept as it is\n"
    assert sent(state) == [
        ("POST", BASE, {}, {"name": "room", "title": "Room", "handoffLimit": 2, "tasks": ["writer"]}),
        ("POST", BASE, {}, {"name": "room", "title": "", "handoffLimit": rules.DEFAULT_HANDOFF_LIMIT, "tasks": []}),
    ]
    assert state.calls[0].authorization == "Bearer alice-token"  # the user's own credentials

    state.calls.clear()
    state.on("POST", f"{BASE}/room/members", (200, {"kind": "MemberReceipt", "changed": True}),
             (200, {"kind": "MemberReceipt", "changed": False}), (200, {"kind": "MemberReceipt", "changed": True}),
             (200, {"kind": "MemberReceipt", "changed": False}))
    assert run(kubeconfig, "join", "room", "critic", "writer") == (0, "critic joined\nwriter takes part already\n", "")
    assert run(kubeconfig, "leave", "room", "critic", "editor") == (0, "critic left\neditor did not take part\n", "")
    assert [c.body for c in state.calls] == [
        {"task": "critic", "action": "join"}, {"task": "writer", "action": "join"},
        {"task": "critic", "action": "leave"}, {"task": "editor", "action": "leave"}]


def test_post_prints_the_receipt_and_a_repeated_id_posts_once(
        stub: tuple[Stub, Path], capsys: pytest.CaptureFixture[str]) -> None:
    state, kubeconfig = stub
    state.on("POST", f"{BASE}/room/posts", (201, {"kind": "PostReceipt", "seq": 7, "duplicate": False}),
             (200, {"kind": "PostReceipt", "seq": 0, "duplicate": True}))
    state.on("GET", f"{BASE}/room/posts", (200, {"kind": "ConversationPosts", "status": "open", "posts": []}))
    assert run(kubeconfig, "post", "room", "--id", "p1", "@writer", "a tagline") == (0, "posted #7 to room\n", "")
    assert run(kubeconfig, "post", "room", "again", "--id", "p1") == (0, "post p1 was posted before: not again\n", "")
    assert sent(state) == [("POST", f"{BASE}/room/posts", {}, {"id": "p1", "text": "@writer a tagline"}),
                           ("GET", f"{BASE}/room/posts", {"after": "7"}, None),
                           ("POST", f"{BASE}/room/posts", {}, {"id": "p1", "text": "again"})]
    assert capsys.readouterr().err == ""

    state.calls.clear()  # no --id: a new one each time; a paused conversation keeps the post, and says so
    state.on("POST", f"{BASE}/room/posts", (201, {"kind": "PostReceipt", "seq": 8, "duplicate": False}))
    state.on("GET", f"{BASE}/room/posts", (200, {"kind": "ConversationPosts", "status": "paused", "posts": []}))
    assert run(kubeconfig, "post", "room", "hi")[:2] == (0, "posted #8 to room\n")
    assert len(state.calls[0].body["id"]) >= 16
    assert capsys.readouterr().err == ("note: conversation room is paused: post #8 is delivered when it is resumed "
                                       "(kubectl agenttask conv resume room)\n")

    state.calls.clear()  # an answer lost (503): the retry has the same id, and a new id taken is this post, once
    state.on("POST", f"{BASE}/room/posts", (503, {"kind": "Status", "code": 503, "message": "unavailable"}),
             (200, {"kind": "PostReceipt", "seq": 0, "duplicate": True}))
    assert run(kubeconfig, "post", "room", "hi") == (0, "posted to room (by a retried request: once)\n", "")
    assert [c.body for c in state.calls] == [state.calls[0].body] * 2 and state.calls[0].body["text"] == "hi"


def test_show_reads_every_page_and_json_is_the_conversation(stub: tuple[Stub, Path]) -> None:
    state, kubeconfig = stub
    first = [post(seq, f"p{seq}") for seq in range(1, POSTS_PAGE + 1)]
    state.on("GET", f"{BASE}/room", (200, conversation(first)))
    state.on("GET", f"{BASE}/room/posts", (200, {"kind": "ConversationPosts", "status": "open",
                                                 "posts": [post(POSTS_PAGE + 1, "last")]}))
    code, out, _ = run(kubeconfig, "show", "room")
    lines = out.splitlines()
    assert code == 0 and lines[:3] == ["conversation team-a/room: Room [open]",
                                       "participants: alice, writer (agent), critic (agent) (left)",
                                       "#1 alice posted: p1"]
    assert lines[-1] == f"#{POSTS_PAGE + 1} alice posted: last" and len(lines) == POSTS_PAGE + 3
    assert sent(state) == [("GET", f"{BASE}/room", {}, None),
                           ("GET", f"{BASE}/room/posts", {"after": str(POSTS_PAGE)}, None)]
    code, out, _ = run(kubeconfig, "show", "room", "--json", "-n", "team-a")
    shown = json.loads(out)
    assert code == 0 and shown["kind"] == "Conversation" and len(shown["posts"]) == POSTS_PAGE + 1


def test_show_follow_long_polls_until_the_conversation_is_closed(stub: tuple[Stub, Path]) -> None:
    state, kubeconfig = stub
    state.on("GET", f"{BASE}/room", (200, conversation([post(1, "hello")])))
    state.on("GET", f"{BASE}/room/posts",
             (200, {"kind": "ConversationPosts", "status": "open", "posts": [
                 post(2, f"hi{ESC}", kind="answer", sender_kind="task", sender="team-a/writer")]}),
             (200, {"kind": "ConversationPosts", "status": "open", "posts": []}),
             (200, {"kind": "ConversationPosts", "status": "closed", "posts": [
                 post(3, "alice closed the conversation", kind="note", sender_kind="system", sender="")]}))
    code, out, err = run(kubeconfig, "show", "room", "--follow")
    assert (code, err) == (0, "")
    assert out.splitlines()[2:] == ["#1 alice posted: hello", "#2 writer (agent) answered: hi\\x1b[2J",
                                    "#3 - note: alice closed the conversation"]
    assert [c.query for c in state.calls[1:] if c.path == f"{BASE}/room/posts"] == [
        {"after": "1", "wait": "20"}, {"after": "2", "wait": "20"}, {"after": "2", "wait": "20"}]


def test_show_follow_stops_at_its_timeout_and_at_once_when_closed(stub: tuple[Stub, Path]) -> None:
    state, kubeconfig = stub
    state.on("GET", f"{BASE}/room", (200, conversation([])))
    started = time.monotonic()
    assert run(kubeconfig, "show", "room", "-f", "--timeout", "0.5")[0] == 0
    assert time.monotonic() - started < 10
    polls = [c.query for c in state.calls[1:] if c.path == f"{BASE}/room/posts"]
    assert polls and all(query == {"after": "0", "wait": "1"} for query in polls)  # never past the timeout

    state.calls.clear()
    state.on("GET", f"{BASE}/room", (200, conversation([post(1, "bye")], status="closed")))
    assert run(kubeconfig, "show", "room", "-f")[0] == 0
    assert sent(state) == [("GET", f"{BASE}/room", {}, None)]


TASKS = "/apis/tasks.unicore.dev/v1alpha1/namespaces/team-a/agenttasks"


def entry(entry_id: str, kind: str, text: str = "", *, seq: int = 3, attempt: int = 1) -> dict[str, Any]:
    """One entry of a task's ``stream`` answer (``task_api/stream.py``)."""
    return {"id": entry_id, "turn": 2, "call": 0, "seq": seq, "attempt": attempt, "kind": kind, "text": text}


def stream(entries: list[dict[str, Any]], next_id: str, *, busy: bool) -> tuple[int, dict[str, Any]]:
    return 200, {"kind": "TokenStream", "task": "team-a/writer", "next": next_id, "more": False, "entries": entries,
                 "state": {"status": "running" if busy else "idle", "initialised": True, "pending": 0, "busy": busy,
                           "messages": 2}}


def test_show_follow_prints_the_agents_live_text_escaped_then_their_posts(stub: tuple[Stub, Path]) -> None:
    state, kubeconfig = stub
    state.on("GET", f"{BASE}/room", (200, conversation([post(1, "@writer a tagline")])))
    state.on("GET", f"{TASKS}/writer/stream",
             stream([entry("1-0", "attempt"), entry("1-1", "text", "Draft")], "1-1", busy=True),
             stream([entry("2-0", "text", f": tag{ESC}{RLO}line\nsecond")], "2-0", busy=True),
             stream([entry("3-0", "end")], "3-0", busy=False),
             stream([], "3-0", busy=False))
    state.on("GET", f"{BASE}/room/posts",
             (200, {"kind": "ConversationPosts", "status": "open", "posts": []}),
             (200, {"kind": "ConversationPosts", "status": "open", "posts": [
                 post(2, "Draft: tagline", kind="answer", sender_kind="task", sender="team-a/writer")]}),
             (200, {"kind": "ConversationPosts", "status": "closed", "posts": [
                 post(3, "alice closed the conversation", kind="note", sender_kind="system", sender="")]}))
    code, out, err = run(kubeconfig, "show", "room", "--follow")
    assert (code, err) == (0, "")
    assert out.splitlines()[2:] == ["#1 alice posted: @writer a tagline",
                                    "writer (live): Draft: tag\\x1b[2J\\u202eline",
                                    "writer (live): second",
                                    "#2 writer (agent) answered: Draft: tagline",
                                    "#3 - note: alice closed the conversation"]
    assert "\x1b" not in out and RLO not in out
    # the writer's stream from its call in progress, long polls of it while it is busy (the posts then without
    # waiting), the long poll of the posts once it is not; the critic left: its stream is never read
    streams = [c.query for c in state.calls if c.path.endswith("/stream")]
    assert streams[:2] == [{}, {"after": "1-1", "wait": "1"}] and streams[-1] == {"after": "3-0"}
    assert [q.get("after") for q in streams][:4] == [None, "1-1", "2-0", "3-0"]  # (2-0: a long poll unless slow)
    assert {c.path for c in state.calls} == {f"{BASE}/room", f"{BASE}/room/posts", f"{TASKS}/writer/stream"}
    assert [c.query for c in state.calls if c.path == f"{BASE}/room/posts"] == [
        {"after": "1"}, {"after": "1", "wait": "20"}, {"after": "2", "wait": "20"}]


def test_show_follow_json_has_token_events_and_a_task_that_joins_is_followed(
        stub: tuple[Stub, Path], capsys: pytest.CaptureFixture[str]) -> None:
    state, kubeconfig = stub
    joined = conversation([], participants=[{"kind": "user", "name": "alice", "id": "alice", "left": False},
                                            {"kind": "task", "name": "writer", "id": "team-a/writer", "left": False},
                                            {"kind": "task", "name": "editor", "id": "team-a/editor", "left": False}])
    state.on("GET", f"{BASE}/room", (200, conversation([post(1, "hello")])), (200, joined))
    state.on("GET", f"{TASKS}/writer/stream",
             stream([entry("1-0", "attempt"), entry("1-1", "text", f"Hi{ESC}")], "1-1", busy=False),
             stream([], "1-1", busy=False))
    state.on("GET", f"{TASKS}/editor/stream", (403, {
        "kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'User "alice" cannot get resource "agenttasks/stream" in API group "tasks.unicore.dev"'}))
    editor_joined = post(2, "editor joined", kind="joined", sender_kind="system", sender="")
    closing = post(3, "alice closed the conversation", kind="note", sender_kind="system", sender="")
    state.on("GET", f"{BASE}/room/posts", (200, {"kind": "ConversationPosts", "status": "open",
                                                 "posts": [editor_joined]}),
             (200, {"kind": "ConversationPosts", "status": "closed", "posts": [closing]}))
    code, out, _ = run(kubeconfig, "show", "room", "-f", "--json")
    lines = out.splitlines()
    followed = [json.loads(line) for line in lines[lines.index("}") + 1:]]
    assert code == 0 and followed == [
        {"event": "token", "task": "team-a/writer", "seq": 3, "attempt": 1, "text": f"Hi{ESC}"},  # JSON: exact
        editor_joined, closing]
    assert [(c.path, c.query) for c in state.calls if "/stream" in c.path or c.path == f"{BASE}/room"] == [
        (f"{BASE}/room", {}), (f"{TASKS}/writer/stream", {}), (f"{BASE}/room", {"after": "2"}),
        (f"{TASKS}/writer/stream", {"after": "1-1"}), (f"{TASKS}/editor/stream", {})]
    assert capsys.readouterr().err == (  # a stream it may not read: a note; its posts still come
        "note: no live answers of team-a/editor (forbidden: alice cannot get agenttasks/stream (tasks.unicore.dev) "
        "in namespace team-a, so cannot read its agent tasks (ask for the unicore-agenttask-reader role there)); its "
        "posts still come\n")

    state.calls.clear()  # --no-tokens: posts only
    assert run(kubeconfig, "show", "room", "-f", "--no-tokens")[0] == 0
    assert [c.path for c in state.calls] == [f"{BASE}/room", f"{BASE}/room/posts"]


def test_pause_resume_close_delete_and_list(stub: tuple[Stub, Path]) -> None:
    state, kubeconfig = stub
    state.on("POST", f"{BASE}/room/control", (200, {"kind": "ControlReceipt", "status": "paused", "changed": True}),
             (200, {"kind": "ControlReceipt", "status": "open", "changed": True}),
             (200, {"kind": "ControlReceipt", "status": "closed", "changed": False}))
    assert run(kubeconfig, "pause", "room")[:2] == (0, "conversation room is now paused\n")
    assert run(kubeconfig, "resume", "room")[:2] == (0, "conversation room is now open\n")
    assert run(kubeconfig, "close", "room")[:2] == (0, "conversation room was already closed\n")
    assert [c.body for c in state.calls] == [{"action": "pause"}, {"action": "resume"}, {"action": "close"}]
    state.calls.clear()
    state.on("GET", BASE, (200, {"kind": "ConversationList", "items": [
        {"name": "room", "title": "Room", "status": "open", "posts": 3}]}))
    assert run(kubeconfig, "list") == (0, "room  [open]  posts=3  Room\n", "")
    state.on("DELETE", f"{BASE}/room", (200, {"kind": "Status", "status": "Success"}))
    assert run(kubeconfig, "delete", "room") == (0, "conversation room deleted\n", "")
    assert sent(state) == [("GET", BASE, {}, None), ("DELETE", f"{BASE}/room", {}, None)]


def test_refusals_are_one_line_and_exit_1(stub: tuple[Stub, Path]) -> None:
    state, kubeconfig = stub
    state.on("POST", f"{BASE}/room/posts", (403, {
        "kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'conversations.tasks.unicore.dev "room" is forbidden: User "alice" cannot create resource '
                   '"conversations/posts" in API group "tasks.unicore.dev" in the namespace "team-a"'}))
    assert run(kubeconfig, "post", "room", "hi", "--id", "x") == (1, "", (
        "error: forbidden: alice cannot create conversations/posts (tasks.unicore.dev) in namespace team-a, so "
        "cannot post to its conversations (ask for the unicore-agenttask-messenger role there)\n"))
    state.on("GET", f"{BASE}/nope", (404, {"kind": "Status", "code": 404, "reason": "NotFound",
                                           "message": "conversation team-a/nope not found",
                                           "details": {"name": "nope", "kind": "conversations"}}))
    assert run(kubeconfig, "show", "nope") == (1, "", "error: conversation team-a/nope not found\n")
    state.on("POST", f"{BASE}/room/control", (409, {"kind": "Status", "code": 409, "reason": "Conflict",
                                                    "message": f"conversation team-a/room is closed{ESC}"}))
    assert run(kubeconfig, "resume", "room") == (1, "", "error: conversation team-a/room is closed\\x1b[2J\n")
    state.on("POST", f"{BASE}/room/members", (404, {
        "kind": "Status", "code": 404, "reason": "NotFound", "message": 'agenttask "team-a/ghost" not found',
        "details": {"name": "ghost", "kind": "agenttasks"}}))
    assert run(kubeconfig, "join", "room", "ghost") == (1, "", 'error: agenttask "team-a/ghost" not found\n')
    state.on("POST", BASE, (422, {"kind": "Status", "code": 422, "reason": "Invalid", "message": "tasks: too many"}))
    code, _, err = run(kubeconfig, "create", "room")
    assert code == 1 and err == "error: the task API answered HTTP 422: tasks: too many\n"
