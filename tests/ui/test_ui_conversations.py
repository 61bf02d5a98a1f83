"""Shared conversations in the web UI (issue 33, local mode): the Conversations list and a conversation's page in a
real browser (Debian's chromium via Playwright), with ``unicore ui``, its supervisor and two scripted agents' turn
processes running for real; a conversation created from the list page's form and a task added and removed on its
page; and the HTTP API without a browser (a client id posted once, a closed conversation's 409, the guards of the
other POST routes)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from unicore.api.schema import TaskSpec
from unicore.store import conversations
from unicore.store.tasks import TaskStore, connect
from unicore_client.local.tree_runs import script_spec

from tests.ui.conftest import UI
from tests.ui.test_ui_browser import screenshot
from tests.ui.test_ui_http import cookie, csrf, read_events, request

pytestmark = pytest.mark.ui
SETTLE = 90_000  # ms: two agents' turns on a busy 2-core machine
HOSTILE = "Morning! <img src=x onerror=alert(1)> What is the status?"
HOSTILE_TITLE = "War room <img src=x onerror=alert(1)> \u202eevil"
AGENTS = """
default: "Noted."
tasks:
  alice:
    - sleep: 0.5
      text: "Alice: the numbers are in. <b>Revenue</b> is up."
  bob:
    - sleep: 4
      text: "Bob: I will write the summary."
"""


@pytest.fixture(autouse=True)
def person(monkeypatch: pytest.MonkeyPatch) -> str:
    """The person of ``unicore ui`` (the account running it: ``getpass.getuser``, which reads LOGNAME first), set
    before the ``ui`` fixture starts it."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "ana")
    return "ana"


def seed(store: TaskStore, tmp_path: Path, agents: tuple[str, ...] = ("alice", "bob")) -> None:
    """Conversation ``standup`` with the scripted ``agents`` taking part (idle: created without a prompt)."""
    path = tmp_path / "agents.yaml"
    path.write_text(AGENTS)
    model, script = script_spec(f"scripted:{path}", None)
    conversations.create(store, "standup", title="Daily standup", created_by="lead")
    for agent in agents:
        store.create_task(TaskSpec(id=agent, model=model, script=script))
        conversations.join(store, "standup", "task", agent)


def test_a_persons_post_and_two_agents_answers_appear_live_in_order_as_text(page: Any, ui: UI, redis_url: str,
                                                                           tmp_path: Path) -> None:
    store = TaskStore(connect(redis_url))
    seed(store, tmp_path)
    page.goto(ui.url)
    page.get_by_role("link", name="Conversations").click()
    row = page.locator('li[data-conversation="standup"]')
    expect(row).to_contain_text("Daily standup")
    expect(row).to_contain_text("agents alice, bob")
    row.get_by_role("link", name="standup").click()
    expect(page.locator("#conversation-title")).to_have_text("Daily standup (standup)")
    expect(page.locator("#conn")).to_have_text("live")
    page.evaluate("window.notReloaded = true")  # a reload would lose it: everything below arrives live

    page.get_by_label("Your post").fill(HOSTILE)
    page.get_by_role("button", name="Post").click()
    posts = page.locator("#posts")
    bob = page.locator('#participants li[data-participant="bob"]')
    expect(bob).to_have_attribute("data-state", "running", timeout=SETTLE)  # its live state, while it sleeps
    expect(bob).to_contain_text("agent \u00b7 running")
    expect(posts.locator('li[data-kind="answer"]')).to_have_count(2, timeout=SETTLE)
    for agent in ("alice", "bob"):
        expect(page.locator(f'#participants li[data-participant="{agent}"]')).to_have_attribute(
            "data-state", "idle", timeout=SETTLE)
    assert page.evaluate("window.notReloaded") is True

    stored = conversations.posts(store, "standup")
    shown = posts.locator("li[data-seq]").evaluate_all(
        "nodes => nodes.map(n => [Number(n.dataset.seq), n.dataset.kind, n.dataset.sender, "
        "n.querySelector('.text').textContent])")
    assert shown == [[p.seq, p.kind, p.sender_kind, p.text] for p in stored]  # every post once, in order
    said = [(p.kind, p.sender_kind, p.sender) for p in stored if p.kind in ("post", "answer")]
    assert said[0] == ("post", "user", "ana") and sorted(said[1:]) == [("answer", "task", "alice"),
                                                                       ("answer", "task", "bob")]
    expect(page.locator('#participants li[data-participant="ana"]')).to_have_text("ana person")
    mine = posts.locator('li[data-kind="post"] .text')
    assert mine.evaluate("node => node.textContent") == HOSTILE  # the markup is text: no element, no dialog
    expect(posts.locator('li[data-kind="answer"]').filter(has_text="Alice:")).to_contain_text(
        "<b>Revenue</b> is up.")
    assert page.locator("img").count() == 0 and page.locator("#posts b").count() == 0
    assert ui.dialogs == []
    expect(posts.locator('li[data-kind="answer"]').filter(has_text="Bob:").locator(".who")).to_contain_text(
        "bob (agent) answered")
    expect(page.locator("#conversation-status")).to_have_attribute("data-status", "open")
    expect(page.get_by_label("Your post")).to_have_value("")
    screenshot(page, "ui-conversation.png", tmp_path, full_page=True)

    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#conversation-status")).to_have_attribute("data-status", "paused")
    expect(page.locator("#post-paused")).to_contain_text("paused")
    expect(page.get_by_role("button", name="Resume")).to_be_enabled()
    page.get_by_role("button", name="Close").click()
    expect(page.locator("#conversation-status")).to_have_attribute("data-status", "closed")
    expect(page.get_by_label("Your post")).to_be_disabled()
    expect(page.locator("#post-form button")).to_be_disabled()
    expect(page.locator("#post-paused")).to_contain_text("closed")
    expect(posts.locator('li[data-kind="note"]').last).to_contain_text("ana closed the conversation")

    page.goto(f"{ui.base}/#/task/alice")  # a task's page links to its conversations
    page.locator("#task-conversations").get_by_role("link", name="standup").click()
    expect(page.locator("#conversation-status")).to_have_attribute("data-status", "closed")


