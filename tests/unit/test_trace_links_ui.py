"""A task's trace (issue 32) where people look at tasks: ``kubectl agenttask describe``'s ``Trace:`` line and the web
UI's ``trace`` field ({id, url}) of both backends (``unicore_client.ui.trace_links``)."""

from __future__ import annotations

import datetime
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from unicore_client.kubectl_plugin import commands
from unicore_client.kubectl_plugin.describe_view import render_describe
from unicore_client.ui import trace_links
from unicore_client.ui.cluster_backend import ClusterBackend
from unicore_client.ui.trace_links import cluster_trace, jaeger_trace_url, local_trace_url, trace_json

from tests.waiting import wait_for

NOW = datetime.datetime(2026, 11, 22, 10, 5, tzinfo=datetime.UTC)
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PAGE = f"https://jaeger.example.com/trace/{TRACE_ID}"
TEMPLATE = "https://traces.example.com/t/{trace_id}?x=1"


def agenttask(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "demo", "namespace": "team-a", "creationTimestamp": "2026-11-22T10:00:00Z"},
            "spec": {"prompt": "go"}, "status": {"phase": "Idle", **status}}


def trace_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().startswith("Trace:")]


# ------------------------------------------------------------------ kubectl agenttask describe


def test_describe_shows_the_operators_trace_page() -> None:
    text = render_describe(agenttask(trace={"id": TRACE_ID, "url": PAGE}), [], [], NOW, trace_template=TEMPLATE)
    assert trace_lines(text) == [f"  Trace:              {PAGE}"]  # the operator's page wins over the user's template


def test_describe_shows_the_id_and_the_users_page_of_a_trace_without_a_url() -> None:
    obj = agenttask(trace={"id": TRACE_ID})
    assert trace_lines(render_describe(obj, [], [], NOW)) == [f"  Trace:              {TRACE_ID}"]
    with_template = render_describe(obj, [], [], NOW, trace_template=TEMPLATE)
    assert trace_lines(with_template) == [
        f"  Trace:              {TRACE_ID} (https://traces.example.com/t/{TRACE_ID}?x=1)"]
    no_placeholder = render_describe(obj, [], [], NOW, trace_template="https://traces.example.com/")
    assert trace_lines(no_placeholder) == [f"  Trace:              {TRACE_ID}"]


def test_describe_has_no_trace_line_without_a_trace() -> None:
    statuses: list[dict[str, Any]] = [{}, {"trace": {}}, {"trace": None}, {"trace": "junk"}, {"trace": {"url": ""}}]
    for status in statuses:
        assert trace_lines(render_describe(agenttask(**status), [], [], NOW, trace_template=TEMPLATE)) == []


def test_describe_escapes_a_hostile_trace() -> None:
    obj = agenttask(trace={"id": "x\x1b]0;pwned\x07", "url": "https://e.example/\x1b[2J\nnext"})
    [line] = trace_lines(render_describe(obj, [], [], NOW))
    assert "\x1b" not in line and "\\x1b[2J" in line and line.endswith("next")
    [line] = trace_lines(render_describe(agenttask(trace={"id": "x\x1b]0;pwned\x07"}), [], [], NOW,
                                         trace_template=TEMPLATE))
    assert line == "  Trace:              x\\x1b]0;pwned\\x07"  # no page built of an id that is not one


def test_cmd_describe_builds_the_page_from_the_users_unicore_trace_url(monkeypatch: pytest.MonkeyPatch) -> None:
    obj = agenttask(trace={"id": TRACE_ID})
    monkeypatch.setattr(commands, "get_task", lambda kube, namespace, name: obj)
    monkeypatch.setattr(commands, "list_tasks", lambda kube, namespace: [obj])

    def no_events() -> Any:
        raise RuntimeError("no events here")

    kube = SimpleNamespace(namespace="team-a", core=no_events)
    monkeypatch.setenv("UNICORE_TRACE_URL", TEMPLATE)
    out = io.StringIO()
    assert commands.cmd_describe(SimpleNamespace(name="demo"), kube, out) == 0  # type: ignore[arg-type]
    assert trace_lines(out.getvalue()) == [
        f"  Trace:              {TRACE_ID} (https://traces.example.com/t/{TRACE_ID}?x=1)"]
    monkeypatch.delenv("UNICORE_TRACE_URL")
    out = io.StringIO()
    commands.cmd_describe(SimpleNamespace(name="demo"), kube, out)  # type: ignore[arg-type]
    assert trace_lines(out.getvalue()) == [f"  Trace:              {TRACE_ID}"]


# ------------------------------------------------------------------ the web UI's trace field: cluster mode


