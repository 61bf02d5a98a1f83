"""``unicore ui``'s HTTP guards and its event stream, without a browser: the per-run token, the CSRF header and
origin, the Content-Security-Policy, and ``Last-Event-ID`` resuming a task's stream with no gap and no duplicate."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import pytest
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore, connect
from unicore.store.token_stream import StreamSettings, publish
from unicore_client.ui.server import CSP

from tests.ui.conftest import UI

pytestmark = pytest.mark.ui


def request(ui: UI, method: str, path: str, *, headers: dict[str, str] | None = None,
            body: Any = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=10)
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=data, headers={"Host": f"127.0.0.1:{ui.port}", **(headers or {})})
    return conn.getresponse()


def cookie(ui: UI) -> str:
    reply = request(ui, "GET", f"/?token={ui.token}")
    assert reply.status == 303 and reply.getheader("Location") == "/"
    set_cookie = reply.getheader("Set-Cookie") or ""
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    return set_cookie.split(";", 1)[0]


def csrf(ui: UI, jar: str) -> str:
    page = request(ui, "GET", "/", headers={"Cookie": jar}).read().decode()
    return page.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]


@pytest.mark.parametrize("path", ["/", "/app.js", "/api/tree", "/api/events", "/api/tasks/x/events"])
def test_a_request_without_the_token_gets_401(ui, path):
    assert request(ui, "GET", path).status == 401
    assert request(ui, "GET", path + "?token=wrong").status == 401
    assert request(ui, "GET", path, headers={"Cookie": f"unicore_ui_{ui.port}=wrong"}).status == 401


def test_the_token_sets_a_cookie_and_pages_carry_a_strict_csp(ui):
    jar = cookie(ui)
    page = request(ui, "GET", "/", headers={"Cookie": jar})
    assert page.status == 200
    assert page.getheader("Content-Security-Policy") == CSP
    assert "script-src 'self'" in CSP and "frame-ancestors 'none'" in CSP and "unsafe" not in CSP
    assert "<script>" not in page.read().decode()  # no inline script: the page loads /app.js only


def test_a_post_needs_the_csrf_header_and_this_origin(ui, redis_url):
    jar = cookie(ui)
    token = csrf(ui, jar)
    body = {"prompt": "hi", "model": "scripted", "name": "posted"}
    assert request(ui, "POST", "/api/tasks", headers={"Cookie": jar}, body=body).status == 403
    assert request(ui, "POST", "/api/tasks", headers={"Cookie": jar, "X-CSRF-Token": "nope"}, body=body).status == 403
    foreign = {"Cookie": jar, "X-CSRF-Token": token, "Origin": "http://evil.example"}
    assert request(ui, "POST", "/api/tasks", headers=foreign, body=body).status == 403
    rebound = {"Cookie": jar, "X-CSRF-Token": token, "Host": "evil.example"}  # DNS rebinding
    assert request(ui, "POST", "/api/tasks", headers=rebound, body=body).status == 403
    assert request(ui, "POST", "/api/tasks", headers={"X-CSRF-Token": token}, body=body).status == 401
    store = TaskStore(connect(redis_url))
    assert not store.exists("posted")  # none of the refused requests created it
    good = {"Cookie": jar, "X-CSRF-Token": token, "Origin": f"http://127.0.0.1:{ui.port}"}
    reply = request(ui, "POST", "/api/tasks", headers=good, body=body)
    assert reply.status == 201 and json.loads(reply.read()) == {"id": "posted"}
    assert store.exists("posted")


def test_an_unknown_tool_to_wait_for_approval_is_refused_in_the_uis_own_words(ui, redis_url):
    jar = cookie(ui)
    headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}
    body = {"prompt": "hi", "model": "scripted", "name": "gated-typo", "require_approval": "write_file, nope"}
    reply = request(ui, "POST", "/api/tasks", headers=headers, body=body)
    error = json.loads(reply.read())["error"]
    assert reply.status == 400 and error.startswith("tools to wait for approval: unknown tool(s) nope; known tools: ")
    assert "--" not in error and "write_file" in error  # no command-line option named; the known tools listed
    assert not TaskStore(connect(redis_url)).exists("gated-typo")


def test_a_message_with_the_same_client_id_is_queued_once(ui, redis_url):
    store = TaskStore(connect(redis_url))
    store.create_task(TaskSpec(id="once", prompt="hi", model="scripted"))
    jar = cookie(ui)
    headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}
    body = {"text": "only once", "client_id": "c0ffee00-aaaa"}
    first = request(ui, "POST", "/api/tasks/once/messages", headers=headers, body=body)
    again = request(ui, "POST", "/api/tasks/once/messages", headers=headers, body=body)
    assert json.loads(first.read()) == {"queued": True}
    assert json.loads(again.read()) == {"queued": False}
    bad = request(ui, "POST", "/api/tasks/once/messages", headers=headers, body={"text": "x", "client_id": "<b>"})
    assert bad.status == 400


def read_events(reply: http.client.HTTPResponse, count: int) -> list[tuple[str, str, dict[str, Any]]]:
    events: list[tuple[str, str, dict[str, Any]]] = []
    fields: dict[str, str] = {}
    deadline = time.monotonic() + 30  # keepalives come every second: a missing event must not hang the test
    while len(events) < count:
        assert time.monotonic() < deadline, f"only {len(events)} of {count} events came: {events}"
        line = reply.readline().decode()
        assert line, "the stream ended"
        if line == "\n":
            if "data" in fields:
                assert fields.get("id"), f"an event without an id: {fields}"
                events.append((fields["id"], fields["event"], json.loads(fields["data"])))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.rstrip("\n").partition(": ")
            fields[name] = value
    return events


def test_last_event_id_resumes_a_task_stream_with_no_gap_and_no_duplicate(ui, redis_url):
    store = TaskStore(connect(redis_url))
    store.create_task(TaskSpec(id="resume", prompt="hi", model="scripted"))
    words = ["one ", "two ", "three ", "four ", "five "]
    for word in words:
        publish(store.redis, "resume", [{"turn": 0, "call": 0, "seq": 0, "attempt": 1, "kind": "text", "text": word}],
                StreamSettings())
    jar = cookie(ui)
    first = request(ui, "GET", "/api/tasks/resume/events?from=0", headers={"Cookie": jar})
    assert first.status == 200 and first.getheader("Content-Type", "").startswith("text/event-stream")
    events = read_events(first, 1 + len(words))
    tokens = [e for e in events if e[1] == "token"]
    assert [e[2]["text"] for e in tokens] == words
    assert len({e[0] for e in tokens}) == len(words)  # every token event has its own id

    resumed = request(ui, "GET", "/api/tasks/resume/events?from=0",
                      headers={"Cookie": jar, "Last-Event-ID": tokens[1][0]})  # seen: one, two
    publish(store.redis, "resume", [{"turn": 0, "call": 0, "seq": 0, "attempt": 1, "kind": "text", "text": "six"}],
            StreamSettings())
    again = [e for e in read_events(resumed, 1 + 4) if e[1] == "token"]
    assert [e[2]["text"] for e in again] == ["three ", "four ", "five ", "six"]
    assert request(ui, "GET", "/api/tasks/resume/events",
                   headers={"Cookie": jar, "Last-Event-ID": "garbage"}).status == 400


def test_last_event_id_resumes_stored_messages_with_no_gap_and_no_duplicate(ui, redis_url, tmp_path):
    from unicore.store.reads import busy

    from tests.waiting import wait_for

    script = tmp_path / "three.yaml"
    script.write_text("tasks:\n  three:\n    - text: 'first answer'\n")
    jar = cookie(ui)
    headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}
    body = {"prompt": "go", "model": f"scripted:{script.name}", "name": "three"}
    assert request(ui, "POST", "/api/tasks", headers=headers, body=body).status == 201
    store = TaskStore(connect(redis_url))
    wait_for(lambda: store.message_count("three") == 2 and not busy(store, "three"), timeout=60)
    reply = request(ui, "POST", "/api/tasks/three/messages", headers=headers,
                    body={"text": "again", "client_id": "again-0001"})
    assert reply.status == 200
    wait_for(lambda: store.message_count("three") == 4 and not busy(store, "three"), timeout=60)

    stream = request(ui, "GET", "/api/tasks/three/events?from=0", headers={"Cookie": jar})
    messages = [e for e in read_events(stream, 5) if e[1] == "message"]  # and one "task"
    assert [m[2]["seq"] for m in messages] == [0, 1, 2, 3]
    resumed = request(ui, "GET", "/api/tasks/three/events", headers={"Cookie": jar, "Last-Event-ID": messages[1][0]})
    again = [e for e in read_events(resumed, 3) if e[1] == "message"]
    assert [m[2]["seq"] for m in again] == [2, 3]
    assert again[0][2]["content"] == [{"text": "again"}]


def test_a_bad_port_is_one_line_and_exit_2():
    import subprocess

    from tests.ui.conftest import UNICORE

    run = subprocess.run([UNICORE, "ui", "--port", "70000"], capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "--port" in run.stderr and "65535" in run.stderr
