"""The agent ServiceAccount, Role and RoleBinding the operator provisions (unicore_operator.agent_rbac): the pure
builders, and the provisioner against a stand-in for the API server (order, 409, refusals, once per namespace)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from unicore_operator.agent_rbac import (
    AgentRbacProvisioner,
    TransientFailure,
    build_agent_rbac_specs,
    build_role_binding_spec,
    build_role_spec,
    build_service_account_spec,
    collection_path,
)
from unicore_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(redis_url="redis://r")  # cluster-wide: provisioning on
LABELS = {"app.kubernetes.io/name": "unicore", "app.kubernetes.io/component": "agent",
          "app.kubernetes.io/managed-by": "unicore-operator"}


def test_service_account() -> None:
    assert build_service_account_spec("team-a", SETTINGS) == {
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "unicore-agent", "namespace": "team-a", "labels": LABELS},
    }
    irsa = SETTINGS.model_copy(update={"agent_service_account": "robots",
                                       "agent_service_account_annotations": {"eks.amazonaws.com/role-arn": "arn"}})
    meta = build_service_account_spec("team-a", irsa)["metadata"]
    assert meta["name"] == "robots" and meta["annotations"] == {"eks.amazonaws.com/role-arn": "arn"}


def test_role_grants_what_turn_pods_need_and_nothing_more() -> None:
    """The same rules as the chart's agent Role (helm/unicore/templates/rbac-agent.yaml; the chart tests compare)."""
    assert build_role_spec("team-a", SETTINGS) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "unicore-agent", "namespace": "team-a", "labels": LABELS},
        "rules": [{"apiGroups": ["unicore.dev"], "resources": ["agenttasks"],
                   "verbs": ["create", "get", "list", "watch"]}],
    }
    build_role_spec("team-a", SETTINGS)["rules"][0]["verbs"].append("delete")
    assert build_role_spec("team-a", SETTINGS)["rules"][0]["verbs"] == ["create", "get", "list", "watch"]


def test_role_binding_binds_the_role_to_the_service_account_of_its_namespace() -> None:
    assert build_role_binding_spec("team-a", SETTINGS) == {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "unicore-agent", "namespace": "team-a", "labels": LABELS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "unicore-agent"},
        "subjects": [{"kind": "ServiceAccount", "name": "unicore-agent", "namespace": "team-a"}],
    }


def test_the_service_account_comes_last_and_the_paths() -> None:
    specs = build_agent_rbac_specs("team-a", SETTINGS)
    assert [obj["kind"] for obj in specs] == ["Role", "RoleBinding", "ServiceAccount"]
    assert [collection_path(obj) for obj in specs] == [
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/roles",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings",
        "/api/v1/namespaces/team-a/serviceaccounts",
    ]


class FakeApi:
    """Answers creates like the API server: ``answers[kind]`` is a status code to raise (else 201)."""

    def __init__(self, **answers: int) -> None:
        self.answers = answers
        self.created: list[tuple[str, str]] = []

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        status = self.answers.get(body["kind"])
        if status:
            exc = ApiException(status=status, reason="Forbidden" if status == 403 else "Error")
            exc.body = json.dumps({"message": f'roles.rbac.authorization.k8s.io "x" is forbidden:\n  user {status}'})
            raise exc
        self.created.append((body["kind"], body["metadata"]["namespace"]))
        return body


def provisioner(api: FakeApi, settings: OperatorSettings = SETTINGS) -> AgentRbacProvisioner:
    return AgentRbacProvisioner(api, settings)  # type: ignore[arg-type]


def test_created_once_per_namespace_even_when_asked_concurrently() -> None:
    api = FakeApi()
    rbac = provisioner(api)

    async def run() -> list[str | None]:
        first = await asyncio.gather(*(rbac.ensure("team-a") for _ in range(5)))
        return [*first, await rbac.ensure("team-a"), await rbac.ensure("team-b")]

    assert asyncio.run(run()) == [None] * 7
    assert api.created == [("Role", "team-a"), ("RoleBinding", "team-a"), ("ServiceAccount", "team-a"),
                           ("Role", "team-b"), ("RoleBinding", "team-b"), ("ServiceAccount", "team-b")]
    assert rbac.done == {"team-a", "team-b"}


def test_objects_that_exist_are_fine_and_left_alone() -> None:
    api = FakeApi(Role=409, ServiceAccount=409)
    rbac = provisioner(api)
    assert asyncio.run(rbac.ensure("team-a")) is None
    assert api.created == [("RoleBinding", "team-a")] and rbac.done == {"team-a"}


def test_a_refusal_names_the_object_stops_before_the_service_account_and_is_tried_again() -> None:
    api = FakeApi(RoleBinding=403)
    rbac = provisioner(api)
    problem = asyncio.run(rbac.ensure("team-a"))
    assert problem == ("could not create RoleBinding unicore-agent in namespace team-a for turn pods (403: "
                       'roles.rbac.authorization.k8s.io "x" is forbidden: user 403)')
    assert api.created == [("Role", "team-a")] and not rbac.done  # no ServiceAccount without its permissions
    api.answers = {"Role": 409}
    assert asyncio.run(rbac.ensure("team-a")) is None
    assert rbac.done == {"team-a"}


def test_a_busy_api_server_is_a_transient_failure() -> None:
    rbac = provisioner(FakeApi(Role=503))
    with pytest.raises(TransientFailure, match="could not create Role unicore-agent .* 503"):
        asyncio.run(rbac.ensure("team-a"))
    assert not rbac.done


def test_off_creates_nothing() -> None:
    api = FakeApi()
    for settings in (OperatorSettings(redis_url="redis://r", namespaces=("team-a",)),
                     OperatorSettings(redis_url="redis://r", provision_agent_rbac=False)):
        assert asyncio.run(provisioner(api, settings).ensure("team-a")) is None
    assert api.created == []
