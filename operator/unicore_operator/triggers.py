"""AgentTriggers (issue 31, docs/triggers.md): webhook deliveries that start AgentTasks or send messages to one.

The operator serves ``POST /triggers/<namespace>/<name>`` on ``UNICORE_TRIGGER_PORT`` (HTTPS with the chart's
serving certificate when ``UNICORE_TRIGGER_CERT_DIR`` is set; the chart's Service ``<release>-triggers`` is for an
Ingress of the user's choosing). A delivery, in order:

1. its trigger from the operator's index (404 if none; 503 while suspended), its size against ``maxBodyBytes``
   (413, checked from Content-Length and again while reading), the trigger's rate (429 with Retry-After);
2. its HMAC key: key ``secretKey`` (default: the trigger's name) of the namespace's Secret ``unicore-triggers``, the
   one Secret name the operator may read (RBAC ``resourceNames``); read through the API, cached for a while;
3. ``trigger_events.read_event``: the signature (401), the content type (415), the body (400);
4. the event type against ``events`` (not accepted: 202, ignored);
5. a new AgentTask from ``taskTemplate`` named ``<trigger>-<SHA-256 of the event id>`` (201; a second delivery of the
   same id: 200 with ``duplicate``, nothing created), or ``message`` queued to ``task`` with a message id made of the
   event id (202; once per id).

``${event.id}``, ``${event.type}``, ``${event.source}`` and ``${data.<path>}`` in the prompt and message are filled
from the event (``fill``): values are made printable (control characters out), each capped, in one pass (a value that
holds ``${...}`` is not filled again). Nothing is created for a refused delivery.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from kubernetes.client.exceptions import ApiException
from unicore.api.schema import InboxMessage, trigger_message_id
from unicore.api.spec import TriggerSpec, readable
from unicore.errors import TaskNotFound
from unicore.terminal import printable

from unicore_operator import events, metrics, names
from unicore_operator.context import OperatorContext
from unicore_operator.kube import agenttask_path
from unicore_operator.log import logger
from unicore_operator.trigger_events import Event, Refused, read_event

ENDPOINT_CAP_BYTES = 10 * 1024 * 1024  # the most any trigger accepts (its maxBodyBytes is at most this)
VALUE_MAX = 2000  # characters of one ${...} value
KEY_CACHE_SECONDS = 30.0
PLACEHOLDER = re.compile(r"\$\{(event\.(?:id|type|source)|data(?:\.[A-Za-z0-9_\-]+)*)\}")
NAME_HASH = 12


def _value(event: Event, path: str) -> str:
    if path.startswith("event."):
        return str(getattr(event, path.split(".", 1)[1]))
    value: Any = event.data
    for part in path.split(".")[1:]:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = printable(text)
    return text if len(text) <= VALUE_MAX else text[: VALUE_MAX - 1] + "…"


def fill(template: str, event: Event) -> str:
    """``template`` with each ``${...}`` field of ``event`` (see the module doc); one pass."""
    return PLACEHOLDER.sub(lambda match: _value(event, match.group(1)), template)


def task_name(trigger: str, event: Event) -> str:
    """The AgentTask of ``event`` delivered to ``trigger``: the same for every delivery of the same event id."""
    digest = hashlib.sha256(f"{event.source}\0{event.id}".encode()).hexdigest()[:NAME_HASH]
    return f"{trigger[: 63 - NAME_HASH - 1].rstrip('-.')}-{digest}"


def build_triggered_task(trigger: Mapping[str, Any], spec: TriggerSpec, event: Event) -> dict[str, Any]:
    """The AgentTask ``event`` starts: the template's spec (its prompt filled from the event), labelled with the
    trigger, annotated with the event id, owned by the trigger."""
    assert spec.task_template is not None
    meta = trigger["metadata"]
    task_spec = dict(spec.task_template.spec)
    if isinstance(task_spec.get("prompt"), str):
        task_spec["prompt"] = fill(task_spec["prompt"], event)
    labels = {**spec.task_template.metadata.labels, names.TRIGGER_LABEL: names.label_value(meta["name"])}
    annotations = {**spec.task_template.metadata.annotations, names.EVENT_ID_ANNOTATION: event.id[:256]}
    owner = {"apiVersion": names.API_VERSION, "kind": names.TRIGGER_KIND, "name": meta["name"],
             "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": False}
    return {"apiVersion": names.API_VERSION, "kind": names.KIND,
            "metadata": {"name": task_name(meta["name"], event), "namespace": meta["namespace"], "labels": labels,
                         "annotations": annotations, "ownerReferences": [owner]},
            "spec": task_spec}


@dataclass
class Bucket:
    """A token bucket of ``rate`` per minute, as many at once."""

    rate: int
    tokens: float | None = None
    at: float = 0.0

    def take(self, now: float) -> float:
        """0 when a delivery may go now (a token taken), else the seconds until one may."""
        tokens = float(self.rate) if self.tokens is None else min(
            float(self.rate), self.tokens + max(0.0, now - self.at) * self.rate / 60.0)
        self.at = now
        if tokens >= 1:
            self.tokens = tokens - 1
            return 0.0
        self.tokens = tokens
        return (1 - tokens) * 60.0 / self.rate


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any]


class Triggers:
    """What the trigger endpoint does with one delivery (see the module doc)."""

    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.buckets: dict[tuple[str, str], Bucket] = {}
        self.keys: dict[str, tuple[float, dict[str, str]]] = {}  # namespace -> (read at, its unicore-triggers data)

    def trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        index = self.ctx.triggers
        for body in (index.get((namespace, name)) or ()) if index is not None else ():
            return dict(body)
        return None

    def limit(self, trigger: Mapping[str, Any], spec: TriggerSpec) -> None:
        meta = trigger["metadata"]
        key = (meta["namespace"], meta["name"])
        bucket = self.buckets.get(key)
        if bucket is None or bucket.rate != spec.rate_per_minute:
            bucket = self.buckets[key] = Bucket(spec.rate_per_minute)
        wait = bucket.take(time.monotonic())
        if wait > 0:
            raise Refused(429, f"more than {spec.rate_per_minute} deliveries a minute to this trigger; retry in "
                               f"{wait:.0f} s")

    async def key(self, namespace: str, name: str, spec: TriggerSpec) -> bytes:
        wanted = spec.secret_key or name
        cached = self.keys.get(namespace)
        if cached is None or time.monotonic() - cached[0] > KEY_CACHE_SECONDS or wanted not in cached[1]:
            secret = await asyncio.to_thread(self.ctx.kube.core.read,
                                             f"/api/v1/namespaces/{namespace}/secrets/{names.TRIGGER_SECRET}")
            data = dict((secret or {}).get("data") or {})
            cached = (time.monotonic(), data)
            self.keys[namespace] = cached
        encoded = cached[1].get(wanted)
        if not encoded:
            raise Refused(503, f"this trigger has no key: add key {wanted!r} to Secret {names.TRIGGER_SECRET} of "
                               f"namespace {namespace}")
        return base64.b64decode(encoded)

    async def deliver(self, namespace: str, name: str, headers: Mapping[str, str], body: bytes) -> Outcome:
        """What one delivery to trigger ``namespace/name`` does (its body read in full, at most the endpoint cap)."""
        trigger = self.trigger(namespace, name) if self.ctx.watches(namespace) else None
        if trigger is None:
            raise Refused(404, f"no AgentTrigger {namespace}/{name}")
        spec = readable(TriggerSpec, trigger.get("spec")) if trigger.get("spec") else None
        if spec is None:
            raise Refused(503, f"AgentTrigger {namespace}/{name} has no usable spec")
        if spec.suspend:
            raise Refused(503, f"AgentTrigger {namespace}/{name} is suspended")
        if len(body) > spec.max_body_bytes:
            raise Refused(413, f"the body is over this trigger's maxBodyBytes ({spec.max_body_bytes})")
        self.limit(trigger, spec)
        event = read_event(spec.source, headers, body, await self.key(namespace, name, spec))
        if spec.events and not any(fnmatchcase(event.type, pattern) for pattern in spec.events):
            return Outcome(202, {"ignored": f"event type {event.type!r} is not one of this trigger's events"})
        if spec.task is not None:
            return await self._message(trigger, spec, event)
        return await self._create(trigger, spec, event)

    async def _create(self, trigger: dict[str, Any], spec: TriggerSpec, event: Event) -> Outcome:
        task = build_triggered_task(trigger, spec, event)
        meta = trigger["metadata"]
        name = str(task["metadata"]["name"])
        try:
            created = await asyncio.to_thread(self.ctx.kube.core.create_quietly, agenttask_path(meta["namespace"]),
                                              task)
        except ApiException as exc:
            metrics.trigger_event("failed")
            message = f"could not create AgentTask {name}: {exc.status} {exc.reason}"
            events.post(self.ctx, trigger, events.WARNING, "FailedCreate", message)
            raise Refused(502 if exc.status >= 500 else 422, message) from None
        if not created:
            metrics.trigger_event("duplicate")
            return Outcome(200, {"task": name, "duplicate": True})
        metrics.trigger_event("created")
        events.post(self.ctx, trigger, events.NORMAL, "Started",
                    f"event {printable(event.id)[:200]} ({printable(event.type)[:100]}) started AgentTask {name}")
        logger.info("AgentTrigger %s/%s started %s (event %s)", meta["namespace"], meta["name"], name, event.id)
        return Outcome(201, {"task": name})

    async def _message(self, trigger: dict[str, Any], spec: TriggerSpec, event: Event) -> Outcome:
        assert spec.task is not None and spec.message is not None
        meta = trigger["metadata"]
        task_id = names.task_id(meta["namespace"], spec.task.name)
        message = InboxMessage(id=trigger_message_id(meta["namespace"], meta["name"], event.source, event.id),
                               type="user", content=fill(spec.message, event), sender=f"trigger:{meta['name']}")
        try:
            queued = await asyncio.to_thread(self.ctx.store.queue_message, task_id, message)
        except TaskNotFound:
            metrics.trigger_event("failed")
            raise Refused(409, f"AgentTask {spec.task.name} does not exist (yet) in {meta['namespace']}") from None
        if not queued:
            metrics.trigger_event("duplicate")
            return Outcome(200, {"task": spec.task.name, "duplicate": True})
        await asyncio.to_thread(self.ctx.store.activate, task_id, "trigger")
        metrics.trigger_event("message")
        return Outcome(202, {"task": spec.task.name, "message": message.id})


__all__ = ["ENDPOINT_CAP_BYTES", "Bucket", "Outcome", "Triggers", "build_triggered_task", "fill", "task_name"]
