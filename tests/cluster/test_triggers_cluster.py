"""AgentTriggers on the real local control plane (issue 31): a host-process operator serves the trigger endpoint
(``UNICORE_TRIGGER_PORT``) and runs the turns it starts on the pod runner; deliveries are real HTTP requests signed
with the key of the namespace's Secret ``unicore-triggers``.

- GitHub: a signed push starts one task (its prompt filled from the event); the same delivery again creates nothing;
  a forged signature, a wrong content type and a 20 MB body are refused (401, 415, 413) and create nothing; an event
  type the trigger does not take is answered 202 and ignored.
- CloudEvents, binary and structured mode, to a trigger that messages an existing task: each event reaches it once,
  whatever the retries.
- A trigger's rate: the deliveries over it get 429 with Retry-After.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.cluster.operator_harness import GROUP, VERSION, StartOperator, Tasks, operator_factory, stored_messages
from tests.cluster.task_api_harness import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

KEYS = {"github-push": b"gh-s3cret", "alerts": b"ce-s3cret", "limited": b"json-s3cret"}


@pytest.fixture
def endpoint(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {"UNICORE_DEFAULT_GPUS": "0", "UNICORE_TRIGGER_PORT": str(port)}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env) as start:
        start_operator: StartOperator = start
        start_operator()
        yield f"http://127.0.0.1:{port}/triggers/{k8s_namespace}"


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), dict(exc.headers)


def sign(name: str, body: bytes) -> str:
    return "sha256=" + hmac.new(KEYS[name], body, hashlib.sha256).hexdigest()


def create(api: Any, namespace: str, plural: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)


def user_texts(redis_client: redis.Redis, task_id: str) -> list[str]:
    return [m["content"][0]["text"] for m in stored_messages(redis_client, task_id) if m["role"] == "user"]


def test_deliveries_start_tasks_and_message_one_once_per_event_and_bad_ones_create_nothing(
    endpoint: str, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    api = crd.api_client()
    tasks.core.create_namespaced_secret(k8s_namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="unicore-triggers"),
        data={name: base64.b64encode(key).decode() for name, key in KEYS.items()}))
    create(api, k8s_namespace, "agenttriggers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTrigger", "metadata": {"name": "github-push"},
        "spec": {"source": "github", "events": ["push"], "taskTemplate": {"spec": {
            "prompt": "Review ${data.repository.full_name}: ${data.head_commit.message}", "model": "scripted",
            "gpus": 0, "script": {"default": "Reviewed."}}}}})
    tasks.create("oncall", {"prompt": "You are on call.", "model": "scripted", "gpus": 0,
                            "script": {"default": "Noted."}})
    create(api, k8s_namespace, "agenttriggers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTrigger", "metadata": {"name": "alerts"},
        "spec": {"source": "cloudevents", "task": {"name": "oncall"},
                 "message": "Alert ${event.type} from ${event.source}: ${data.alert}"}})
    create(api, k8s_namespace, "agenttriggers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTrigger", "metadata": {"name": "limited"},
        "spec": {"source": "json", "ratePerMinute": 2, "task": {"name": "oncall"}, "message": "n=${data.n}"}})

    push = json.dumps({"repository": {"full_name": "acme/app"}, "head_commit": {"message": "Fix the build"}}).encode()
    github = {"Content-Type": "application/json", "X-GitHub-Event": "push", "X-GitHub-Delivery": "delivery-1",
              "X-Hub-Signature-256": sign("github-push", push)}
    status, answer, _ = wait_for(
        lambda: (found := post(f"{endpoint}/github-push", push, github)) and found[0] != 404 and found,
        timeout=60, interval=0.3, what="the operator to serve the trigger (its index to hold it)")
    assert status == 201, answer
    name = answer["task"]
    assert post(f"{endpoint}/github-push", push, github)[:2] == (200, {"task": name, "duplicate": True})
    forged = {**github, "X-GitHub-Delivery": "delivery-2", "X-Hub-Signature-256": "sha256=" + "0" * 64}
    assert post(f"{endpoint}/github-push", push, forged)[0] == 401
    form = {**github, "X-GitHub-Delivery": "delivery-3", "Content-Type": "application/x-www-form-urlencoded"}
    assert post(f"{endpoint}/github-push", push, form)[0] == 415
    huge = b"x" * (20 * 1024 * 1024)
    status, answer, _ = post(f"{endpoint}/github-push", huge, {**github, "X-GitHub-Delivery": "delivery-4",
                                                               "X-Hub-Signature-256": sign("github-push", huge)})
    assert status == 413 and "cap" in answer["error"]
    ping = b'{"zen": "Keep it logically awesome."}'
    status, answer, _ = post(f"{endpoint}/github-push", ping, {**github, "X-GitHub-Event": "ping",
                                                               "X-GitHub-Delivery": "delivery-5",
                                                               "X-Hub-Signature-256": sign("github-push", ping)})
    assert status == 202 and "ignored" in answer
    assert post(f"{endpoint}/nobody", push, github)[0] == 404

    wait_for(lambda: tasks.phase(name) == "Idle", timeout=120, interval=0.3, what="the push's task answered")
    started = [t["metadata"]["name"] for t in tasks.all()
               if (t["metadata"].get("labels") or {}).get("unicore.dev/trigger") == "github-push"]
    assert started == [name]  # one task for the push; nothing for the refused and ignored deliveries
    assert user_texts(redis_client, f"{k8s_namespace}/{name}") == ["Review acme/app: Fix the build"]
    assert (tasks.get(name) or {})["status"]["origin"] == {"kind": "AgentTrigger", "name": "github-push",
                                                            "id": "delivery-1"}

    alert = json.dumps({"alert": "disk full"}).encode()
    binary = {"Content-Type": "application/json", "ce-specversion": "1.0", "ce-id": "alert-1",
              "ce-type": "com.example.alert", "ce-source": "/monitor", "X-Signature-256": sign("alerts", alert)}
    assert post(f"{endpoint}/alerts", alert, binary)[0] == 202
    assert post(f"{endpoint}/alerts", alert, binary)[:2] == (200, {"task": "oncall", "duplicate": True})
    structured = json.dumps({"specversion": "1.0", "id": "alert-2", "type": "com.example.alert",
                             "source": "/monitor", "data": {"alert": "cpu hot"}}).encode()
    headers = {"Content-Type": "application/cloudevents+json", "X-Signature-256": sign("alerts", structured)}
    assert post(f"{endpoint}/alerts", structured, headers)[0] == 202
    expected = ["You are on call.", "Alert com.example.alert from /monitor: disk full",
                "Alert com.example.alert from /monitor: cpu hot"]
    wait_for(lambda: user_texts(redis_client, f"{k8s_namespace}/oncall") == expected, timeout=120, interval=0.3,
             what="both alerts in the on-call task, once each")

    codes = []
    for n in range(3):
        body = json.dumps({"n": n}).encode()
        status, _, response_headers = post(f"{endpoint}/limited", body, {
            "Content-Type": "application/json", "Idempotency-Key": f"k-{n}", "X-Signature-256": sign("limited", body)})
        codes.append(status)
    assert codes == [202, 202, 429] and response_headers.get("Retry-After") == "60"
