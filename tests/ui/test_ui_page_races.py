"""The page under hurried or odd input, in a real browser (Debian's chromium via Playwright; issue 24, item 7): a
double click on "Load earlier messages" loads each page once, a double click on Approve decides once and throws
nothing, and a malformed task address (``#/task/%E0%A4%A``) shows an error instead of throwing a URIError. Every test
fails on an error the page did not catch (``pageerror``: uncaught exceptions and unhandled promise rejections)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from unicore.store.tasks import TaskStore, connect

from tests.ui.conftest import REPO, UI
from tests.ui.seeding import seed_transcript

pytestmark = pytest.mark.ui
SETTLE = 90_000  # ms


@pytest.fixture
def errors(page: Any) -> Iterator[list[str]]:
    """The page's uncaught errors; the test fails when there is one."""
    seen: list[str] = []
    page.on("pageerror", lambda error: seen.append(str(error)))
    yield seen
    assert seen == [], f"the page threw: {seen}"


def test_a_double_click_on_load_earlier_loads_each_page_once(page: Any, ui: UI, redis_url: str,
                                                             errors: list[str]) -> None:
    seed_transcript(TaskStore(connect(redis_url)), "long", 1_000)
    page.goto(f"{ui.url}")
    page.goto(f"{ui.base}/#/task/long")
    transcript = page.locator("#transcript")
    expect(transcript.locator('[data-seq="999"]')).to_have_text("Assistantmessage 999", timeout=SETTLE)
    # the page's request is held until both clicks are in: a loaded machine cannot let the first page finish between
    # them (a second click after it had loaded is a user's second click, and loads the next page)
    held: list[Any] = []
    page.route("**/api/tasks/long/messages*", lambda route: held.append(route))
    page.get_by_role("button", name="Load earlier messages").dblclick()
    expect(page.get_by_role("button", name="Load earlier messages")).to_be_disabled()
    assert len(held) == 1, [route.request.url for route in held]
    held[0].continue_()
    page.unroute("**/api/tasks/long/messages*")
    expect(transcript.locator('[data-seq="600"]')).to_have_text("Usermessage 600")
    page.get_by_role("button", name="Load earlier messages").click()  # one more: the page after them, once
    expect(transcript.locator('[data-seq="400"]')).to_have_text("Usermessage 400")
    expect(page.get_by_role("button", name="Load earlier messages")).to_be_enabled()
    seqs = transcript.locator(".msg").evaluate_all("nodes => nodes.map(n => Number(n.dataset.seq))")
    assert seqs == list(range(400, 1000)), (len(seqs), seqs[:5])  # no row twice, none missing, in order


def test_a_double_click_on_approve_decides_once_and_throws_nothing(page: Any, ui: UI, tmp_path: Path,
                                                                   errors: list[str]) -> None:
    shutil.copy(REPO / "examples" / "approval-script.yaml", tmp_path)  # the UI reads its --scripts directory only
    page.goto(ui.url)
    page.get_by_label("Prompt").fill("Release note")
    page.get_by_label("Model").fill("scripted:approval-script.yaml")
    page.get_by_label("Name (optional)").fill("rel")
    page.get_by_label("Tools that wait for approval (comma-separated, optional)").fill("write_file")
    page.get_by_role("button", name="Create").click()
    expect(page.locator("#pending")).to_contain_text("write_file", timeout=SETTLE)
    page.get_by_role("button", name="Approve").dblclick()
    expect(page.locator("#task-status")).to_have_attribute("data-phase", "done", timeout=SETTLE)
    expect(page.locator("#pending")).to_be_empty()
    expect(page.locator("#task-error")).to_have_text("")
    expect(page.locator("#transcript details").first).to_contain_text("result (success)", timeout=SETTLE)


@pytest.mark.parametrize("fragment", ["#/task/%E0%A4%A", "#/task/%", "#/task/%ZZ"])
def test_a_malformed_task_address_shows_an_error_instead_of_throwing(page: Any, ui: UI, fragment: str,
                                                                     errors: list[str]) -> None:
    page.goto(ui.url)
    expect(page.locator("#conn")).to_have_text("live")
    page.goto(f"{ui.base}/{fragment}")
    expect(page.locator("#tree-view")).to_be_visible()
    expect(page.locator("#route-error")).to_contain_text("not a task address")
    page.goto(f"{ui.base}/#/")  # and the page still works: the tree, without the error
    expect(page.locator("#route-error")).to_have_text("")
