"""Webhook deliveries read and authenticated (``trigger_events``, pure) and what they fill in (``triggers.fill``,
``build_triggered_task``): GitHub's signed JSON, CloudEvents 1.0 in both HTTP modes, plain JSON; each refusal is
its status and one line."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest
from unicore.api.spec import TriggerSpec
from unicore_operator.trigger_events import Event, Refused, read_event
from unicore_operator.triggers import Bucket, build_triggered_task, fill, task_name

KEY = b"s3cret"


def sign(body: bytes, key: bytes = KEY) -> str:
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def refusal(source: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
    with pytest.raises(Refused) as caught:
        read_event(source, headers, body, KEY)
    assert "\n" not in caught.value.message
    return caught.value.status, caught.value.message


PUSH = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "acme/app"},
                   "head_commit": {"message": "Fix the build\n\x1b[31mred\x1b[0m"}}).encode()
GITHUB = {"Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": "d-1",
          "X-Hub-Signature-256": sign(PUSH)}


def test_a_signed_github_push_is_read_with_its_delivery_id_and_type() -> None:
    event = read_event("github", GITHUB, PUSH, KEY)
    assert (event.id, event.type, event.source) == ("d-1", "push", "github")
    assert event.data["repository"]["full_name"] == "acme/app"


def test_forged_missing_or_other_scheme_signatures_are_401() -> None:
    assert refusal("github", {**GITHUB, "X-Hub-Signature-256": sign(PUSH, b"guess")}, PUSH)[0] == 401
    assert refusal("github", {**GITHUB, "X-Hub-Signature-256": sign(PUSH)}, PUSH + b" ")[0] == 401  # body changed
    assert refusal("github", {k: v for k, v in GITHUB.items() if k != "X-Hub-Signature-256"}, PUSH) == (
        401, refusal("github", {"Content-Type": "application/json"}, PUSH)[1])
    md5 = "md5=" + hmac.new(KEY, PUSH, hashlib.md5).hexdigest()
    assert refusal("github", {**GITHUB, "X-Hub-Signature-256": md5}, PUSH)[0] == 401


def test_wrong_content_types_and_bodies_are_415_and_400() -> None:
    form = b"payload=%7B%7D"
    assert refusal("github", {**GITHUB, "Content-Type": "application/x-www-form-urlencoded",
                              "X-Hub-Signature-256": sign(form)}, form)[0] == 415
    broken = b"{not json"
    assert refusal("github", {**GITHUB, "X-Hub-Signature-256": sign(broken)}, broken)[0] == 400
    assert refusal("github", {**GITHUB, "X-GitHub-Delivery": ""}, PUSH)[0] == 400


def test_cloudevents_in_binary_and_structured_mode() -> None:
    data = json.dumps({"alert": "disk full", "host": "db-1"}).encode()
    binary = {"Content-Type": "application/json", "ce-specversion": "1.0", "ce-id": "a-1", "ce-type": "com.ex.alert",
              "ce-source": "/monitor", "ce-subject": "db-1", "X-Signature-256": sign(data)}
    event = read_event("cloudevents", binary, data, KEY)
    assert (event.id, event.type, event.source, event.data["host"], event.extras) == (
        "a-1", "com.ex.alert", "/monitor", "db-1", {"subject": "db-1"})
    structured = json.dumps({"specversion": "1.0", "id": "a-2", "type": "com.ex.alert", "source": "/monitor",
                             "datacontenttype": "application/json", "data": {"alert": "cpu"}}).encode()
    event = read_event("cloudevents", {"Content-Type": "application/cloudevents+json; charset=utf-8",
                                       "X-Signature-256": sign(structured)}, structured, KEY)
    assert (event.id, event.data) == ("a-2", {"alert": "cpu"})
    old = structured.replace(b'"1.0"', b'"0.3"')
    assert refusal("cloudevents", {"Content-Type": "application/cloudevents+json",
                                   "X-Signature-256": sign(old)}, old)[0] == 400
    plain = b"{}"
    assert refusal("cloudevents", {"Content-Type": "application/json", "X-Signature-256": sign(plain)}, plain)[0] == 415


def test_plain_json_takes_its_id_from_the_idempotency_key_or_the_bodys_hash() -> None:
    body = b'{"n": 1}'
    keyed = read_event("json", {"Content-Type": "application/json", "Idempotency-Key": "k-9",
                                "X-Signature-256": sign(body)}, body, KEY)
    assert (keyed.id, keyed.type) == ("k-9", "json")
    hashed = read_event("json", {"Content-Type": "application/json", "X-Signature-256": sign(body)}, body, KEY)
    assert hashed.id == hashlib.sha256(body).hexdigest()


def test_fields_fill_the_template_printable_capped_and_in_one_pass() -> None:
    event = read_event("github", GITHUB, PUSH, KEY)
    text = fill("Push to ${data.repository.full_name} (${event.type}, ${event.id}): ${data.head_commit.message} "
                "${data.missing.field}|${data.repository}", event)
    assert text.startswith("Push to acme/app (push, d-1): Fix the build")
    assert "\x1b" not in text and text.endswith('|{"full_name": "acme/app"}')
    sneaky = Event(id="x", type="t", source="s", data={"a": "${event.id}", "b": "y" * 5000})
    assert fill("${data.a}", sneaky) == "${event.id}"  # a value is not filled again
    assert len(fill("${data.b}", sneaky)) == 2000


TRIGGER: dict[str, Any] = {"metadata": {"name": "github-push", "namespace": "team-a", "uid": "trig-uid"},
                           "spec": {"source": "github", "taskTemplate": {"spec": {
                               "prompt": "Review ${data.repository.full_name}", "agentRef": {"name": "reviewer"}}}}}


def test_an_events_task_is_named_after_its_id_labelled_and_owned_by_the_trigger() -> None:
    event = read_event("github", GITHUB, PUSH, KEY)
    task = build_triggered_task(TRIGGER, TriggerSpec.model_validate(TRIGGER["spec"]), event)
    meta = task["metadata"]
    assert meta["name"] == task_name("github-push", event) == task_name("github-push", Event("d-1", "other", "github"))
    assert meta["name"] != task_name("github-push", Event("d-2", "push", "github"))
    assert meta["labels"] == {"unicore.dev/trigger": "github-push"}
    assert meta["annotations"] == {"unicore.dev/event-id": "d-1"}
    assert meta["ownerReferences"][0]["kind"] == "AgentTrigger" and task["spec"]["prompt"] == "Review acme/app"
    assert len(task_name("t" * 80, event)) <= 63


def test_the_rate_limit_lets_a_burst_through_then_one_per_interval() -> None:
    bucket = Bucket(rate=2)
    assert [bucket.take(100.0), bucket.take(100.0)] == [0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(30.0)
    assert bucket.take(130.0) == 0.0
