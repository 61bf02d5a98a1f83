"""Pure reading of a webhook delivery (issue 31, docs/triggers.md): an HTTP request's headers and raw body -> an
authenticated ``Event``, or ``Refused`` with the status and one line to answer. No I/O, no clock.

Three kinds of sender (``spec.source`` of the AgentTrigger):

- ``github``: GitHub's webhooks. ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``, the event type in
  ``X-GitHub-Event``, its id in ``X-GitHub-Delivery``, a JSON body (``application/json``).
- ``cloudevents``: CloudEvents 1.0 over HTTP, binary mode (``ce-id``, ``ce-type``, ``ce-source``, ``ce-specversion``
  headers; the body is the data, JSON or text) or structured mode (``Content-Type: application/cloudevents+json``:
  the body is the whole event). Signed like GitHub's: ``X-Signature-256: sha256=<hex>`` (or ``X-Hub-Signature-256``).
- ``json``: any JSON body, signed the same way; its id from ``Idempotency-Key`` or ``X-Event-Id``, else the body's
  SHA-256 (the same body delivered twice is one event), its type from ``X-Event-Type`` (default ``json``).

The signature is checked before the body is parsed; the comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SOURCES = ("github", "cloudevents", "json")
SIGNATURE_HEADERS = ("x-hub-signature-256", "x-signature-256")
STRUCTURED_CLOUDEVENT = "application/cloudevents+json"
ID_MAX = 256


@dataclass(frozen=True)
class Event:
    """One delivery, authenticated: its id (idempotency), type, source and data (parsed JSON, or text)."""

    id: str
    type: str
    source: str
    data: Any = None
    extras: dict[str, str] = field(default_factory=dict)  # other CloudEvents attributes, GitHub's hook id


class Refused(Exception):  # noqa: N818 - what the sender is told: an HTTP status and one line
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _headers(raw: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in raw.items()}


def _media_type(headers: Mapping[str, str]) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


def verify_signature(headers: Mapping[str, str], body: bytes, key: bytes) -> None:
    """``Refused(401)`` unless a signature header holds ``sha256=`` + the hex HMAC-SHA256 of ``body`` under ``key``."""
    given = next((headers[name] for name in SIGNATURE_HEADERS if name in headers), "")
    if not given:
        raise Refused(401, "no signature: send X-Hub-Signature-256 (or X-Signature-256): sha256=<hex HMAC-SHA256 "
                           "of the body with the trigger's key>")
    scheme, _, digest = given.partition("=")
    expected = hmac.new(key, body, hashlib.sha256).hexdigest()
    if scheme.strip().lower() != "sha256" or not hmac.compare_digest(digest.strip().lower(), expected):
        raise Refused(401, "signature mismatch: the body was not signed with this trigger's key")


def _json_body(body: bytes, what: str) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"{what} is not valid JSON: {str(exc).splitlines()[0][:200]}") from None


def _id(value: Any, what: str) -> str:
    text = str(value or "").strip()
    if not text:
        raise Refused(400, f"{what} is missing")
    if len(text) > ID_MAX or any(ord(ch) < 32 for ch in text):
        raise Refused(400, f"{what} is longer than {ID_MAX} characters or holds control characters")
    return text


def read_event(source: str, raw_headers: Mapping[str, str], body: bytes, key: bytes) -> Event:
    """The authenticated event of a delivery to a trigger of ``source`` signed with ``key``; ``Refused`` else."""
    headers = _headers(raw_headers)
    media = _media_type(headers)
    verify_signature(headers, body, key)
    if source == "github":
        if media != "application/json":
            raise Refused(415, f"content type {media or 'none'}: a GitHub webhook must use application/json")
        return Event(id=_id(headers.get("x-github-delivery"), "X-GitHub-Delivery"),
                     type=_id(headers.get("x-github-event"), "X-GitHub-Event"), source="github",
                     data=_json_body(body, "the body"),
                     extras={"hook_id": headers.get("x-github-hook-id", "")})
    if source == "cloudevents":
        return _cloudevent(headers, media, body)
    if source == "json":
        if media != "application/json":
            raise Refused(415, f"content type {media or 'none'}: send application/json")
        data = _json_body(body, "the body")
        given = headers.get("idempotency-key") or headers.get("x-event-id")
        return Event(id=_id(given, "the event id") if given else hashlib.sha256(body).hexdigest(),
                     type=_id(headers.get("x-event-type") or "json", "X-Event-Type"), source="json", data=data)
    raise Refused(500, f"unknown trigger source {source!r}")


def _cloudevent(headers: Mapping[str, str], media: str, body: bytes) -> Event:
    if media == STRUCTURED_CLOUDEVENT:
        event = _json_body(body, "the structured CloudEvent")
        if not isinstance(event, dict):
            raise Refused(400, "a structured CloudEvent is a JSON object")
        if str(event.get("specversion") or "") != "1.0":
            raise Refused(400, f"specversion {event.get('specversion')!r}: only CloudEvents 1.0 is read")
        if event.get("data") is None and "data_base64" in event:
            raise Refused(415, "data_base64 (binary data) is not read: send JSON or text data")
        extras = {k: str(v) for k, v in event.items() if k not in ("id", "type", "source", "data", "specversion")}
        return Event(id=_id(event.get("id"), "the event's id"), type=_id(event.get("type"), "the event's type"),
                     source=_id(event.get("source"), "the event's source"), data=event.get("data"),
                     extras=extras)
    if "ce-specversion" not in headers:
        raise Refused(415, f"content type {media or 'none'}: a CloudEvent comes in binary mode (ce-* headers) or "
                           f"structured mode ({STRUCTURED_CLOUDEVENT})")
    if headers["ce-specversion"] != "1.0":
        raise Refused(400, f"ce-specversion {headers['ce-specversion']!r}: only CloudEvents 1.0 is read")
    data: Any = None
    if media == "application/json" or media.endswith("+json"):
        data = _json_body(body, "the event's data")
    elif media.startswith("text/") or not media:
        try:
            data = body.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(400, "the event's text data is not UTF-8") from None
    else:
        raise Refused(415, f"content type {media}: the event's data must be JSON or text")
    extras = {k[3:]: v for k, v in headers.items()
              if k.startswith("ce-") and k not in ("ce-id", "ce-type", "ce-source", "ce-specversion")}
    return Event(id=_id(headers.get("ce-id"), "ce-id"), type=_id(headers.get("ce-type"), "ce-type"),
                 source=_id(headers.get("ce-source"), "ce-source"), data=data, extras=extras)


__all__ = ["Event", "Refused", "SOURCES", "read_event", "verify_signature"]