def test_a_client_id_posts_once_and_a_closed_conversation_refuses_with_409(ui: UI, redis_url: str,
                                                                           tmp_path: Path) -> None:
    store = TaskStore(connect(redis_url))
    seed(store, tmp_path, agents=("alice",))
    jar = cookie(ui)
    headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}
    path = "/api/conversations/standup"
    body = {"text": "only once", "id": "c0ffee00-0001"}
    assert request(ui, "POST", f"{path}/posts", headers={"Cookie": jar}, body=body).status == 403  # no CSRF header
    foreign = {**headers, "Origin": "http://evil.example"}
    assert request(ui, "POST", f"{path}/posts", headers=foreign, body=body).status == 403
    first = request(ui, "POST", f"{path}/posts", headers=headers, body=body)
    again = request(ui, "POST", f"{path}/posts", headers=headers, body=body)
    assert first.status == 200 and again.status == 200
    assert json.loads(first.read())["posted"] is True
    assert json.loads(again.read()) == {"posted": False, "seq": None}
    listed = json.loads(request(ui, "GET", f"{path}/posts?after=0", headers={"Cookie": jar}).read())["posts"]
    assert [p["text"] for p in listed if p["kind"] == "post"] == ["only once"]
    bad = request(ui, "POST", f"{path}/posts", headers=headers, body={"text": "x", "id": "<b>"})
    assert bad.status == 400

    stream = request(ui, "GET", f"{path}/events?after=0", headers={"Cookie": jar})
    assert stream.getheader("Content-Type", "").startswith("text/event-stream")
    events = read_events(stream, len(listed) + 1)
    assert [e[2]["seq"] for e in events if e[1] == "post"] == [p["seq"] for p in listed]
    resumed = request(ui, "GET", f"{path}/events", headers={"Cookie": jar, "Last-Event-ID": str(listed[-2]["seq"])})
    last = str(listed[-1]["seq"])
    assert [(e[0], e[1]) for e in read_events(resumed, 2)] == [(last, "post"), (last, "conversation")]

    closed = request(ui, "POST", f"{path}/close", headers=headers, body={})
    assert closed.status == 200 and json.loads(closed.read()) == {"status": "closed", "changed": True}
    refused = request(ui, "POST", f"{path}/posts", headers=headers, body={"text": "too late", "id": "c0ffee00-0002"})
    assert refused.status == 409
    assert json.loads(refused.read()) == {"error": "conversation standup is closed: it takes no more posts"}
    assert request(ui, "POST", f"{path}/resume", headers=headers, body={}).status == 409
    assert request(ui, "GET", "/api/conversations/nope", headers={"Cookie": jar}).status == 404
    assert request(ui, "POST", "/api/conversations/nope/posts", headers=headers, body=body).status == 404
    assert request(ui, "GET", "/api/conversations/standup/events?after=0").status == 401  # no token cookie


