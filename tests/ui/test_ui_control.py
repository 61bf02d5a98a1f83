"""The web UI's controls in a real browser (Debian's chromium via Playwright): suspend, resume and stop, create with
limits and from YAML, the Events panel, the keyboard, and a tree of 1,000 tasks and a transcript of 10,000 messages.
``unicore ui``, its supervisors and the turn processes run for real (real redis-server, scripted model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from unicore.store import suspension
from unicore.store.gates import open_gate
from unicore.store.tasks import TaskStore, connect

from tests.ui.conftest import UI
from tests.ui.seeding import seed_forest, seed_transcript

pytestmark = pytest.mark.ui
SETTLE = 90_000  # ms
CANCELLED = "turn cancelled (SIGTERM) at a safe point"

TREE_MANIFEST = """
apiVersion: unicore.dev/v1alpha1
kind: AgentTask
metadata:
  name: crew
spec:
  prompt: Split the work.
  model: scripted
  limits: {maxChildren: 4}
  script:
    default: Done.
    tasks:
      crew:
        - tool_use:
            - {name: spawn_task, input: {name: a, prompt: "part a"}}
            - {name: spawn_task, input: {name: b, prompt: "part b"}}
        - text: "Waiting for my helpers."
      "crew-*":
        - {sleep: 60, text: "helper done"}
"""


def tab_to(page: Any, name: str, limit: int = 60) -> None:
    """Press Tab until the button called ``name`` has the focus (keyboard only); fail after ``limit`` presses."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.textContent.trim()") == name:
            return
    raise AssertionError(f"Tab never reached the {name!r} button")


def test_suspend_a_running_task_then_resume_it_from_the_keyboard(page: Any, ui: UI, redis_url: str,
                                                                  tmp_path: Path) -> None:
    script = tmp_path / "slow.yaml"
    # the answer waits at a gate the test opens after the suspend: the turn is observably running until then
    script.write_text("tasks:\n  slow:\n    - {gate: suspended, text: 'slow answer'}\n")
    store = TaskStore(connect(redis_url))
    page.goto(ui.url)
    page.get_by_label("Prompt").fill("Take your time.")
    page.get_by_label("Model").fill(f"scripted:{script.name}")
    page.get_by_label("Name (optional)").fill("slow")
    page.get_by_text("Limits (optional").click()
    page.get_by_label("Iterations per turn").fill("7")
    page.get_by_label("Children per task").fill("2")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page.locator("#task-title")).to_have_text("slow")
    limits = store.get_task("slow").limits
    assert (limits.max_iterations, limits.max_children, limits.max_depth) == (7, 2, 3)  # the rest: defaults
    page.evaluate("window.notReloaded = true")
    status = page.locator("#task-status")
    expect(status).to_have_attribute("data-phase", "running", timeout=SETTLE)

    tab_to(page, "Suspend")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"  # the focus is visible
    page.keyboard.press("Enter")
    expect(status).to_have_attribute("data-phase", "suspended", timeout=SETTLE)
    expect(page.get_by_role("button", name="Suspend")).to_be_disabled()
    expect(page.get_by_role("button", name="Resume")).to_be_enabled()
    expect(page.locator("#task-error")).to_have_text(CANCELLED, timeout=SETTLE)  # the turn was stopped, not left
    assert store.lease_holder("slow") is None and store.get_task("slow").last_response == ""

    page.get_by_text("Events", exact=True).click()
    events = page.locator("#events")
    expect(events).to_contain_text("Suspended")
    expect(events).to_contain_text("TurnStarted")
    expect(events.locator("tr.event-Warning")).to_contain_text(CANCELLED)

    open_gate(store.redis, "slow", "suspended")  # the resumed turn's model call answers at once
    tab_to(page, "Resume")
    page.keyboard.press("Enter")
    expect(status).to_have_attribute("data-phase", "done", timeout=SETTLE)
    expect(page.locator("#transcript")).to_contain_text("slow answer", timeout=SETTLE)
    expect(events).to_contain_text("Resumed")
    expect(events).to_contain_text("TurnEnded")
    assert page.evaluate("window.notReloaded") is True
    record = store.get_task("slow")
    assert not record.suspended and record.turns == 1 and record.last_error == ""


