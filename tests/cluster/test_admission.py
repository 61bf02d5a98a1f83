"""Children only narrow their parent, enforced by the control plane (issue 13 #3), on the real local control plane.

The chart's ValidatingAdmissionPolicy, its binding and its ValidatingWebhookConfiguration are rendered with `helm
template` and applied as they are, except that the webhook's clientConfig points at the operator this test runs as a
host process (``url: https://127.0.0.1:<port>/validate-agenttask``, a serving certificate the cluster CA signs)
instead of the in-cluster Service. Two creators try every refused child:

- a user authenticated by a client certificate, with edit-like RBAC on AgentTasks in the namespace only;
- the turn pods' ServiceAccount unicore-agent, with a TokenRequest token (what a turn pod holds) and the agents' Role.

Each refusal names what is wrong: a limit above the parent's (maxDescendants, tokenBudget 0 under a budget), a tool
the parent lacks or that is not in its childTools, a parent in another namespace or a missing one, a full tree. A
narrowing child is admitted and initialised. Without the policies the operator refuses the same children itself
(Failed, nothing stored, no turn Job); with the operator down, children are refused and roots are not; a scripted
tree spawns its children through the policies.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.cluster.operator_harness import (
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    StartOperator,
    Tasks,
    operator_factory,
)
from tests.cluster.test_chart_install import token_client
from tests.cluster.test_chart_render import one, render
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

ADMISSION = "admissionregistration.k8s.io"
PARENT_SPEC: dict[str, Any] = {
    "prompt": "Plan the work.",
    "model": "scripted",
    "suspend": True,  # initialised, never run: the test is about admission, not turns
    "limits": {"maxChildren": 10, "maxDescendants": 3, "tokenBudget": 1000},
    "tools": ["read_file", "list_files", "spawn_task", "task_status"],
    "childTools": ["read_file", "task_status"],
}
NARROW: dict[str, Any] = {"prompt": "Read it.", "suspend": True, "tools": ["read_file"],
                          "limits": {"maxDescendants": 2}}
WIDENING: list[tuple[str, dict[str, Any], str]] = [
    ("max-descendants", {"limits": {"maxDescendants": 4}}, "spec.limits.maxDescendants 4 is above its parent's 3"),
    ("token-budget", {"limits": {"tokenBudget": 0}},
     "spec.limits.tokenBudget 0 (unlimited) is above its parent's 1,000"),
    ("lacking-tool", {"tools": ["read_file", "write_file"]},
     "spec.tools names write_file, not among its parent's childTools (read_file, task_status)"),
    ("not-a-child-tool", {"tools": ["list_files"]},
     "spec.tools names list_files, not among its parent's childTools (read_file, task_status)"),
]
WEBHOOK_DENIED = 'admission webhook "children.agenttasks.unicore.dev" denied the request: '


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ca_pair(control_plane: Any) -> Any:
    from unicore_devcluster.pki import CertPair

    pki = control_plane.control_plane.data_dir / "pki"
    return CertPair(pki / "ca.crt", pki / "ca.key")


def user_client(control_plane: Any, tmp_path: Path, user: str) -> client.ApiClient:
    """An ApiClient authenticated as ``user`` by a client certificate the cluster CA signs."""
    from unicore_devcluster import pki

    pair = pki.issue(ca_pair(control_plane), tmp_path / "users", user, user, client=True)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(control_plane.kubeconfig), client_configuration=cfg)
    cfg.cert_file, cfg.key_file = str(pair.cert), str(pair.key)
    return client.ApiClient(cfg)


def grant_editor(api: client.ApiClient, namespace: str, user: str) -> None:
    """What the built-in edit role gives on AgentTasks (the chart's unicore-agenttask-editor), in ``namespace``."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "agenttask-editor"},
        "rules": [{"apiGroups": [GROUP], "resources": [PLURAL],
                   "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"agenttask-editor-{user}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "agenttask-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})


def agenttask(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTask", "metadata": {"name": name}, "spec": spec}


def refusal(create: Callable[[], Any], status: int = 403) -> str:
    """The API server's message refusing ``create`` with ``status`` (the test fails if it is admitted)."""
    try:
        create()
    except ApiException as exc:
        assert exc.status == status, (exc.status, exc.body)
        return str(json.loads(exc.body or "{}")["message"])
    raise AssertionError("admitted")


@dataclass
class Cluster:
    namespace: str
    admin: Tasks
    creators: dict[str, Tasks]
    operator: OperatorProcess
    redis: redis.Redis

    def initialised(self, name: str) -> str:
        """Wait until the operator has handled AgentTask ``name``; its phase."""
        return str(wait_for(lambda: self.admin.phase(name), timeout=60, interval=0.2,
                            what=f"AgentTask {name} handled by the operator"))


def policy_objects(namespace: str, port: int, ca_pem: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The chart's admission objects for ``namespace`` (plural, object); the webhook re-pointed at ``port``."""
    objs = render(namespace=namespace)
    policy = one(objs, "ValidatingAdmissionPolicy")
    binding = one(objs, "ValidatingAdmissionPolicyBinding")
    webhook = one(objs, "ValidatingWebhookConfiguration")
    from unicore_operator.admission import PATH

    for hook in webhook["webhooks"]:
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{PATH}", "caBundle": base64.b64encode(ca_pem).decode()}
    return [("validatingadmissionpolicies", policy), ("validatingadmissionpolicybindings", binding),
            ("validatingwebhookconfigurations", webhook)]


@pytest.fixture
def admission_env(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """``start(policies=True)``: the operator (with its webhook) for the namespace, the chart's admission objects
    applied (unless ``policies`` is false), a suspended parent ``p``, and the two creators."""
    from unicore_devcluster import pki

    ca = ca_pair(crd)
    pair = pki.issue(ca, tmp_path / "webhook", "webhook", "unicore-operator", server=True, ips=("127.0.0.1",))
    certs = tmp_path / "certs"
    certs.mkdir()
    shutil.copy(pair.cert, certs / "tls.crt")
    shutil.copy(pair.key, certs / "tls.key")
    port = free_port()
    env = {"UNICORE_WEBHOOK_PORT": str(port), "UNICORE_WEBHOOK_CERT_DIR": str(certs), "UNICORE_DEFAULT_GPUS": "0"}
    admin_api = crd.api_client()
    custom = client.CustomObjectsApi(admin_api)
    applied: list[tuple[str, str]] = []
    clients: list[client.ApiClient] = [admin_api]
    store = redis.Redis.from_url(redis_url, decode_responses=True)

    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start_operator:

        def start(policies: bool = True) -> Cluster:
            operator = start_operator()
            if policies:
                for plural, obj in policy_objects(k8s_namespace, port, ca.cert.read_bytes()):
                    custom.create_cluster_custom_object(ADMISSION, "v1", plural, obj)
                    applied.append((plural, obj["metadata"]["name"]))
            grant_editor(admin_api, k8s_namespace, "alice")
            user = user_client(crd, tmp_path, "alice")
            agent = token_client(crd, k8s_namespace, "unicore-agent")
            clients.extend([user, agent])
            admin = Tasks(admin_api, k8s_namespace)
            admin.create("p", PARENT_SPEC)
            found = Cluster(k8s_namespace, admin, {"user": Tasks(user, k8s_namespace),
                                                   "agent": Tasks(agent, k8s_namespace)}, operator, store)
            assert found.initialised("p") == "Suspended"
            if policies:
                wait_for_policies(found)
            return found

        try:
            yield start
        finally:
            for plural, name in reversed(applied):
                custom.delete_cluster_custom_object(ADMISSION, "v1", plural, name)
            for api in clients:
                api.close()
            store.close()


def wait_for_policies(cluster: Cluster) -> None:
    """The API server enforces both the policy and the webhook (its caches catch up within a second or so)."""
    def enforced() -> bool:
        elsewhere = agenttask("probe", {"parentRef": {"name": "p", "namespace": "default"}})
        wide = agenttask("probe", {"parentRef": {"name": "p"}, "limits": {"maxDescendants": 99}})
        messages = []
        for body in (elsewhere, wide):
            try:
                cluster.admin.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, body,
                                                                     dry_run="All")
                return False
            except ApiException as exc:
                messages.append(json.loads(exc.body)["message"])
        return "ValidatingAdmissionPolicy" in messages[0] and WEBHOOK_DENIED in messages[1]

    wait_for(enforced, timeout=30, interval=0.2, what="the admission policy and webhook to be enforced")


def create_as(tasks: Tasks, name: str, spec: dict[str, Any]) -> Callable[[], Any]:
    return lambda: tasks.create(name, spec)


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("creator", ["user", "agent"])
def test_a_child_that_widens_its_parent_or_names_no_parent_of_its_namespace_is_refused(
    admission_env: Callable[..., Cluster], creator: str
) -> None:
    env = admission_env()
    tasks = env.creators[creator]
    ns = env.namespace
    for case, extra, fragment in WIDENING:
        message = refusal(create_as(tasks, f"p-{case}", {**NARROW, **extra, "parentRef": {"name": "p"}}))
        assert message.startswith(WEBHOOK_DENIED + f"AgentTask {ns}/p-{case} may only narrow its parent {ns}/p: ")
        assert fragment in message, message
    # a parent elsewhere: refused by the policy (CEL), before the webhook
    message = refusal(create_as(tasks, "p-elsewhere", {**NARROW, "parentRef": {"name": "p", "namespace": "default"}}))
    assert f"ValidatingAdmissionPolicy 'unicore-agenttasks-{ns}'" in message
    assert f"spec.parentRef.namespace default: a child AgentTask names a parent in its own namespace ({ns})" in message
    message = refusal(create_as(tasks, "p-prefixed", {**NARROW, "parentRef": {"name": "default/p"}}))
    assert "spec.parentRef.name default/p: name an AgentTask of the child AgentTask own namespace" in message
    # a missing parent, and a parentRef.uid of an object that is not this namespace's parent
    message = refusal(create_as(tasks, "nope-a", {**NARROW, "parentRef": {"name": "nope"}}))
    assert message == WEBHOOK_DENIED + (f"parent AgentTask {ns}/nope does not exist: a child AgentTask "
                                        "(spec.parentRef) must name an existing AgentTask in its own namespace")
    other_uid = client.CoreV1Api(env.admin.custom.api_client).read_namespace("default").metadata.uid
    message = refusal(create_as(tasks, "p-uid", {**NARROW, "parentRef": {"name": "p", "uid": other_uid}}))
    assert f"spec.parentRef.uid {other_uid} is not the uid of AgentTask {ns}/p" in message
    # nothing was made
    assert {task["metadata"]["name"] for task in env.admin.all()} == {"p"}
    # a child that narrows its parent is admitted and initialised
    tasks.create("p-narrow", {**NARROW, "parentRef": {"name": "p"}})
    assert env.initialised("p-narrow") == "Suspended"
    stored = env.redis.hgetall(f"uc:{{{ns}/p-narrow}}:task")
    assert json.loads(stored["tools"]) == ["read_file"] and json.loads(stored["limits"])["max_descendants"] == 2


def test_only_the_api_server_gets_the_webhooks_verdicts(admission_env: Callable[..., Cluster], crd: Any,
                                                        tmp_path: Path) -> None:
    """The API server presents its front-proxy client certificate to webhooks (the dev cluster's
    --admission-control-config-file), and the webhook answers only it (issue 25, 7): a direct AdmissionReview
    without it, or with a user's certificate, learns nothing about the namespace's tasks."""
    from unicore_devcluster import pki

    env = admission_env()
    # the API server's reviews are answered (every refusal above is one)
    refused = refusal(create_as(env.creators["user"], "p-wide", {**NARROW, "parentRef": {"name": "p"},
                                                                  "limits": {"maxChildren": 99}}))
    assert refused.startswith(WEBHOOK_DENIED)
    port = int(env.operator.env["UNICORE_WEBHOOK_PORT"])
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "probe", "operation": "CREATE", "namespace": env.namespace, "name": "p-probe",
        "object": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTask",
                   "metadata": {"name": "p-probe", "namespace": env.namespace},
                   "spec": {**NARROW, "parentRef": {"name": "p"}, "limits": {"maxChildren": 99}}}}}
    user = pki.issue(ca_pair(crd), tmp_path / "probe", "probe", "front-proxy-client", client=True)
    for cert in (None, user):
        context = ssl.create_default_context(cafile=str(ca_pair(crd).cert))
        if cert is not None:
            context.load_cert_chain(str(cert.cert), str(cert.key))
        request = urllib.request.Request(f"https://127.0.0.1:{port}/validate-agenttask",
                                         data=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as answer:  # noqa: S310
                raise AssertionError(f"answered: {answer.read()!r}")
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            assert exc.code == 401 and "Unauthorized" in body["error"] and "response" not in body, body
        except (urllib.error.URLError, ConnectionError, ssl.SSLError):
            assert cert is not None  # another CA's certificate: the handshake fails


def test_the_turn_pods_service_account_creates_only_children(admission_env: Callable[..., Cluster]) -> None:
    env = admission_env()
    message = refusal(create_as(env.creators["agent"], "fresh-root", {"prompt": "Start over, unlimited.",
                                                                      "limits": {"maxDescendants": 100000}}))
    assert f"the turn pods ServiceAccount (system:serviceaccount:{env.namespace}:unicore-agent) may create only " \
           "child AgentTasks" in message
    env.creators["user"].create("user-root", {"prompt": "Mine.", "suspend": True})  # a user may start a tree


def test_a_childs_limits_and_tools_stay_as_they_were_admitted(admission_env: Callable[..., Cluster]) -> None:
    env = admission_env()
    user = env.creators["user"]
    user.create("p-a", {**NARROW, "parentRef": {"name": "p"}})
    env.initialised("p-a")
    for change in ({"limits": {"maxDescendants": 100000}}, {"tools": ["read_file", "write_file"]},
                   {"childTools": ["read_file"]}):
        message = refusal(lambda change=change: user.patch("p-a", change))  # type: ignore[misc]
        assert "spec.limits, spec.tools and spec.childTools of a child AgentTask are fixed when it is created" \
               in message
    user.patch("p-a", {"systemPrompt": "Be brief."})  # other fields stay editable
    user.patch("p", {"limits": {"maxDescendants": 4}})  # and a root's limits are its owner's


def test_children_count_against_their_trees_budget(admission_env: Callable[..., Cluster]) -> None:
    env = admission_env()
    for n, creator in enumerate(("user", "agent", "user")):
        env.creators[creator].create(f"p-c{n}", {**NARROW, "parentRef": {"name": "p"}})
        env.initialised(f"p-c{n}")  # its slot is reserved once the operator has initialised it
    for creator in ("user", "agent"):
        message = refusal(create_as(env.creators[creator], "p-c3", {**NARROW, "parentRef": {"name": "p"}}))
        assert message == WEBHOOK_DENIED + (f"AgentTask {env.namespace}/p-c3 does not fit in its tree: maximum task "
                                            f"tree size reached: {env.namespace}/p already has 3 descendant task(s) "
                                            "(limits.max_descendants = 3)")


# ------------------------------------------------------------------------------------------ the operator
def test_without_the_policies_the_operator_refuses_the_same_children(admission_env: Callable[..., Cluster]) -> None:
    env = admission_env(policies=False)
    user = env.creators["user"]
    ns = env.namespace
    for case, extra, _ in WIDENING:
        user.create(f"p-{case}", {**NARROW, **extra, "parentRef": {"name": "p"}, "suspend": False})
    user.create("p-ok", {**NARROW, "parentRef": {"name": "p"}})
    for case, _, fragment in WIDENING:
        assert env.initialised(f"p-{case}") == "Failed"
        status = env.admin.get(f"p-{case}")["status"]  # type: ignore[index]
        assert status["message"].startswith(f"AgentTask {ns}/p-{case} may only narrow its parent {ns}/p: ")
        assert fragment in status["message"]
        assert not env.redis.exists(f"uc:{{{ns}/p-{case}}}:task")  # nothing stored: no turn, no report
    assert env.initialised("p-ok") == "Suspended"
    # the tree's budget: p-ok holds one of 3 slots
    for n in range(2):
        user.create(f"p-more{n}", {**NARROW, "parentRef": {"name": "p"}})
        assert env.initialised(f"p-more{n}") == "Suspended"
    user.create("p-over", {**NARROW, "parentRef": {"name": "p"}})
    assert env.initialised("p-over") == "Failed"
    message = env.admin.get("p-over")["status"]["message"]  # type: ignore[index]
    assert message == (f"AgentTask {ns}/p-over does not fit in its tree: maximum task tree size reached: {ns}/p "
                       "already has 3 descendant task(s) (limits.max_descendants = 3)")
    assert not [job for job in env.admin.jobs() if job.metadata.name.startswith("p-")]


def test_children_are_refused_while_the_operator_is_down_and_roots_are_not(
        admission_env: Callable[..., Cluster]) -> None:
    env = admission_env()
    env.operator.stop()
    # the API server cannot reach the webhook: an internal error, and the child is not made
    message = refusal(create_as(env.creators["user"], "p-a", {**NARROW, "parentRef": {"name": "p"}}), status=500)
    assert 'failed calling webhook "children.agenttasks.unicore.dev"' in message
    assert env.admin.get("p-a") is None
    env.creators["user"].create("another-root", {"prompt": "Go.", "suspend": True})


SPAWN_SCRIPT = {
    "default": "Done.",
    "tasks": {
        "tree": [
            {"tool_use": [{"name": "spawn_task", "input": {"name": "a", "prompt": "Report A."}}]},
            {"text": "Waiting for a."},
            {"echo": True},
        ],
        "tree-a": [{"text": "A reporting."}],
    },
}


def test_spawn_task_makes_its_children_through_the_policies(admission_env: Callable[..., Cluster]) -> None:
    """A turn pod (its ServiceAccount's token) creates the child; the webhook admits it and the tree completes."""
    env = admission_env()
    env.admin.create("tree", {"prompt": "Ask a, then report.", "model": "scripted", "script": SPAWN_SCRIPT,
                              "childTools": ["read_file", "task_status"]})

    def settled() -> dict[str, str | None] | None:
        phases = env.admin.all_phases()
        root = env.admin.get("tree") or {}
        done = phases.get("tree") == phases.get("tree-a") == "Idle"
        return phases if done and (root.get("status") or {}).get("turns", 0) >= 2 else None

    wait_for(settled, timeout=180, interval=0.5, what="tree and tree-a Idle")
    child = env.admin.get("tree-a") or {}
    assert child["spec"]["parentRef"]["name"] == "tree" and child["spec"]["tools"] == ["read_file", "task_status"]
    assert "turnTimeoutSeconds" not in child["spec"]["limits"]


def test_the_operator_starts_only_with_a_usable_certificate(crd: Any, k8s_namespace: str, redis_url: str,
                                                             tmp_path: Path) -> None:
    start: StartOperator
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path,
                          env={"UNICORE_WEBHOOK_PORT": str(free_port()),
                               "UNICORE_WEBHOOK_CERT_DIR": str(tmp_path / "missing")}) as start:
        proc = start()
        wait_for(lambda: "has no usable certificate in UNICORE_WEBHOOK_CERT_DIR" in proc.log(), timeout=60,
                 interval=0.2, what="the operator to say why it cannot serve the webhook")
