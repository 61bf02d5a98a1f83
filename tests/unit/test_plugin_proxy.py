"""The plugin's task API client: the aggregated API's paths, retries with the same body, and the errors users see."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from unicore_client.kubectl_plugin.errors import Forbidden, NotFound, PluginError, Unreachable
from unicore_client.kubectl_plugin.kube import KubeContext
from unicore_client.kubectl_plugin.proxy import TaskApiClient, forbidden_message, task_path


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
    kube = KubeContext(fake, namespace="team-a")
    return TaskApiClient(kube, timeout=timeout, sleep=lambda _: None), fake


def status(code: int, reason: str, message: str, **details: Any) -> Reply:
    body: dict[str, Any] = {"kind": "Status", "code": code, "reason": reason, "message": message}
    if details:
        body["details"] = details
    return Reply(code, body)


API = "/apis/tasks.unicore.dev/v1alpha1"


def test_requests_go_to_the_aggregated_api_through_the_api_server() -> None:
    api, fake = client_with(Reply(200, {"messages": []}))
    api.get(task_path("team-a", "demo", "transcript"), [("since", 3), ("tools", True)])
    assert fake.calls == [("GET", f"{API}/namespaces/team-a/agenttasks/demo/transcript?since=3&tools=true", None)]
    assert task_path("a b", "x/y", "messages") == f"{API}/namespaces/a%20b/agenttasks/x%2Fy/messages"


def test_transient_failures_are_retried_with_the_same_message() -> None:
    api, fake = client_with(
        status(503, "ServiceUnavailable", "the server is currently unable to handle the request"),
        status(503, "TaskNotReady", "not initialised yet"),
        Reply(202, {"kind": "MessageReceipt", "duplicate": True}),
    )
    receipt = api.post(task_path("team-a", "demo", "messages"), {"id": "m1", "text": "hi"})
    assert receipt["duplicate"] is True
    assert [call[2] for call in fake.calls] == [{"id": "m1", "text": "hi"}] * 3


def test_retries_stop_at_the_deadline_with_a_clear_message() -> None:
    api, _ = client_with(*[status(503, "ServiceUnavailable", "service unavailable")] * 50, timeout=0.0)
    with pytest.raises(Unreachable, match=r"not reachable through the API server .*is the operator running\? "
                                          r"\(kubectl get apiservice v1alpha1.tasks.unicore.dev\)"):
        api.get(task_path("team-a", "demo", "transcript"))


def test_forbidden_names_the_user_the_verb_the_subresource_the_namespace_and_the_role() -> None:
    denied = (
        'agenttasks.tasks.unicore.dev "demo" is forbidden: User "alice" cannot create resource '
        '"agenttasks/messages" in API group "tasks.unicore.dev" in the namespace "team-b"'
    )
    api, fake = client_with(status(403, "Forbidden", denied))
    with pytest.raises(Forbidden) as err:
        api.post(task_path("team-b", "demo", "messages"), {"id": "m", "text": "x"})
    assert err.value.message == (
        "forbidden: alice cannot create agenttasks/messages (tasks.unicore.dev) in namespace team-b, so cannot send "
        "messages to its agent tasks (ask for the unicore-agenttask-messenger role there)"
    )
    assert len(fake.calls) == 1  # never retried
    reading = forbidden_message(denied, method="GET", path=task_path("team-b", "demo", "transcript") + "?since=0")
    assert reading.startswith("forbidden: alice cannot get agenttasks/transcript (tasks.unicore.dev) in namespace "
                              "team-b, so cannot read its agent tasks")
    assert "unicore-agenttask-reader role" in reading
    assert forbidden_message("no user here", method="GET", path=task_path("n", "t", "tree")).startswith(
        "forbidden: you cannot get agenttasks/tree")


def test_not_found_task_versus_a_cluster_without_the_task_api() -> None:
    api, _ = client_with(status(404, "NotFound", 'agenttask "team-a/x" not found', kind="agenttasks"))
    with pytest.raises(NotFound, match='agenttask "team-a/x" not found'):
        api.get(task_path("team-a", "x", "transcript"))
    api, _ = client_with(status(404, "NotFound", "the server could not find the requested resource"))
    with pytest.raises(Unreachable, match=r"task API \(tasks.unicore.dev/v1alpha1\) is not served by this "
                                          r"cluster: is UniCore installed, with its APIService"):
        api.get(task_path("team-a", "x", "transcript"))


def test_other_errors_keep_the_servers_message() -> None:
    api, _ = client_with(status(413, "RequestEntityTooLarge", "over the cap of 262144 bytes"))
    with pytest.raises(PluginError, match="HTTP 413: over the cap"):
        api.post(task_path("team-a", "x", "messages"), {"id": "m", "text": "x"})
    api, _ = client_with(status(401, "Unauthorized", "Unauthorized"))
    with pytest.raises(Forbidden, match="unauthorized: the API server did not accept your credentials"):
        api.get(task_path("team-a", "x", "tree"))
