"""The task API's body rules (``task_api.bodies``), pure: the media types it reads, the length it reads, and the
JSON it decodes, at their exact bounds (issue 25; the HTTPS server's side is
tests/integration/test_task_api_bodies.py)."""

from __future__ import annotations

import pytest
from unicore_operator.task_api.bodies import (
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    declared_length,
    json_object,
    media_type_problem,
)
from unicore_operator.task_api.errors import ApiError

EXAMPLE = '{"id": "<uuid>", "text": "..."}'


@pytest.mark.parametrize("value", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                   'application/json;charset="UTF-8"', " application/json ; charset=utf8"])
def test_json_is_the_media_type_read(value: str) -> None:
    assert media_type_problem(value) is None


@pytest.mark.parametrize("value", [None, "", "text/plain", "text/plain; charset=utf-8",
                                   "application/x-www-form-urlencoded", "multipart/form-data; boundary=b",
                                   "application/json; charset=iso-8859-1",
                                   "application/json; boundary=x", "application/jsonx", "application/json+foo"])
def test_anything_else_is_415(value: str | None) -> None:
    problem = media_type_problem(value)
    assert problem is not None and (problem.status, problem.reason) == (415, "UnsupportedMediaType")
    assert "application/json" in problem.message and "\n" not in problem.message


def test_the_declared_length_is_read_up_to_the_cap() -> None:
    assert declared_length("0", None) == 0
    assert declared_length(str(MAX_BODY_BYTES), None) == MAX_BODY_BYTES
    assert declared_length(None, "chunked") is None and declared_length(None, "gzip, Chunked") is None
    with pytest.raises(ApiError) as over:
        declared_length(str(MAX_BODY_BYTES + 1), None)
    assert over.value.status == 413 and f"{MAX_BODY_BYTES + 1} bytes" in over.value.message
    with pytest.raises(ApiError) as missing:
        declared_length(None, None)
    assert missing.value.status == 411
    for bad in ("-1", "abc", "1e3", "", "+5", "١٢"):
        with pytest.raises(ApiError) as malformed:
            declared_length(bad, None)
        assert malformed.value.status == 400


def nested(depth: int, leaf: str = "[]") -> bytes:
    """An object holding arrays, ``depth`` levels in all (the object is 1, the innermost ``leaf`` counts too)."""
    inner = leaf
    for _ in range(depth - 2):
        inner = f"[{inner}]"
    return f'{{"a": {inner}}}'.encode()


def test_json_nests_at_most_the_bound() -> None:
    assert json_object(nested(MAX_JSON_DEPTH), EXAMPLE)["a"] is not None
    assert json_object(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\"{{{{"}', EXAMPLE)  # brackets in strings
    for depth in (MAX_JSON_DEPTH + 1, 5000, 300_000):
        with pytest.raises(ApiError) as deep:
            json_object(nested(depth), EXAMPLE)
        assert deep.value.status == 400 and f"more than {MAX_JSON_DEPTH} deep" in deep.value.message
    objects = b'{"a":' * 40 + b"1" + b"}" * 40
    with pytest.raises(ApiError):
        json_object(objects, EXAMPLE)


@pytest.mark.parametrize(("body", "fragment"), [(b"", "must be a JSON object"), (b"[1]", "must be a JSON object"),
                                                (b'"text"', "must be a JSON object"), (b"{", "not JSON"),
                                                (b"\xff", "not JSON"), (b"1" * 5000, "not JSON")])
def test_a_body_that_is_not_an_object_is_400(body: bytes, fragment: str) -> None:
    with pytest.raises(ApiError) as bad:
        json_object(body, EXAMPLE)
    assert bad.value.status == 400 and fragment in bad.value.message and "\n" not in bad.value.message
