"""The web UI in a real browser (Debian's chromium via Playwright): ``unicore ui`` and the task trees it starts run
for real (real redis-server, scripted model, the local supervisor, turn processes)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from unicore.api.schema import TaskSpec
from unicore.store import command_jobs
from unicore.store.command_jobs import JobOutcome
from unicore.store.tasks import TaskStore, connect
from unicore.store.token_stream import StreamSettings, publish

from tests.ui.conftest import REPO, UI

pytestmark = pytest.mark.ui
SETTLE = 90_000  # ms: a tree of three tasks on a busy 2-core machine
DOCS = REPO / "docs"


def screenshot(page: Any, name: str, tmp_path: Path, **options: Any) -> None:
    """docs/<name> when it is missing or UNICORE_UI_SCREENSHOTS=1 (so a test run leaves the tree clean), else tmp."""
    target = DOCS / name
    if target.exists() and os.environ.get("UNICORE_UI_SCREENSHOTS") != "1":
        target = tmp_path / name
    page.screenshot(path=str(target), **options)
    assert target.stat().st_size > 0

TREE_SCRIPT = """
default: "Done."
tasks:
  "water":
    - tool_use:
        - {name: spawn_task, input: {name: a, prompt: "Find the boiling point of water."}}
        - {name: spawn_task, input: {name: b, prompt: "Find the freezing point of water."}}
    - text: "I asked two helpers; waiting for them."
    - text: "Report: both helpers answered."
    - sleep: 1.0
      text: "Follow-up answer: water boils at 100 C at sea level."
  "water-*":
    - sleep: 1.0
      text: "Helper reporting: done."
