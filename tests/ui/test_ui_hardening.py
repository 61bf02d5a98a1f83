"""``unicore ui``'s HTTP edge under hostile requests, against the real server (issue 24, items 6 and 7): a model
naming a server file is refused without echoing it, only a JSON boolean decides a call, and a negative
``Content-Length`` is answered 400 at once instead of holding a server thread until the client goes away."""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path

import pytest
from unicore.store import approvals
from unicore.store.tasks import TaskStore, connect
from unicore_client.ui.server import MAX_BODY

from tests.ui.conftest import REPO, UI
from tests.ui.test_ui_http import cookie, csrf, request
from tests.waiting import wait_for

pytestmark = pytest.mark.ui


def _headers(ui: UI) -> dict[str, str]:
    jar = cookie(ui)
    return {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}


def test_a_model_naming_a_server_file_is_refused_and_echoes_nothing(ui: UI, redis_url: str, tmp_path: Path) -> None:
    secret = tmp_path.parent / f"{tmp_path.name}-shadow.yaml"  # outside the --scripts directory
    secret.write_text("root: $6$hash-of-root\nTOPSECRET_LINE: hunter2\n")
    try:
        headers = _headers(ui)
        for body in ({"prompt": "hi", "model": f"scripted:{secret}", "name": "peek"},
                     {"yaml": "apiVersion: unicore.dev/v1alpha1\nkind: AgentTask\nmetadata: {name: peek}\n"
                              f"spec: {{prompt: hi, model: 'scripted:{secret}'}}\n"}):
            reply = request(ui, "POST", "/api/tasks", headers=headers, body=body)
            text = reply.read().decode()
            assert reply.status == 400, text
            assert "TOPSECRET" not in text and "hunter2" not in text and "hash-of-root" not in text, text
        assert not TaskStore(connect(redis_url)).exists("peek")
    finally:
        secret.unlink()


def test_only_a_json_boolean_decides_a_call(ui: UI, redis_url: str, tmp_path: Path) -> None:
    shutil.copy(REPO / "examples" / "approval-script.yaml", tmp_path)
    headers = _headers(ui)
    body = {"prompt": "Release note", "model": "scripted:approval-script.yaml", "name": "rel",
            "require_approval": "write_file"}
    assert request(ui, "POST", "/api/tasks", headers=headers, body=body).status == 201
    client = TaskStore(connect(redis_url)).redis
    pending = wait_for(lambda: approvals.pending_calls(client, "rel"), timeout=90, what="the gated call to wait")
    path = f"/api/tasks/rel/calls/{pending[0].call_id}"
    for bad in ({"approve": "false"}, {"approve": "true"}, {"approve": 1}, {"approve": 0}, {"approve": None}, {}):
        reply = request(ui, "POST", path, headers=headers, body=bad)
        text = reply.read().decode()
        assert reply.status == 400 and "approve: true or false" in text, (bad, reply.status, text)
    assert [call.call_id for call in approvals.pending_calls(client, "rel")] == [pending[0].call_id]  # undecided
    reply = request(ui, "POST", path, headers=headers, body={"approve": False})
    assert reply.status == 200, reply.read()
    assert approvals.get_call(client, "rel", pending[0].call_id).status == "denied"
    again = request(ui, "POST", path, headers=headers, body={"approve": True})  # decided already: a conflict
    text = again.read().decode()
    assert again.status == 409 and "AlreadyDecided" in text, (again.status, text)
    assert approvals.get_call(client, "rel", pending[0].call_id).status == "denied"


def raw_post(ui: UI, path: str, length: str, body: bytes) -> tuple[int, bytes]:
    """POST ``body`` with the header ``Content-Length: <length>`` over a socket that stays open; (status, the
    answer's head and whatever of its body came with it). Fails when no answer comes within 5 s."""
    headers = _headers(ui)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{ui.port}\r\nCookie: {headers['Cookie']}\r\n"
            f"X-CSRF-Token: {headers['X-CSRF-Token']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", ui.port), timeout=10) as conn:  # the client stays connected
        conn.sendall(head.encode() + body)
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            chunk = conn.recv(65536)  # a server that waits for more body times out here (10 s) instead
            assert chunk, f"the server closed without a whole answer: {answer!r}"
            answer += chunk
        assert time.monotonic() - started < 5
    return int(answer.split(b"\r\n", 1)[0].split()[1]), answer


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.mark.parametrize("length", ["-1", "-100", "+-5", "1e3", "0x10", " ", "\u0663"])
def test_a_bad_content_length_is_answered_400_at_once(ui: UI, length: str) -> None:
    status, answer = raw_post(ui, "/api/tasks", length, b"{}")
    assert status == 400 and b"Content-Length: one whole number of bytes" in answer, answer
    assert b"connection: close" in answer.lower()  # and it drops the connection: the body's end is unknown


def test_a_good_request_still_works_after_a_bad_length(ui: UI, redis_url: str) -> None:
    headers = _headers(ui)
    body = {"prompt": "hi", "model": "scripted", "name": "fine"}
    assert request(ui, "POST", "/api/tasks", headers=headers, body=body).status == 201
    reply = request(ui, "GET", "/api/tree", headers={"Cookie": headers["Cookie"]})
    assert reply.status == 200 and "fine" in json.dumps(json.loads(reply.read()))



def test_the_body_cap_is_one_mib_exactly(ui: UI) -> None:
    at_cap = b"{}" + b" " * (MAX_BODY - 2)  # JSON padded to exactly MAX_BODY bytes: read and used
    status, _ = raw_post(ui, "/api/tasks/nope/suspend", str(MAX_BODY), at_cap)
    assert status == 404  # past the cap: the task is what is missing
    status, answer = raw_post(ui, "/api/tasks/nope/suspend", str(MAX_BODY + 1), b"")  # refused before any body
    assert status == 400 and f"at most {MAX_BODY} bytes".encode() in answer, answer
    assert MAX_BODY == 1 << 20  # docs/ui.md names 1 MiB
