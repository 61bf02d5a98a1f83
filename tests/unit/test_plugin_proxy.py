"""The plugin's task API client: paths, retries with the same body, and the errors users see."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from unicore_operator.kubectl_plugin.errors import Forbidden, NotFound, PluginError, Unreachable
from unicore_operator.kubectl_plugin.kube import KubeContext
from unicore_operator.kubectl_plugin.proxy import TaskApiClient, forbidden_message, task_path


@dataclass
class Reply:
    status: int
    body: dict[str, Any]

    @property
    def data(self) -> bytes:
        return json.dumps(self.body).encode()

    def read(self) -> bytes:
        return self.data


@dataclass
class FakeApiClient:
    replies: list[Reply]
    calls: list[tuple[str, str, Any]] = field(default_factory=list)

    def param_serialize(
        self,
        *,
        method: str,
        resource_path: str,
        query_params: list[tuple[str, str]],
        header_params: dict[str, str],
        body: Any,
        auth_settings: list[str],
    ) -> tuple[Any, ...]:
        query = "&".join(f"{k}={v}" for k, v in query_params)
        return method, resource_path + (f"?{query}" if query else ""), header_params, body, []

    def call_api(
        self, method: str, url: str, *, header_params: Any, body: Any, post_params: Any, _request_timeout: Any
    ) -> Reply:
        self.calls.append((method, url, body))
        return self.replies.pop(0)


def client_with(*replies: Reply, timeout: float = 30.0) -> tuple[TaskApiClient, FakeApiClient]:
    fake = FakeApiClient(list(replies))
    kube = KubeContext(fake, namespace="team-a", operator_namespace="unicore-system")
    return TaskApiClient(kube, timeout=timeout, sleep=lambda _: None), fake


def status(code: int, reason: str, message: str, **details: Any) -> Reply:
    body: dict[str, Any] = {"kind": "Status", "code": code, "reason": reason, "message": message}
    if details:
        body["details"] = details
    return Reply(code, body)


def test_requests_go_through_the_service_proxy() -> None:
    api, fake = client_with(Reply(200, {"messages": []}))
    api.get(task_path("team-a", "demo", "/transcript"), [("since", 3), ("tools", True)])
    assert fake.calls == [
        (
            "GET",
            "/api/v1/namespaces/unicore-system/services/unicore-operator:http/proxy"
            "/v1/namespaces/team-a/agenttasks/demo/transcript?since=3&tools=true",
            None,
        )
    ]


def test_transient_failures_are_retried_with_the_same_message() -> None:
    api, fake = client_with(
        status(503, "ServiceUnavailable", 'no endpoints available for service "x"'),
        status(503, "TaskNotReady", "not initialised yet"),
        Reply(202, {"kind": "MessageReceipt", "duplicate": True}),
    )
    receipt = api.post("/v1/namespaces/team-a/agenttasks/demo/messages", {"id": "m1", "text": "hi"})
    assert receipt["duplicate"] is True
    assert [call[2] for call in fake.calls] == [{"id": "m1", "text": "hi"}] * 3


def test_retries_stop_at_the_deadline_with_a_clear_message() -> None:
    api, _ = client_with(*[status(503, "ServiceUnavailable", "no endpoints available")] * 50, timeout=0.0)
    with pytest.raises(Unreachable, match="not reachable through the API server .*is it running"):
        api.get("/v1")


def test_forbidden_names_the_user_the_verb_and_the_role() -> None:
    denied = (
        'services "unicore-operator:http" is forbidden: User "system:serviceaccount:t:viewer" cannot create '
        'resource "services/proxy" in API group "" in the namespace "unicore-system"'
    )
    api, fake = client_with(status(403, "Forbidden", denied))
    with pytest.raises(Forbidden) as err:
        api.post("/v1/namespaces/team-a/agenttasks/demo/messages", {"id": "m", "text": "x"})
    assert err.value.message == (
        'forbidden: system:serviceaccount:t:viewer cannot create services/proxy "unicore-operator:http" in '
        "namespace unicore-system, so cannot send messages to agent tasks "
        "(ask for the unicore-agenttask-messenger role)"
    )
    assert len(fake.calls) == 1  # never retried
    assert "cannot get services/proxy" in forbidden_message(denied, verb="get", operator_namespace="ns")
    assert "unicore-agenttask-reader role" in forbidden_message(
        "no user here", verb="get", operator_namespace="ns"
    )


def test_not_found_task_versus_missing_operator_service() -> None:
    api, _ = client_with(status(404, "NotFound", 'agenttask "team-a/x" not found', kind="agenttasks"))
    with pytest.raises(NotFound, match='agenttask "team-a/x" not found'):
        api.get("/v1/namespaces/team-a/agenttasks/x")
    api, _ = client_with(status(404, "NotFound", 'services "unicore-operator" not found', kind="services"))
    with pytest.raises(
        Unreachable, match="Service unicore-operator was not found in namespace unicore-system"
    ):
        api.get("/v1")


def test_other_errors_keep_the_servers_message() -> None:
    api, _ = client_with(status(413, "RequestEntityTooLarge", "over the cap of 262144 bytes"))
    with pytest.raises(PluginError, match="HTTP 413: over the cap"):
        api.post("/v1/x", {"id": "m", "text": "x"})