def test_cluster_trace_is_status_trace_as_the_operator_wrote_it() -> None:
    assert cluster_trace({"id": TRACE_ID, "url": PAGE}) == {"id": TRACE_ID, "url": PAGE}
    assert cluster_trace({"id": TRACE_ID}) == {"id": TRACE_ID, "url": ""}
    hostile = "javascript:alert(1)"  # passed on as it is: the page never makes an href of it (test_ui_trace_link)
    assert cluster_trace({"id": TRACE_ID, "url": hostile}) == {"id": TRACE_ID, "url": hostile}
    junk: list[Any] = [None, "x", [], {}, {"url": PAGE}, {"id": 7}, {"id": ""}]
    for each in junk:
        assert cluster_trace(each) is None
    assert cluster_trace({"id": TRACE_ID, "url": ["x"]}) == {"id": TRACE_ID, "url": ""}
    assert trace_json("a" * 500)["id"] == "a" * trace_links.MAX_ID  # type: ignore[index]


def cluster_backend(obj: dict[str, Any]) -> ClusterBackend:
    """A ClusterBackend whose AgentTask GET and task API stream answer ``obj`` and an empty state (no cluster)."""
    backend = ClusterBackend.__new__(ClusterBackend)
    backend.kube = SimpleNamespace(namespace="team-a")  # type: ignore[assignment]
    backend._get = lambda namespace, name: obj  # type: ignore[method-assign]
    backend._stream = lambda namespace, name, after, wait: {"state": {"messages": 0}}  # type: ignore[method-assign]
    return backend


def test_the_cluster_backends_task_json_carries_status_trace() -> None:
    shown = cluster_backend(agenttask(trace={"id": TRACE_ID, "url": PAGE})).task("team-a/demo")
    assert shown["trace"] == {"id": TRACE_ID, "url": PAGE}
    assert cluster_backend(agenttask(trace={"id": TRACE_ID})).task("team-a/demo")["trace"] == {"id": TRACE_ID,
                                                                                                 "url": ""}
    assert cluster_backend(agenttask()).task("team-a/demo")["trace"] is None
    json.dumps(shown)  # the server's JSON


# ------------------------------------------------------------------ the web UI's trace field: local mode


@pytest.fixture
def running_jaeger(tmp_path: Path) -> Iterator[Path]:
    """A Jaeger state folder as ``unicore traces up`` leaves it, its pid a live process whose command line names the
    recorded configuration (what ``traces_command.running_pid`` checks)."""
    where = tmp_path / "jaeger"
    where.mkdir()
    config = where / "jaeger.json"
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(config)])
    cmdline = Path(f"/proc/{process.pid}/cmdline")  # forked first, then exec'd: wait for its own command line
    wait_for(lambda: str(config).encode() in cmdline.read_bytes() or None, timeout=30, interval=0.01,
             what="the stand-in's command line")
    state = {"pid": process.pid, "query_url": "http://127.0.0.1:16686", "config": str(config)}
    (where / "state.json").write_text(json.dumps(state))
    try:
        yield where
    finally:
        process.kill()
        process.wait()


def test_local_mode_links_to_the_running_jaeger_of_unicore_traces_up(running_jaeger: Path) -> None:
    assert jaeger_trace_url(TRACE_ID, running_jaeger) == f"http://127.0.0.1:16686/trace/{TRACE_ID}"
    assert local_trace_url(TRACE_ID, env={}, home=running_jaeger) == f"http://127.0.0.1:16686/trace/{TRACE_ID}"
    assert jaeger_trace_url("not-a-trace-id", running_jaeger) == ""


def test_local_mode_prefers_unicore_trace_url(running_jaeger: Path) -> None:
    env = {"UNICORE_TRACE_URL": TEMPLATE}
    assert local_trace_url(TRACE_ID, env=env, home=running_jaeger) == f"https://traces.example.com/t/{TRACE_ID}?x=1"


def test_local_mode_has_no_page_without_a_running_jaeger(tmp_path: Path, running_jaeger: Path) -> None:
    assert local_trace_url(TRACE_ID, env={}, home=tmp_path / "nothing") == ""
    state = json.loads((running_jaeger / "state.json").read_text())
    (running_jaeger / "state.json").write_text(json.dumps({**state, "config": str(tmp_path / "other.json")}))
    assert local_trace_url(TRACE_ID, env={}, home=running_jaeger) == ""  # that pid is not this Jaeger
    (running_jaeger / "state.json").write_text("{not json")
    assert local_trace_url(TRACE_ID, env={}, home=running_jaeger) == ""
