"""The chart's aggregated task API, rendered with `helm template` and checked as parsed objects: the APIService reaches
the operator's TLS port through the Service with a certificate its caBundle verifies, the operator holds exactly the
RBAC an aggregated API server needs, and the user ClusterRoles grant the task API's subresources (aggregated into
view and edit, plus the reader and messenger to bind per namespace). tests/cluster/test_task_api_tenancy.py applies
these ClusterRoles to a real API server."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509

from tests.cluster.test_chart_render import env_of, find, one, render

pytestmark = pytest.mark.cluster

NS = "agents"
GROUP = "tasks.unicore.dev"
READS = {"apiGroups": [GROUP], "resources": ["agenttasks/transcript", "agenttasks/tree", "agenttasks/summary",
                                            "agenttasks/stream", "agenttasks/approvals"],
         "verbs": ["get"]}
# sending messages and deciding approvals (kubectl agenttask send / approve / deny)
SENDS = {"apiGroups": [GROUP], "resources": ["agenttasks/messages", "agenttasks/approvals"], "verbs": ["create"]}
# shared conversations (docs/conversations.md): reading them, taking part, deleting (the editor's)
CONVERSATION_READS = {"apiGroups": [GROUP], "resources": ["conversations", "conversations/posts"],
                      "verbs": ["get", "list"]}
CONVERSATION_SENDS = {"apiGroups": [GROUP], "resources": ["conversations", "conversations/posts",
                                                          "conversations/members", "conversations/control"],
                      "verbs": ["create"]}
CONVERSATION_DELETES = {"apiGroups": [GROUP], "resources": ["conversations"], "verbs": ["delete"]}


def settings_of(objs: list[dict[str, Any]]) -> Any:
    from unicore_operator.settings import load_settings

    env = env_of(one(objs, "Deployment", "unicore-operator"))
    return load_settings({**{k: v for k, v in env.items() if isinstance(v, str)}, "REDIS_URL": "redis://x:6379/0"})


def test_the_apiservice_reaches_the_operators_task_api_with_a_certificate_its_ca_bundle_verifies() -> None:
    objs = render(namespace=NS)
    apiservice = one(objs, "APIService", "v1alpha1.tasks.unicore.dev")
    spec = apiservice["spec"]
    assert (spec["group"], spec["version"]) == (GROUP, "v1alpha1")
    assert spec["groupPriorityMinimum"] < 1000  # below the CRDs': `kubectl get agenttasks` stays unicore.dev's
    assert "insecureSkipTLSVerify" not in spec
    # APIService -> Service port -> the container's port `task-api` -> the operator's UNICORE_TASK_API_PORT
    service = one(objs, "Service", spec["service"]["name"], NS)
    assert spec["service"]["namespace"] == NS
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == spec["service"]["port"]]
    deployment = one(objs, "Deployment", "unicore-operator")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    settings = settings_of(objs)
    assert settings.task_api_port == target["containerPort"] == 9443
    assert settings.http_port == 8080  # health and metrics only
    # the serving certificate (shared with the webhook) is mounted where the operator reads it
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == settings.task_api_cert_dir]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = one(objs, "Secret", volume["secret"]["secretName"], NS)
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data["ca.crt"] == base64.b64decode(spec["caBundle"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"unicore-operator.{NS}.svc" in names  # the name the aggregator checks


def test_the_operator_may_review_access_and_read_the_request_header_ca() -> None:
    objs = render(namespace=NS)
    operator = {"kind": "ServiceAccount", "name": "unicore-operator", "namespace": NS}
    delegator = one(objs, "ClusterRoleBinding", f"unicore-operator-{NS}-auth-delegator")
    assert delegator["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                    "name": "system:auth-delegator"}
    assert delegator["subjects"] == [operator]
    reader = one(objs, "RoleBinding", f"unicore-operator-{NS}-auth-reader", "kube-system")
    assert reader["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                 "name": "extension-apiserver-authentication-reader"}
    assert reader["subjects"] == [operator]


def test_the_user_roles_grant_the_task_apis_subresources() -> None:
    objs = render(namespace=NS)
    roles = {name: one(objs, "ClusterRole", f"unicore-agenttask-{name}")
             for name in ("viewer", "editor", "reader", "messenger")}
    labels = {name: role["metadata"]["labels"] for name, role in roles.items()}
    assert labels["viewer"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert labels["editor"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert not any(key.startswith("rbac.authorization.k8s.io/aggregate") for key in labels["reader"])
    assert not any(key.startswith("rbac.authorization.k8s.io/aggregate") for key in labels["messenger"])
    task_api = {name: [r for r in role["rules"] if r["apiGroups"] == [GROUP]] for name, role in roles.items()}
    assert task_api == {
        "viewer": [READS, CONVERSATION_READS], "reader": [READS, CONVERSATION_READS],
        "editor": [READS, SENDS, CONVERSATION_READS, CONVERSATION_SENDS, CONVERSATION_DELETES],
        "messenger": [READS, SENDS, CONVERSATION_READS, CONVERSATION_SENDS]}
    # the reader and messenger also see the AgentTasks (`tree`, `describe`, `logs --follow`), and change none
    for name in ("reader", "messenger"):
        crd_rules = [r for r in roles[name]["rules"] if r["apiGroups"] == ["unicore.dev"]]
        assert crd_rules == [{"apiGroups": ["unicore.dev"], "resources": ["agenttasks", "agenttasks/status"],
                              "verbs": ["get", "list", "watch"]}]


def test_the_task_api_can_be_turned_off() -> None:
    objs = render("--set", "taskApi.enabled=false", namespace=NS)
    assert not find(objs, "APIService")
    assert not find(objs, "ClusterRoleBinding", f"unicore-operator-{NS}-auth-delegator")
    # the admission webhook still checks the API server's client certificate (admission.webhook.clientAuth):
    # the request-header CA stays readable for it; without that check nothing needs it
    assert find(objs, "RoleBinding", f"unicore-operator-{NS}-auth-reader", "kube-system")
    neither = render("--set", "taskApi.enabled=false", "--set", "admission.webhook.clientAuth=none", namespace=NS)
    assert not find(neither, "RoleBinding", f"unicore-operator-{NS}-auth-reader", "kube-system")
    assert settings_of(objs).task_api_port == 0
    assert [p["name"] for p in one(objs, "Service", "unicore-operator")["spec"]["ports"]] == ["http", "webhook"]
    policy = one(objs, "NetworkPolicy", "unicore-operator")
    assert all((9443, "TCP") not in {(p["port"], p["protocol"]) for p in rule["ports"]}
               for rule in policy["spec"]["ingress"])


def test_an_own_certificate_needs_its_ca_for_the_apiservice_too() -> None:
    objs = render("--set", "admission.webhook.existingSecret=my-cert", "--set-json",
                  'taskApi.annotations={"cert-manager.io/inject-ca-from":"agents/api"}', "--set-json",
                  'admission.webhook.annotations={"cert-manager.io/inject-ca-from":"agents/webhook"}', namespace=NS)
    apiservice = one(objs, "APIService")
    assert apiservice["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "agents/api"}
    assert "caBundle" not in apiservice["spec"]
