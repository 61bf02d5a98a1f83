"""Request bodies of the task API: what a POST must declare and how its JSON is decoded (every POST/PUT/PATCH route).

- **Media type.** A body must be ``application/json``, optionally with ``charset=utf-8``; anything else (none,
  ``text/plain``, a form) is 415 before the body is read, as the API server answers for built-in resources. A web
  page can send ``text/plain`` or a form to a user's ``kubectl proxy`` without a CORS preflight, but not
  ``application/json``: this is what keeps such pages from sending messages or deciding approvals.
- **Length.** The body is read whole, by its ``Content-Length`` (or to the end of a chunked body), up to
  ``MAX_BODY_BYTES``; a longer declared length is 413 before reading it, a request with a body but neither header is
  411 (a malformed or negative ``Content-Length`` never gets here: the HTTP parser answers 400).
- **JSON.** Decoded once, here: not JSON is 400; nested deeper than ``MAX_JSON_DEPTH`` arrays and objects is 400
  (the routes' bodies are flat objects), answered in one line, never a traceback.

Pure: the HTTP server (``server.py``) hands over the header values and the bytes.
"""

from __future__ import annotations

import json
from typing import Any

from unicore_operator.task_api.errors import ApiError

__all__ = ["BODY_METHODS", "MAX_BODY_BYTES", "MAX_JSON_DEPTH", "declared_length", "json_object",
           "media_type_problem"]

MAX_BODY_BYTES = 1024 * 1024  # the message cap (256 KiB) plus JSON escaping headroom
MAX_JSON_DEPTH = 32  # nested arrays and objects; {"id": "...", "text": "..."} is 1
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
JSON_MEDIA_TYPE = "application/json"


def media_type_problem(content_type: str | None) -> ApiError | None:
    """None when ``content_type`` (the header's value) is ``application/json`` with at most a ``charset=utf-8``
    parameter; else the 415 to answer."""
    given = (content_type or "").strip()
    media, *params = [part.strip() for part in given.split(";")]
    ok = media.lower() == JSON_MEDIA_TYPE
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() != "charset" or value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            ok = False
    if ok:
        return None
    shown = repr(given[:100]) if given else "none"
    return ApiError(415, f"the request body must be {JSON_MEDIA_TYPE} (optionally with charset=utf-8), not "
                         f"{shown}; nothing was read")


def declared_length(content_length: str | None, transfer_encoding: str | None,
                    cap: int = MAX_BODY_BYTES) -> int | None:
    """How many bytes of body to read: the ``Content-Length`` (at most ``cap``), or None for a chunked body (read
    to its end, refused once past ``cap``). ApiError 413 when the declared length is over the cap, 411 when
    neither header says how long the body is, 400 for a ``Content-Length`` that is not a count of bytes."""
    if content_length is not None:
        text = content_length.strip()
        if not text.isascii() or not text.isdigit():
            raise ApiError(400, f"Content-Length {content_length[:40]!r} is not a count of bytes")
        length = int(text)
        if length > cap:
            raise ApiError(413, f"the request body is {length} bytes, over the cap of {cap} bytes; nothing was "
                                "read or queued")
        return length
    if transfer_encoding is not None and "chunked" in transfer_encoding.lower():
        return None
    raise ApiError(411, f"the request has no Content-Length: send the JSON body with its length (at most {cap} "
                        "bytes)")


def over_cap(cap: int = MAX_BODY_BYTES) -> ApiError:
    """The 413 for a chunked body found to be longer than ``cap`` while reading it."""
    return ApiError(413, f"the request body is over the cap of {cap} bytes; nothing was queued")


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def json_object(body: bytes, example: str, limit: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """The body decoded as a JSON object; ApiError 400 in one line when it is not JSON, nests deeper than
    ``limit``, or is not an object (``example``: what one looks like, for the message)."""
    too_deep = ApiError(400, f"the body nests arrays and objects more than {limit} deep; send a JSON object like "
                             f"{example}")
    try:
        payload = json.loads(body or b"null")
    except RecursionError:  # far deeper than the limit: the decoder's own recursion bound stops it first
        raise too_deep from None
    except ValueError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}") from None
    if _deeper_than(payload, limit):
        raise too_deep
    if not isinstance(payload, dict):
        raise ApiError(400, f"the body must be a JSON object like {example}")
    return payload