"""
WATCH_STREAMING = """() => {
  window.streamed = [];
  new MutationObserver((changes) => {
    for (const change of changes) for (const node of change.addedNodes)
      if (node.classList && node.classList.contains("streaming")) window.streamed.push(node);
  }).observe(document.getElementById("live"), { childList: true });
}"""
HOSTILE = '<script>alert(1)</script> and <img src=x onerror="alert(2)"> stay text'


def create(page: Any, ui: UI, prompt: str, model: str, name: str) -> None:
    page.goto(ui.url)
    page.get_by_label("Prompt").fill(prompt)
    page.get_by_label("Model").fill(model)
    page.get_by_label("Name (optional)").fill(name)
    page.get_by_role("button", name="Create").click()
    expect(page.locator("#task-title")).to_have_text(name)


def test_a_created_tree_grows_and_settles_live_and_a_follow_up_is_answered(page, ui, tmp_path: Path):
    script = tmp_path / "tree.yaml"
    script.write_text(TREE_SCRIPT)
    create(page, ui, "Tell me about water.", f"scripted:{script.name}", "water")
    page.evaluate("window.notReloaded = true")  # a reload would lose it: everything below arrives live

    page.get_by_role("link", name="All tasks").click()
    for child in ("water-a", "water-b"):  # spawned by the model after the page was opened
        expect(page.locator(f'li[data-task="{child}"]')).to_have_attribute("data-phase", "done", timeout=SETTLE)
    expect(page.locator('li[data-task="water"]')).to_have_attribute("data-phase", "done", timeout=SETTLE)
    expect(page.locator('li[data-task="water"] .meta')).to_contain_text("turns 2")
    screenshot(page, "ui-tree.png", tmp_path)

    page.get_by_role("link", name="water", exact=True).click()
    transcript = page.locator("#transcript")
    expect(transcript).to_contain_text("Report: both helpers answered.")
    transcript.locator("summary").first.click()  # the spawn call, opened: its input and result
    expect(transcript.locator("details").first).to_contain_text("water-a")
    page.evaluate(WATCH_STREAMING)
    page.get_by_label("Message").fill("And the boiling point?")
    page.get_by_role("button", name="Send").click()
    expect(transcript).to_contain_text("And the boiling point?", timeout=SETTLE)
    expect(transcript).to_contain_text("Follow-up answer: water boils at 100 C", timeout=SETTLE)
    expect(page.locator("#task-status")).to_have_attribute("data-phase", "done", timeout=SETTLE)
    assert page.evaluate("window.notReloaded") is True
    streamed = page.evaluate("window.streamed.map(node => node.textContent)")  # live text before the stored answer
    assert any("Follow-up answer:" in text for text in streamed), streamed
    assert page.locator("#live .streaming").count() == 0  # replaced by the stored message
    assert transcript.get_by_text("And the boiling point?").count() == 1  # sent once
    screenshot(page, "ui-task.png", tmp_path, full_page=True)


def test_model_text_with_markup_is_shown_as_text(page, ui, tmp_path: Path):
    script = tmp_path / "hostile.yaml"
    script.write_text("tasks:\n  hostile:\n    - text: '" + HOSTILE + "'\n")
    create(page, ui, "Say something nasty.", f"scripted:{script.name}", "hostile")
    answer = page.locator("#transcript .msg.assistant .text")
    expect(answer).to_have_text(HOSTILE, timeout=SETTLE)
    assert answer.evaluate("node => node.textContent") == HOSTILE
    assert page.locator("img").count() == 0
    assert page.locator("#transcript script").count() == 0
    assert ui.dialogs == []


def test_the_running_calls_tokens_stream_in_and_a_new_try_replaces_them(page, ui, redis_url):
    store = TaskStore(connect(redis_url))
    store.create_task(TaskSpec(id="live", prompt="Stream something.", model="scripted"))  # not activated: idle
    page.goto(ui.url)
    page.goto(f"{ui.base}/#/task/live")
    expect(page.locator("#conn")).to_have_text("live")

    def entry(attempt: int, text: str) -> dict[str, Any]:
        return {"turn": 0, "call": 0, "seq": 1, "attempt": attempt, "kind": "text", "text": text}

    streaming = page.locator("#live .streaming .text")
    publish(store.redis, "live", [entry(1, "Hello ")], StreamSettings())
    expect(streaming).to_have_text("Hello ")
    publish(store.redis, "live", [entry(1, "<b>world</b>")], StreamSettings())
    expect(streaming).to_have_text("Hello <b>world</b>")
    publish(store.redis, "live", [entry(2, "Again")], StreamSettings())  # a new try: the old text is void
    expect(streaming).to_have_text("Again")
    assert page.locator("#live b").count() == 0


def test_a_gated_call_waits_for_the_approve_button_then_runs(page, ui, tmp_path: Path):
    shutil.copy(REPO / "examples" / "approval-script.yaml", tmp_path)  # the UI reads its --scripts directory only
    page.goto(ui.url)
    page.get_by_label("Prompt").fill("Release note")
    page.get_by_label("Model").fill("scripted:approval-script.yaml")
    page.get_by_label("Name (optional)").fill("rel")
    page.get_by_label("Tools that wait for approval (comma-separated, optional)").fill("write_file")
    page.get_by_role("button", name="Create").click()
    expect(page.locator("#task-status")).to_have_attribute("data-phase", "waiting", timeout=SETTLE)
    expect(page.locator("#pending")).to_contain_text("write_file")
    approve = page.get_by_role("button", name="Approve")
    approve.focus()
    page.keyboard.press("Enter")  # keyboard only
    expect(page.locator("#task-status")).to_have_attribute("data-phase", "done", timeout=SETTLE)
    expect(page.locator("#pending")).to_be_empty()
    call = page.locator("#transcript details").first
    expect(call).to_contain_text("result (success)", timeout=SETTLE)


def test_light_and_dark_follow_the_system(browser, ui):
    colours = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme)
        try:
            opened = context.new_page()
            opened.goto(ui.url)
            expect(opened.locator("#conn")).to_have_text("live")
            colours[scheme] = opened.evaluate("getComputedStyle(document.body).backgroundColor")
        finally:
            context.close()
    assert colours == {"light": "rgb(255, 255, 255)", "dark": "rgb(13, 17, 23)"}


def test_a_running_commands_output_streams_in_as_a_command_and_markup_stays_text(page, ui, redis_url,
                                                                                 tmp_path: Path):
    store = TaskStore(connect(redis_url))
    store.create_task(TaskSpec(id="cmd", prompt="Run something.", model="scripted"))  # not activated: idle
    page.goto(ui.url)
    page.goto(f"{ui.base}/#/task/cmd")
    expect(page.locator("#conn")).to_have_text("live")

    def entry(kind: str, text: str = "") -> dict[str, Any]:  # a run_command command's live output (issue 28)
        return {"turn": 0, "call": 1_000_000, "seq": 2, "attempt": 1, "kind": kind, "text": text}

    publish(store.redis, "cmd", [entry("attempt"), entry("output", "$ make train\n")], StreamSettings())
    command = page.locator("#live .streaming.tool")
    expect(command.locator(".who")).to_have_text("Command (running\u2026)")
    publish(store.redis, "cmd", [entry("output", "<b>epoch 1</b> loss 0.5\n")], StreamSettings())
    expect(command.locator(".text.output")).to_have_text("$ make train\n<b>epoch 1</b> loss 0.5\n")
    assert page.locator("#live b").count() == 0
    screenshot(page, "ui-command.png", tmp_path)


def test_a_tasks_command_jobs_are_listed_with_their_state_as_text(page, ui, redis_url):
    store = TaskStore(connect(redis_url))
    store.create_task(TaskSpec(id="trainer", prompt="Train.", model="scripted"))  # not activated: idle
    lease = store.acquire_lease("trainer")
    for command in ("python prep.py", "python train.py <b>--epochs 3</b>"):
        command_jobs.request_job(store, lease, {"command": command, "gpus": 1, "timeout_seconds": 60})
    store.release_lease(lease)
    first = command_jobs.job_states(store, "trainer")[0]
    command_jobs.mark_created(store, "trainer", 1, "local")
    command_jobs.deliver_result(store, "trainer", "trainer-j1", first.request, JobOutcome("succeeded", exit_code=0))
    page.goto(ui.url)
    page.goto(f"{ui.base}/#/task/trainer")
    jobs = page.locator("#task-jobs li")
    expect(jobs).to_have_count(2)
    expect(jobs.nth(0)).to_have_text("Job trainer-j1 \u00b7 Succeeded \u00b7 1 GPU \u00b7 exit 0 \u00b7 python prep.py")
    expect(jobs.nth(1)).to_have_text(
        "Job trainer-j2 \u00b7 Requested \u00b7 1 GPU \u00b7 python train.py <b>--epochs 3</b>")
    assert page.locator("#task-jobs b").count() == 0
