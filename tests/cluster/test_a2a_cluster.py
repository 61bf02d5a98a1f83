"""A2A agents on the real local control plane (issue 31): a host-process operator serves Agents with ``spec.a2a`` on
its inbound endpoint; the client is the A2A project's own (``a2a-sdk``), with Kubernetes ServiceAccount tokens.

- the card is discovered; a message starts a task whose turn asks a question (``ask_user``): INPUT_REQUIRED with the
  question; the answer sent with its task id continues it to COMPLETED, the answer in its artifact;
- a streamed message gives the Task, the answer's text from the live token stream as the model writes it, then
  COMPLETED;
- GetTask reads a task back with its history; CancelTask suspends a waiting one (CANCELED);
- a caller whose RBAC does not allow it gets 403 and starts nothing; one without a token 401.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types import CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from kubernetes import client

from tests.cluster.operator_harness import GROUP, VERSION, Tasks, kubectl, operator_factory
from tests.cluster.task_api_harness import free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

HELPER_SCRIPT = {"tasks": {"a2a-*": [
    {"tool_use": [{"name": "ask_user", "input": {"question": "Which colour do you mean?"}}]},
    {"echo_results": True}]}}
ANSWER = "The sky is blue because air scatters blue light the most."


@pytest.fixture
def base(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path,
                          env={"UNICORE_DEFAULT_GPUS": "0", "UNICORE_TRIGGER_PORT": str(port)}) as start:
        start()
        yield f"http://127.0.0.1:{port}/a2a/{k8s_namespace}"


def agent(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Agent", "metadata": {"name": name},
            "spec": {"model": "scripted", "gpus": 0, **spec}}


def caller_token(crd: Any, namespace: str, name: str, rules: list[dict[str, Any]]) -> str:
    rbac = client.RbacAuthorizationV1Api(crd.api_client())
    client.CoreV1Api(crd.api_client()).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    if rules:
        rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                    "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    return str(kubectl(crd.kubeconfig, "create", "token", name, "-n", namespace, "--duration=1h").stdout.strip())


CALLER_RULES = [
    {"apiGroups": [GROUP], "resources": ["agenttasks"], "verbs": ["create", "get", "patch"]},
    {"apiGroups": ["tasks.unicore.dev"], "resources": ["agenttasks/messages"], "verbs": ["create"]},
    {"apiGroups": ["tasks.unicore.dev"], "resources": ["agenttasks/transcript"], "verbs": ["get"]},
]


def say(text: str, task_id: str | None = None) -> SendMessageRequest:
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    return SendMessageRequest(message=message)


async def scenario(base: str, token: str, stranger: str, tasks: Tasks) -> None:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        card = await A2ACardResolver(http, f"{base}/helper").get_agent_card()
        assert card.name == "helper" and card.capabilities.streaming
        assert card.supported_interfaces[0].url == f"{base}/helper"
        helper = await ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create_from_url(
            f"{base}/helper")
        [first] = [event async for event in helper.send_message(say("What colour is the sky?"))]
        task = first.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
        assert task.status.message.parts[0].text == "Which colour do you mean?"
        [second] = [event async for event in helper.send_message(say("Blue, of course.", task.id))]
        assert second.task.id == task.id and second.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert "Blue, of course." in second.task.artifacts[0].parts[0].text
        got = await helper.get_task(GetTaskRequest(id=task.id, history_length=10))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        assert [m.parts[0].text for m in got.history if m.role == Role.ROLE_USER][:1] == ["What colour is the sky?"]

        [waiting] = [event async for event in helper.send_message(say("And the sea?"))]
        assert waiting.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        canceled = await helper.cancel_task(CancelTaskRequest(id=waiting.task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        assert (tasks.get(waiting.task.id) or {})["spec"]["suspend"] is True

        writer = await ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create_from_url(
            f"{base}/writer")
        kinds, text, state = [], "", None
        async for event in writer.send_message(say("Why is the sky blue?")):
            kind = event.WhichOneof("payload")
            kinds.append(kind)
            if kind == "artifact_update":
                text += "".join(part.text for part in event.artifact_update.artifact.parts)
            if kind == "status_update":
                state = event.status_update.status.state
        # the text comes only from the task's live token stream (how many chunks depends on the sink's batching)
        assert kinds[0] == "task" and kinds[-1] == "status_update" and kinds.count("artifact_update") >= 1
        assert text.split() == ANSWER.split() and state == TaskState.TASK_STATE_COMPLETED

    for headers, code in (({"Authorization": f"Bearer {stranger}"}, "403"), ({}, "401")):
        async with httpx.AsyncClient(headers=headers, timeout=60) as http:
            refused = await ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create_from_url(
                f"{base}/helper")
            with pytest.raises(A2AClientError, match=code):
                [event async for event in refused.send_message(say("Let me in."))]


def test_an_a2a_client_asks_answers_streams_reads_and_cancels_and_a_stranger_is_refused(
    base: str, tasks: Tasks, crd: Any, k8s_namespace: str,
) -> None:
    custom = client.CustomObjectsApi(crd.api_client())
    custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "agents", agent("helper", {
        "tools": ["ask_user"], "a2a": {"description": "Answers questions, asking back when unsure.",
                                       "script": HELPER_SCRIPT},
        "systemPrompt": "You help."}))
    custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "agents", agent("writer", {
        "tools": [], "a2a": {"script": {"default": ANSWER}}}))
    token = caller_token(crd, k8s_namespace, "caller", CALLER_RULES)
    stranger = caller_token(crd, k8s_namespace, "stranger", [])
    wait_for(lambda: httpx.get(f"{base}/helper/.well-known/agent-card.json").status_code == 200, timeout=60,
             interval=0.3, what="the operator to serve the helper's card")
    asyncio.run(scenario(base, token, stranger, tasks))
    started = [t for t in tasks.all() if (t["metadata"].get("labels") or {}).get("unicore.dev/a2a-agent")]
    assert len(started) == 3  # the stranger and the anonymous caller started nothing
    caller = f"system:serviceaccount:{k8s_namespace}:caller"
    started_events = wait_for(lambda: [e for e in tasks.core.list_namespaced_event(
        k8s_namespace, field_selector="involvedObject.kind=Agent").items if e.reason == "Started"] or None,
        timeout=30, what="the Agents' Started Events")
    assert all(caller in event.message for event in started_events)
    wait_for(lambda: all((tasks.get(t["metadata"]["name"]) or {}).get("status", {}).get("origin") == {
        "kind": "A2A", "name": t["spec"]["agentRef"]["name"], "caller": caller} for t in started), timeout=30,
        what="each A2A task's status to say who called which agent")