def test_stop_a_tree_created_from_yaml_ends_its_childrens_turns(page: Any, ui: UI, redis_url: str) -> None:
    store = TaskStore(connect(redis_url))
    page.goto(ui.url)
    page.get_by_text("New task from YAML").click()
    page.get_by_label("AgentTask manifest").fill(TREE_MANIFEST)
    page.get_by_role("button", name="Create from YAML").click()
    expect(page.locator("#task-title")).to_have_text("crew")
    assert store.get_task("crew").limits.max_children == 4
    page.evaluate("window.notReloaded = true")
    page.get_by_role("link", name="All tasks").click()
    for child in ("crew-a", "crew-b"):
        expect(page.locator(f'li[data-task="{child}"]')).to_have_attribute("data-phase", "running", timeout=SETTLE)

    page.get_by_role("link", name="crew", exact=True).click()
    page.get_by_role("button", name="Stop tree").click()
    expect(page.locator("#task-status")).to_have_attribute("data-phase", "suspended", timeout=SETTLE)
    page.get_by_role("link", name="All tasks").click()
    for task_id in ("crew", "crew-a", "crew-b"):
        expect(page.locator(f'li[data-task="{task_id}"]')).to_have_attribute("data-phase", "suspended",
                                                                               timeout=SETTLE)
    for child in ("crew-a", "crew-b"):  # their 60 s answers were cut: the turns stopped, nothing stored
        record = store.get_task(child)
        assert record.suspended and record.last_response == ""
        expect(page.locator(f'li[data-task="{child}"] .meta')).to_contain_text("suspended")
    assert all(store.lease_holder(t) is None for t in ("crew-a", "crew-b"))
    assert page.evaluate("window.notReloaded") is True


def test_a_bad_manifest_is_one_line_and_creates_nothing(page: Any, ui: UI, redis_url: str) -> None:
    page.goto(ui.url)
    page.get_by_text("New task from YAML").click()
    manifest = TREE_MANIFEST.replace("limits: {maxChildren: 4}", "limits: {maxChildren: 4, turns: 2}")
    page.get_by_label("AgentTask manifest").fill(manifest)
    page.get_by_role("button", name="Create from YAML").click()
    error = page.locator("#yaml-error")
    expect(error).to_contain_text("spec.limits.turns")
    assert "\n" not in error.inner_text()
    assert not TaskStore(connect(redis_url)).exists("crew")


def test_a_tree_of_1000_tasks_updates_in_place_and_keeps_the_focus(page: Any, ui: UI, redis_url: str) -> None:
    store = TaskStore(connect(redis_url))
    ids = seed_forest(store, roots=10, children_per_root=99)
    page.goto(ui.url)
    expect(page.locator("#tree")).to_have_attribute("data-rendered", "1000", timeout=SETTLE)
    assert page.locator("#tree li").count() == 1000
    target = ids[500]
    link = page.get_by_role("link", name=target, exact=True)
    link.focus()
    suspension.suspend(store, target)
    row = page.locator(f'li[data-task="{target}"]')
    expect(row).to_have_attribute("data-phase", "suspended", timeout=SETTLE)
    assert page.evaluate("document.activeElement.textContent") == target  # the row was updated, not replaced


def test_a_transcript_of_10000_messages_shows_the_newest_page_and_loads_older(page: Any, ui: UI,
                                                                               redis_url: str) -> None:
    store = TaskStore(connect(redis_url))
    seed_transcript(store, "long", 10_000)
    page.goto(ui.url)
    page.goto(f"{ui.base}/#/task/long")
    transcript = page.locator("#transcript")
    expect(transcript.locator('[data-seq="9999"]')).to_have_text("Assistantmessage 9999", timeout=SETTLE)
    assert transcript.locator(".msg").count() == 200
    assert transcript.locator('[data-seq="9799"]').count() == 0
    page.get_by_role("button", name="Load earlier messages").click()
    expect(transcript.locator('[data-seq="9600"]')).to_have_text("Usermessage 9600")
    assert transcript.locator(".msg").count() == 400
    seqs = transcript.locator(".msg").evaluate_all("nodes => nodes.map(n => Number(n.dataset.seq))")
    assert seqs == sorted(seqs) and seqs[0] == 9600  # older above, in order


def test_the_api_refuses_bad_limits_and_reports_events(ui: UI, redis_url: str) -> None:
    from tests.ui.test_ui_http import cookie, csrf, request

    jar = cookie(ui)
    headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}
    body = {"prompt": "hi", "model": "scripted", "name": "lim", "limits": {"max_children": 5000}}
    reply = request(ui, "POST", "/api/tasks", headers=headers, body=body)
    assert reply.status == 400
    assert json.loads(reply.read())["error"].startswith("limits.max_children: Input should be less than or equal")
    reply = request(ui, "POST", "/api/tasks", headers=headers, body={**body, "limits": {"turns": 3}})
    assert reply.status == 400 and "limits.turns" in json.loads(reply.read())["error"]
    assert not TaskStore(connect(redis_url)).exists("lim")
    for control in ("suspend", "resume", "stop"):
        assert request(ui, "POST", f"/api/tasks/nobody/{control}", headers=headers, body={}).status == 404
    assert request(ui, "GET", "/api/tasks/nobody/eventlog", headers={"Cookie": jar}).status == 404
