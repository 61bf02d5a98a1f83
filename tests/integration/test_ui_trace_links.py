"""The web UI's ``trace`` field of a local task (issue 32): ``LocalBackend.task`` over a real redis-server, the trace id
from the task record (``TaskRecord.trace_id``), the page from ``UNICORE_TRACE_URL`` or, unset, the Jaeger of
``unicore traces up`` (``unicore_client.ui.trace_links``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore
from unicore_client.ui.local_backend import LocalBackend

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def backend(store: TaskStore, redis_client: redis.Redis, redis_url: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> LocalBackend:
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("UNICORE_TRACE_URL", raising=False)
    store.create_task(TaskSpec(id="traced", prompt="go"), trace_parent=TRACEPARENT)
    store.create_task(TaskSpec(id="untraced", prompt="go"))
    return LocalBackend(redis_client, redis_url)


@pytest.fixture
def running_jaeger(tmp_path: Path) -> Iterator[str]:
    """``${UNICORE_HOME}/jaeger/state.json`` as ``unicore traces up`` writes it, its pid a live process naming the
    recorded configuration; its query URL."""
    where = tmp_path / "home" / "jaeger"
    where.mkdir(parents=True)
    config = where / "jaeger.json"
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(config)])
    query_url = "http://127.0.0.1:41234"
    (where / "state.json").write_text(json.dumps({"pid": process.pid, "query_url": query_url,
                                                  "config": str(config)}))
    try:
        yield query_url
    finally:
        process.kill()
        process.wait()


def test_a_task_without_a_trace_has_none(backend: LocalBackend) -> None:
    assert backend.task("untraced")["trace"] is None


def test_without_a_page_the_trace_is_its_id(backend: LocalBackend) -> None:
    assert backend.task("traced")["trace"] == {"id": TRACE_ID, "url": ""}


def test_the_page_is_the_running_jaegers(backend: LocalBackend, running_jaeger: str) -> None:
    assert backend.task("traced")["trace"] == {"id": TRACE_ID, "url": f"{running_jaeger}/trace/{TRACE_ID}"}
    assert backend.task("untraced")["trace"] is None


def test_unicore_trace_url_comes_first(backend: LocalBackend, running_jaeger: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICORE_TRACE_URL", "https://grafana.example.com/explore?trace={trace_id}")
    assert backend.task("traced")["trace"] == {"id": TRACE_ID,
                                               "url": f"https://grafana.example.com/explore?trace={TRACE_ID}"}
    json.dumps(backend.task("traced"))
