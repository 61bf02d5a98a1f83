"""Request bodies at the task API's HTTPS server (real TLS, real Redis; ``task_api.bodies``): only
``application/json`` is read (a web page's text/plain POST through a user's ``kubectl proxy`` is 415), bodies are read
whole up to the 1 MiB cap however they arrive (413 past it, 411 without a length), and JSON nested deeper than 32
answers 400 in one line (issue 25, 6 and 7)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unicore_operator.task_api.bodies import MAX_BODY_BYTES, MAX_JSON_DEPTH

from tests.integration.task_api_https import API, Server, task_api_server
from tests.waiting import wait_for

MESSAGES = f"{API}/namespaces/team-a/agenttasks/demo/messages"
APPROVALS = f"{API}/namespaces/team-a/agenttasks/demo/approvals"
ALICE = {"X-Remote-User": "alice"}


@pytest.fixture
def server(redis_url: str, tmp_path: Path) -> Iterator[Server]:
    with task_api_server(redis_url, tmp_path) as running:
        yield running


def answer_of(response: http.client.HTTPResponse) -> tuple[int, dict[str, Any]]:
    return response.status, dict(json.loads(response.read() or b"{}"))


def post(server: Server, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    conn = server.pki.connection(server.port)
    try:
        conn.request("POST", path, body=body, headers={**ALICE, **headers})
        return answer_of(conn.getresponse())
    finally:
        conn.close()


def queued(server: Server) -> list[str]:
    return [m.id for m in server.store.inbox("team-a/demo") if m.id.startswith("user:")]


def message(message_id: str, text: str = "hi") -> bytes:
    return json.dumps({"id": message_id, "text": text}).encode()


@pytest.mark.parametrize("content_type", [
    "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    None, "application/json; charset=latin-1", "application/jsonp", "application/json-patch+json"])
def test_a_body_that_is_not_application_json_is_refused_before_anything_is_read(
        server: Server, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type is not None else {}
    for path, body in ((MESSAGES, message("m-csrf", "sent by a web page")),
                       (APPROVALS, json.dumps({"decision": "approve"}).encode())):
        status, refused = post(server, path, body, headers)
        assert (status, refused["reason"]) == (415, "UnsupportedMediaType"), refused
        assert "application/json" in refused["message"]
    assert queued(server) == [] and server.reviews == []  # nothing read, nobody asked about


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          'Application/JSON;charset="UTF-8"'])
def test_json_with_or_without_a_utf8_charset_is_read(server: Server, content_type: str) -> None:
    status, receipt = post(server, MESSAGES, message("m-json"), {"Content-Type": content_type})
    assert (status, receipt["kind"]) == (202, "MessageReceipt") and queued(server) == ["user:m-json"]


@pytest.mark.parametrize("size", [60 * 1024, 128 * 1024, 255 * 1024])
def test_a_message_that_arrives_in_pieces_is_read_whole(server: Server, size: int) -> None:
    body = message("m-big", "x" * size)
    conn = server.pki.connection(server.port)
    try:
        conn.putrequest("POST", MESSAGES)
        for key, value in {**ALICE, "Content-Type": "application/json", "Content-Length": str(len(body))}.items():
            conn.putheader(key, value)
        conn.endheaders()
        conn.send(body[: len(body) // 2])
        # the server has authorized the request and goes on to read the body while the rest is still on its way
        wait_for(lambda: len(server.reviews) == 1, timeout=10, what="the SubjectAccessReview")
        conn.send(body[len(body) // 2:])
        status, receipt = answer_of(conn.getresponse())
    finally:
        conn.close()
    assert (status, receipt.get("kind")) == (202, "MessageReceipt"), receipt
    (stored,) = [m for m in server.store.inbox("team-a/demo") if m.id == "user:m-big"]
    assert len(stored.content) == size


def padded(message_id: str, total: int) -> bytes:
    """A valid message body of exactly ``total`` bytes (JSON whitespace after the object)."""
    body = message(message_id, "padded")
    return body + b" " * (total - len(body))


def test_the_body_cap_is_exact_and_a_longer_body_is_413_not_read(server: Server) -> None:
    json_type = {"Content-Type": "application/json"}
    status, receipt = post(server, MESSAGES, padded("m-cap", MAX_BODY_BYTES), json_type)
    assert (status, receipt.get("kind")) == (202, "MessageReceipt"), receipt
    for size in (MAX_BODY_BYTES + 1, MAX_BODY_BYTES * 3 // 2):
        status, refused = post(server, MESSAGES, padded("m-over", size), json_type)
        assert (status, refused["reason"]) == (413, "RequestEntityTooLarge"), refused
        assert f"is {size} bytes, over the cap of {MAX_BODY_BYTES} bytes" in refused["message"]
    assert queued(server) == ["user:m-cap"]


def test_a_body_without_a_length_is_411_and_a_chunked_one_is_read_to_its_end(server: Server) -> None:
    conn = server.pki.connection(server.port)
    try:
        conn.putrequest("POST", MESSAGES)
        for key, value in {**ALICE, "Content-Type": "application/json"}.items():
            conn.putheader(key, value)
        conn.endheaders()
        status, refused = answer_of(conn.getresponse())
    finally:
        conn.close()
    assert (status, refused["reason"]) == (411, "LengthRequired") and "no Content-Length" in refused["message"]

    def chunked(body: bytes) -> tuple[int, dict[str, Any]]:
        conn = server.pki.connection(server.port)
        try:
            pieces = iter([body[i:i + 65536] for i in range(0, len(body), 65536)])
            conn.request("POST", MESSAGES, body=pieces, encode_chunked=True,
                         headers={**ALICE, "Content-Type": "application/json", "Transfer-Encoding": "chunked"})
            return answer_of(conn.getresponse())
        finally:
            conn.close()

    status, receipt = chunked(message("m-chunked", "y" * 200_000))
    assert (status, receipt.get("kind")) == (202, "MessageReceipt"), receipt
    status, refused = chunked(padded("m-chunked-over", MAX_BODY_BYTES + 1))
    assert (status, refused["reason"]) == (413, "RequestEntityTooLarge"), refused
    assert queued(server) == ["user:m-chunked"]


def nested(depth: int) -> bytes:
    """A message body whose arrays and objects nest ``depth`` deep (the object itself is 1)."""
    arrays = depth - 1
    return b'{"id": "m-deep", "text": "t", "extra": ' + b"[" * arrays + b"]" * arrays + b"}"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 200_000])
def test_json_nested_too_deep_is_a_one_line_400(server: Server, depth: int) -> None:
    for path in (MESSAGES, APPROVALS):
        status, refused = post(server, path, nested(depth), {"Content-Type": "application/json"})
        assert (status, refused["reason"]) == (400, "BadRequest"), refused
        assert f"more than {MAX_JSON_DEPTH} deep" in refused["message"] and "\n" not in refused["message"]
    assert queued(server) == []


def test_json_nested_to_the_bound_is_decoded(server: Server) -> None:
    status, refused = post(server, MESSAGES, nested(MAX_JSON_DEPTH), {"Content-Type": "application/json"})
    assert (status, refused["reason"]) == (422, "Invalid")  # decoded; then the unknown field is refused
    assert "extra" in refused["message"]