def test_a_conversation_created_from_the_list_with_a_task_then_another_added_on_its_page(page: Any, ui: UI,
                                                                                        redis_url: str) -> None:
    store = TaskStore(connect(redis_url))
    for agent in ("alice", "bob"):
        store.create_task(TaskSpec(id=agent, model="scripted"))  # no prompt: idle
    page.goto(ui.url)
    page.get_by_role("link", name="Conversations").click()
    form = page.locator("#conversation-create-form")
    form.get_by_label("Name").fill("war-room")
    form.get_by_label("Title").fill(HOSTILE_TITLE)
    form.get_by_label("Tasks that take part").fill("alice")
    form.get_by_role("button", name="Create conversation").click()

    expect(page).to_have_url(re.compile(r"#/conversation/war-room$"))
    expect(page.locator("#conversation-title")).to_have_text(f"{HOSTILE_TITLE} (war-room)")
    expect(page.locator("#conn")).to_have_text("live")
    participants = page.locator("#participants")
    expect(participants.locator('li[data-participant="alice"]')).to_have_attribute("data-state", "idle")
    expect(participants.locator('li[data-participant="ana"]')).to_have_text("ana person")  # who created it

    page.get_by_label("Add a task").fill("bob")
    page.get_by_role("button", name="Add", exact=True).click()
    bob = participants.locator('li[data-participant="bob"]')
    expect(bob).to_have_attribute("data-state", "idle")
    expect(bob).to_contain_text("agent \u00b7 idle")
    expect(page.get_by_label("Add a task")).to_have_value("")
    expect(page.locator("#posts li[data-kind=joined]")).to_have_count(3)  # ana, alice, bob: live, in order
    page.get_by_label("Add a task").fill("ghost")
    page.get_by_role("button", name="Add", exact=True).click()
    expect(page.locator("#member-error")).to_have_text(
        "no task ghost: run it first (unicore run ... --name NAME, or New task)")
    participants.get_by_role("button", name="Remove alice").click()
    expect(participants.locator('li[data-participant="alice"]')).to_have_attribute("data-state", "left")
    expect(participants.get_by_role("button", name="Remove alice")).to_have_count(0)

    meta = conversations.read_meta(store, "war-room")
    assert (meta.title, meta.created_by) == (HOSTILE_TITLE, "ana")  # stored as typed
    assert {(m.id, m.left) for m in conversations.members(store, "war-room")} == {
        ("ana", False), ("alice", True), ("bob", False)}
    assert page.locator("img").count() == 0 and ui.dialogs == []  # the title is text: no element, no dialog

    page.get_by_role("link", name="All conversations").click()
    row = page.locator('li[data-conversation="war-room"]')
    expect(row).to_contain_text(HOSTILE_TITLE)
    expect(row).to_contain_text("agents bob")
    form.get_by_label("Name").fill("war-room")  # again: not an error, kept as it is; alice, named, joins again
    form.get_by_label("Title").fill("Another title")
    form.get_by_label("Tasks that take part").fill("alice,")
    form.get_by_role("button", name="Create conversation").click()
    expect(page.locator("#conversation-note")).to_have_text(
        "war-room existed: kept as it is (the tasks named take part).")
    expect(page.locator("#conversation-title")).to_have_text(f"{HOSTILE_TITLE} (war-room)")
    expect(participants.locator('li[data-participant="alice"]')).to_have_attribute("data-state", "idle")
    page.get_by_role("link", name="All conversations").click()
    form.get_by_label("Name").fill("Not A Name")
    form.get_by_role("button", name="Create conversation").click()
    expect(page.locator("#conversation-create-error")).to_contain_text("not a conversation name: 'Not A Name'")
    assert page.locator("img").count() == 0 and ui.dialogs == []

