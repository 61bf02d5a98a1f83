"""The task page's trace (issue 32) in a real browser (Debian's chromium via Playwright): a "Trace" link to the page the
server put in the task's JSON (local mode: the Jaeger of ``unicore traces up``, found by its state file in the UI's
UNICORE_HOME), nothing for a task without a trace, and never an href that is not http or https."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore, connect

from tests.ui.conftest import UI

pytestmark = pytest.mark.ui
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
QUERY_URL = "http://127.0.0.1:41234"  # the recorded Jaeger's UI (nothing listens: only the href is checked)
HOSTILE = ["javascript:alert(1)", " JavaScript:alert(2)", "data:text/html,<script>alert(3)</script>",
           "vbscript:msgbox(4)", "/api/tree", "//evil.example/x"]


@pytest.fixture
def jaeger_state(ui: UI, tmp_path: Path) -> Iterator[Path]:
    """``${UNICORE_HOME}/jaeger/state.json`` of the UI's home as ``unicore traces up`` writes it, its pid a live
    process whose command line names the recorded configuration (what makes it "running")."""
    where = tmp_path / "home" / "jaeger"
    where.mkdir(parents=True, exist_ok=True)
    config = where / "jaeger.json"
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", str(config)])
    (where / "state.json").write_text(json.dumps({"pid": process.pid, "query_url": QUERY_URL, "config": str(config)}))
    try:
        yield where / "state.json"
    finally:
        process.kill()
        process.wait()


def seed(redis_url: str) -> None:
    store = TaskStore(connect(redis_url))  # neither is activated: they stay idle
    store.create_task(TaskSpec(id="traced", prompt="Go.", model="model-traced"),
                      trace_parent=f"00-{TRACE_ID}-00f067aa0ba902b7-01")
    store.create_task(TaskSpec(id="plain", prompt="Go.", model="model-plain"))


def open_task(page: Any, ui: UI, task_id: str) -> None:
    page.goto(f"{ui.base}/#/task/{task_id}")
    expect(page.locator("#task-status")).to_contain_text(f"model model-{task_id}")  # its JSON is rendered


def test_a_traced_task_links_to_its_trace_and_a_plain_one_shows_none(page, ui, redis_url, jaeger_state):
    seed(redis_url)
    page.goto(ui.url)  # the token's cookie
    open_task(page, ui, "traced")
    trace = page.locator("#task-trace")
    expect(trace).to_be_visible()
    link = trace.get_by_role("link", name="Trace")
    expect(link).to_have_attribute("href", f"{QUERY_URL}/trace/{TRACE_ID}")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(trace.locator("code")).to_have_text(TRACE_ID)

    page.evaluate("location.hash = '#/task/plain'")  # moving on clears the previous task's trace
    expect(page.locator("#task-status")).to_contain_text("model model-plain")
    expect(trace).to_be_hidden()
    assert trace.locator("a").count() == 0 and page.locator('a[href*="/trace/"]').count() == 0

    jaeger_state.unlink()  # Jaeger gone: the id as text, no link
    open_task(page, ui, "traced")
    expect(trace).to_have_text(f"Trace {TRACE_ID}")
    assert trace.locator("a").count() == 0


def test_a_url_that_is_not_http_is_shown_as_text_never_as_an_href(page, ui, redis_url, jaeger_state):
    seed(redis_url)
    served = {"url": ""}

    def hostile(route: Any) -> None:  # the task's JSON as the server sent it, with another trace url
        response = route.fetch()
        body = response.json()
        body["trace"]["url"] = served["url"]
        route.fulfill(response=response, json=body)

    page.route("**/api/tasks/traced", hostile)
    page.goto(ui.url)
    trace = page.locator("#task-trace")
    for url in HOSTILE:
        served["url"] = url
        page.goto(f"{ui.base}/#/")
        open_task(page, ui, "traced")
        expect(trace).to_have_text(f"Trace {TRACE_ID} ({url})")
        assert trace.locator("a").count() == 0, url
        hrefs = page.eval_on_selector_all("a[href]", "links => links.map((a) => a.href)")
        assert not [href for href in hrefs if not href.startswith(("http:", "https:"))], hrefs

    # what the local backend itself builds of a hostile Jaeger query URL is text too
    # the page may be fetching the task again right now (CI saw one): wait for that handler before the route goes,
    # or the removal handles its request first and the handler's fulfill finds it handled
    page.unroute_all(behavior="wait")
    state = json.loads(jaeger_state.read_text())
    jaeger_state.write_text(json.dumps({**state, "query_url": "javascript:alert(5)//"}))
    page.goto(f"{ui.base}/#/")
    open_task(page, ui, "traced")
    expect(trace).to_have_text(f"Trace {TRACE_ID} (javascript:alert(5)/trace/{TRACE_ID})")
    assert trace.locator("a").count() == 0
    trace.click()
    assert ui.dialogs == []
