"""Tenants cannot see or steer each other through the task API (issue 13: 1), on the real local control plane.

One operator (a host process) watches two namespaces and serves the task API as the aggregated API
tasks.unicore.dev/v1alpha1 behind the real API server (APIService, front-proxy certificate, --enable-aggregator-
routing). It runs as the chart's ServiceAccount with the chart's RBAC (rendered cluster-wide, applied as it is: its
SubjectAccessReviews come from system:auth-delegator, the request-header CA from the kube-system RoleBinding). The
chart's user ClusterRoles (rendered with `helm template`, applied as they are) are bound per namespace to users
authenticated by client certificates the cluster CA signs: alice and bob hold the messenger role in their own
namespace, carol only the reader role in alice's. Each reads and posts in their own namespace, through `kubectl
agenttask logs/send/tree` (the real plugin on PATH) and through `kubectl get/create --raw`, and gets 403 in the other
namespace with nothing read or written; the stored sender of a message is the authenticated user. Calls to the
operator's port that do not come from the API server's front-proxy certificate get no task data.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from kubernetes import client
from unicore.store.tasks import TaskStore

from tests.cluster.operator_harness import VENV_BIN, OperatorProcess, Tasks, install_agent_rbac, install_crd, kubectl
from tests.cluster.task_api_harness import TaskApiEndpoint, aggregated_task_api, ca_pair, task_path
from tests.cluster.test_chart_render import one, render
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

SETTLE = 180.0
ROLES = ("unicore-agenttask-reader", "unicore-agenttask-messenger")


def chat_spec(name: str, namespace: str) -> dict[str, Any]:
    return {"prompt": "Say you are ready.", "model": "scripted", "gpus": 0,
            "script": {"default": "Done.", "tasks": {name: [{"text": f"ready in {namespace}"}, {"echo": True}]}}}


@dataclass
class Tenants:
    a: str
    b: str
    kubeconfig: Path  # the admin's
    endpoint: TaskApiEndpoint
    store: TaskStore
    tmp: Path
    users: dict[str, Path] = field(default_factory=dict)  # kubeconfig per user
    certs: dict[str, Any] = field(default_factory=dict)  # client certificate (CertPair) per user
    pki: Path = Path()

    def plugin(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`kubectl agenttask ...` as ``user`` (kubectl's plugin mechanism, kubectl-agenttask on PATH)."""
        env = {**os.environ, "KUBECONFIG": str(self.users[user]),
               "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        return subprocess.run(["kubectl", "agenttask", *args], env=env, capture_output=True, text=True, timeout=120)

    def raw(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(self.users[user], *args, check=False)

    def inbox(self, namespace: str) -> list[Any]:
        return self.store.inbox(f"{namespace}/chat")

    def untouched(self, namespace: str) -> tuple[Any, ...]:
        keys = self.store.keys(f"{namespace}/chat")
        r = self.store.redis
        return (r.lrange(keys.inbox, 0, -1), r.lrange(keys.messages, 0, -1), r.hget(keys.task, "turns"))


def user_kubeconfig(admin: Path, folder: Path, user: str, cert: Any, namespace: str) -> Path:
    config = yaml.safe_load(admin.read_text())
    cluster = config["clusters"][0]["cluster"]
    path = folder / f"{user}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": user, "user": {"client-certificate": str(cert.cert), "client-key": str(cert.key)}}],
        "contexts": [{"name": user, "context": {"cluster": "c", "user": user, "namespace": namespace}}],
    }))
    return path


def token_kubeconfig(admin: Path, folder: Path, namespace: str, service_account: str) -> Path:
    """A kubeconfig with a TokenRequest token of the ServiceAccount (what the chart's operator pod holds)."""
    token = kubectl(admin, "create", "token", service_account, "-n", namespace, "--duration=2h").stdout.strip()
    cluster = yaml.safe_load(admin.read_text())["clusters"][0]["cluster"]
    path = folder / f"{service_account}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": namespace}}]}))
    return path


def operator_rbac(chart: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The chart's operator ServiceAccount and RBAC (rendered with rbac.clusterWide), the task API's included."""
    cluster_name = f"unicore-operator-{namespace}"
    return [one(chart, "ServiceAccount", "unicore-operator", namespace),
            one(chart, "ClusterRole", cluster_name), one(chart, "ClusterRoleBinding", cluster_name),
            one(chart, "ClusterRole", f"{cluster_name}-cluster-read"),
            one(chart, "ClusterRoleBinding", f"{cluster_name}-cluster-read"),
            one(chart, "ClusterRoleBinding", f"{cluster_name}-auth-delegator"),
            one(chart, "RoleBinding", f"{cluster_name}-auth-reader", "kube-system")]


def bind(api: Any, namespace: str, role: str, user: str) -> None:
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"{user}-{role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})


@pytest.fixture(scope="module")
def tenants(control_plane: Any, redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    from unicore_devcluster import pki

    install_crd(control_plane.kubeconfig)
    tmp = tmp_path_factory.mktemp("tenancy")
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    a, b, operator_ns = f"team-a-{suffix}", f"team-b-{suffix}", f"unicore-{suffix}"
    for namespace in (a, b, operator_ns):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    for namespace in (a, b):
        wait_for(lambda ns=namespace: core.read_namespaced_service_account("default", ns), timeout=30,
                 what="default SA")
        install_agent_rbac(control_plane.kubeconfig, namespace)
    # the chart's user ClusterRoles and the operator's RBAC, as rendered
    chart = render("--set", "rbac.clusterWide=true", namespace=operator_ns)
    for role in ROLES:
        rbac.create_cluster_role(one(chart, "ClusterRole", role))
    operator_objects = operator_rbac(chart, operator_ns)
    applied = kubectl(control_plane.kubeconfig, "apply", "-f", "-",
                      input_text=yaml.safe_dump_all(operator_objects), check=False)
    assert applied.returncode == 0, applied.stderr
    store = TaskStore(redis.Redis.from_url(redis_server.url, decode_responses=True))
    try:
        with aggregated_task_api(control_plane, operator_ns, tmp) as endpoint:
            as_operator = token_kubeconfig(Path(control_plane.kubeconfig), tmp, operator_ns, "unicore-operator")
            operator = OperatorProcess(as_operator, redis_server.url, a, tmp / "operator.log",
                                       **endpoint.env, UNICORE_NAMESPACES=f"{a},{b}",
                                       POD_NAME=f"operator-{suffix}").start()
            try:
                env = Tenants(a, b, Path(control_plane.kubeconfig), endpoint, store, tmp)
                users_dir = tmp / "users"
                for user, namespace in (("alice", a), ("bob", b), ("carol", a)):
                    cert = env.certs[user] = pki.issue(ca_pair(control_plane), users_dir, user, user, client=True)
                    env.users[user] = user_kubeconfig(env.kubeconfig, users_dir, user, cert, namespace)
                bind(api, a, "unicore-agenttask-messenger", "alice")
                bind(api, b, "unicore-agenttask-messenger", "bob")
                bind(api, a, "unicore-agenttask-reader", "carol")
                env.pki = control_plane.control_plane.data_dir / "pki"
                for namespace in (a, b):
                    Tasks(api, namespace).create("chat", chat_spec("chat", namespace))
                for namespace in (a, b):  # one turn each, then suspended: later messages stay in the inbox
                    tasks = Tasks(api, namespace)
                    wait_for(lambda t=tasks: t.phase("chat") == "Idle", timeout=SETTLE, what=f"{namespace}/chat Idle")
                    tasks.patch("chat", {"suspend": True})
                    wait_for(lambda t=tasks: t.phase("chat") == "Suspended", timeout=60,
                             what=f"{namespace}/chat Suspended")
                endpoint.publish()
                yield env
            finally:
                operator.stop()
                print(f"--- operator log ({operator.log_path}):\n{operator.log(200)}")
    finally:
        for role in ROLES:
            rbac.delete_cluster_role(role)
        kubectl(control_plane.kubeconfig, "delete", "--ignore-not-found", "-f", "-",
                input_text=yaml.safe_dump_all(operator_objects), check=False)
        for namespace in (a, b, operator_ns):
            core.delete_namespace(namespace)
        api.close()


def forbidden(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    return result.stderr


def test_each_user_reads_and_posts_in_their_own_namespace_and_is_forbidden_in_the_other(tenants: Tenants) -> None:
    env = tenants
    for user, own, other in (("alice", env.a, env.b), ("bob", env.b, env.a)):
        before_other = env.untouched(other)
        # own namespace: the plugin's logs, tree and send
        logs = env.plugin(user, "logs", "chat", "-n", own)
        assert logs.returncode == 0 and f"Assistant: ready in {own}" in logs.stdout, logs.stderr
        tree = env.plugin(user, "tree", "-n", own)
        assert tree.returncode == 0 and "chat" in tree.stdout and "Suspended" in tree.stdout, tree.stderr
        sent = env.plugin(user, "send", "chat", "-n", own, "--id", f"{user}-1", f"hello from {user}")
        assert sent.returncode == 0 and "queued" in sent.stdout, sent.stderr
        # ... and plain kubectl: get --raw
        page = env.raw(user, "get", "--raw", task_path(own, "chat", "transcript") + "?since=0")
        assert page.returncode == 0 and json.loads(page.stdout)["task"] == f"{own}/chat", page.stderr
        assert json.loads(env.raw(user, "get", "--raw", task_path(own, "chat", "tree")).stdout)["root"] == (
            f"{own}/chat")
        # `kubectl create --raw` sends no Content-Type: 415, nothing queued (only application/json is read, so a web
        # page cannot post through a user's `kubectl proxy`; docs/kubectl.md)
        body = env.tmp / f"{user}-raw.json"
        body.write_text(json.dumps({"id": f"{user}-raw", "text": f"raw from {user}"}))
        raw_sent = env.raw(user, "create", "--raw", task_path(own, "chat", "messages"), "-f", str(body))
        assert raw_sent.returncode != 0 and "UnsupportedMediaType" in raw_sent.stderr, raw_sent.stderr
        # the stored sender is who the API server authenticated
        mine = {m.id: (m.content, m.sender) for m in env.inbox(own) if m.id.startswith(f"user:{user}")}
        assert mine == {f"user:{user}-1": (f"hello from {user}", f"user:{user}")}

        # the other namespace: 403 everywhere, nothing read or written
        assert forbidden(env.plugin(user, "logs", "chat", "-n", other)).startswith(
            f"error: forbidden: {user} cannot get agenttasks/transcript (tasks.unicore.dev) in namespace {other}")
        assert forbidden(env.plugin(user, "send", "chat", "-n", other, "let me in")).startswith(
            f"error: forbidden: {user} cannot create agenttasks/messages (tasks.unicore.dev) in namespace {other}")
        assert "forbidden" in forbidden(env.plugin(user, "tree", "-n", other))
        for sub in ("transcript", "tree", "summary"):
            denied = forbidden(env.raw(user, "get", "--raw", task_path(other, "chat", sub)))
            assert "Error from server (Forbidden)" in denied and f'User "{user}" cannot get resource ' \
                f'"agenttasks/{sub}" in API group "tasks.unicore.dev" in the namespace "{other}"' in denied, denied
        body.write_text(json.dumps({"id": f"{user}-raw-other", "text": "let me in"}))
        denied = forbidden(env.raw(user, "create", "--raw", task_path(other, "chat", "messages"), "-f", str(body)))
        assert "Error from server (Forbidden)" in denied
        assert env.untouched(other) == before_other
        # what docs/kubectl.md shows: `kubectl auth can-i --list` names the subresources where they are granted
        for namespace, granted in ((own, True), (other, False)):
            rules = kubectl(env.kubeconfig, "auth", "can-i", "--list", "-n", namespace, "--as", user).stdout
            lines = {line.split()[0]: line for line in rules.splitlines() if line.strip()}
            assert ("agenttasks.tasks.unicore.dev/messages" in lines) == granted, rules
            assert ("agenttasks.tasks.unicore.dev/transcript" in lines) == granted, rules
            if granted:
                assert "[create]" in lines["agenttasks.tasks.unicore.dev/messages"]


def test_a_reader_reads_but_cannot_send(tenants: Tenants) -> None:
    env = tenants
    before = env.untouched(env.a)
    logs = env.plugin("carol", "logs", "chat", "-n", env.a)
    assert logs.returncode == 0 and f"ready in {env.a}" in logs.stdout, logs.stderr
    assert forbidden(env.plugin("carol", "send", "chat", "-n", env.a, "hi")).startswith(
        f"error: forbidden: carol cannot create agenttasks/messages (tasks.unicore.dev) in namespace {env.a}, so "
        "cannot send messages to its agent tasks (ask for the unicore-agenttask-messenger role there)")
    assert "forbidden" in forbidden(env.plugin("carol", "logs", "chat", "-n", env.b))
    assert env.untouched(env.a) == before


def direct(env: Tenants, path: str, *, cert: Any = None, user: str | None = "alice",
           groups: tuple[str, ...] = ("system:authenticated",)) -> tuple[int, str]:
    """A request straight to the operator's task API port (not through the API server), claiming ``user``."""
    context = ssl.create_default_context(cafile=str(env.pki / "ca.crt"))
    context.check_hostname = False  # the serving certificate names the Service, not 127.0.0.1
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    headers = {"X-Remote-User": user} if user else {}
    request = urllib.request.Request(f"https://127.0.0.1:{env.endpoint.task_api_port}{path}", headers=headers)
    for group in groups:
        request.add_header("X-Remote-Group", group)  # (urllib keeps one value per header: the last)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError, ssl.SSLError) as exc:  # the handshake refused the certificate
        return 0, f"{type(exc).__name__}: {exc}"


def test_the_operators_port_gives_no_task_data_without_the_front_proxy_certificate(tenants: Tenants) -> None:
    from unicore_devcluster import pki
    from unicore_devcluster.pki import CertPair

    env = tenants
    path = task_path(env.a, "chat", "transcript")
    front_proxy_ca = CertPair(env.pki / "front-proxy-ca.crt", env.pki / "front-proxy-ca.key")
    attempts = {  # each claims to be the cluster's superuser group
        "no certificate": None,
        "alice's own client certificate": env.certs["alice"],
        "the cluster admin's certificate": CertPair(env.pki / "admin.crt", env.pki / "admin.key"),
        "the front-proxy CA, another name": pki.issue(front_proxy_ca, env.tmp / "mallory", "mallory", "mallory",
                                                      client=True),
    }
    for what, cert in attempts.items():
        status, text = direct(env, path, cert=cert, groups=("system:masters",))
        assert status in (0, 401), (what, status, text)
        assert f"ready in {env.a}" not in text and '"messages"' not in text, (what, text)
    assert direct(env, path, groups=("system:masters",))[1].count("no client certificate") == 1
    # the API server's own front-proxy certificate: the operator still authorizes the user itself (SAR)
    proxy = CertPair(env.pki / "front-proxy-client.crt", env.pki / "front-proxy-client.key")
    status, text = direct(env, path, cert=proxy, user="alice")
    assert status == 200 and f"ready in {env.a}" in text
    status, text = direct(env, task_path(env.b, "chat", "transcript"), cert=proxy, user="alice")
    assert status == 403 and 'User "alice" cannot get resource "agenttasks/transcript"' in json.loads(text)["message"]
    status, text = direct(env, path, cert=proxy, user=None)
    assert status == 401 and "names no user" in text


def as_user(env: Tenants, user: str, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """A request through the real API server (its RBAC, the aggregator, then the operator's own check) as ``user``,
    with their client certificate: JSON in, JSON out."""
    config = yaml.safe_load(env.users[user].read_text())
    server = config["clusters"][0]["cluster"]["server"]
    context = ssl.create_default_context(cafile=str(env.pki / "ca.crt"))
    context.check_hostname = False
    context.load_cert_chain(str(env.certs[user].cert), str(env.certs[user].key))
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{server}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:  # noqa: S310
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_a_conversation_is_read_and_posted_to_only_with_rights_in_its_namespace(tenants: Tenants) -> None:
    """Issue 33 on the cluster: alice (messenger) creates a conversation with a task of her namespace through the task
    API and posts to it as herself; the task gets the post, its answer is posted back by the operator (a turn pod may
    not write conversations), and nobody without rights on the namespace can read or post: bob (another namespace's
    messenger) and carol (a reader: she may read, not post) get 403, with nothing written."""
    env = tenants
    tasks = Tasks(kube_api(env), env.a)
    tasks.create("writer", {"prompt": "You write.", "model": "scripted", "gpus": 0, "script": {"tasks": {"writer": [
        {"text": "Writer, ready."}, {"text": "Tagline: agents as Jobs. @bob is not here."}]}}})
    wait_for(lambda: tasks.phase("writer") == "Idle", timeout=SETTLE, what="writer Idle")
    base = f"/apis/tasks.unicore.dev/v1alpha1/namespaces/{env.a}/conversations"
    status, made = as_user(env, "alice", "POST", base, {"name": "room", "title": "Room", "tasks": ["writer"]})
    assert status == 201, made
    assert {p["name"] for p in made["participants"]} == {"alice", "writer"}
    for user, code in (("bob", 403), ("carol", 403)):
        status, refused = as_user(env, user, "POST", f"{base}/room/posts", {"id": "x1", "text": "hijack"})
        assert status == code, refused
    status, _ = as_user(env, "bob", "GET", f"{base}/room")
    assert status == 403
    status, read = as_user(env, "carol", "GET", f"{base}/room")  # the reader may read
    assert status == 200 and read["title"] == "Room"
    status, receipt = as_user(env, "alice", "POST", f"{base}/room/posts",
                              {"id": "p1", "text": "@writer a tagline <b>please</b>"})
    assert status == 201 and receipt["seq"] > 0, receipt
    status, again = as_user(env, "alice", "POST", f"{base}/room/posts", {"id": "p1", "text": "@writer again?"})
    assert status == 200 and again["duplicate"] is True  # the same client id: taken once

    def answered() -> list[dict[str, Any]] | None:
        code, page = as_user(env, "alice", "GET", f"{base}/room/posts?after={receipt['seq']}")
        found = [p for p in page["posts"] if p["kind"] == "answer" and p["sender"] == f"{env.a}/writer"]
        return found if code == 200 and found else None

    [answer] = wait_for(answered, timeout=SETTLE, what="the writer's answer in the conversation")
    assert answer["text"] == "Tagline: agents as Jobs. @bob is not here."
    posts = as_user(env, "alice", "GET", f"{base}/room")[1]["posts"]
    people = [p for p in posts if p["kind"] == "post"]
    assert [(p["sender"], p["text"]) for p in people] == [("alice", "@writer a tagline <b>please</b>")]
    assert all("hijack" not in p["text"] for p in posts)


def kube_api(env: Tenants) -> Any:
    from kubernetes import config as kube_config

    return kube_config.new_client_from_config(str(env.kubeconfig))


def test_the_plugins_conv_commands_take_part_as_the_user_with_the_rights_of_the_namespace(tenants: Tenants) -> None:
    """`kubectl agenttask conv ...` (the real plugin on PATH, through the real API server): alice (messenger) creates a
    conversation with a task, posts once per id, reads the task's answer with `show`, follows it until she closes
    it; carol (reader) lists it but cannot post; bob (another namespace) cannot read it; nobody here may delete it
    (the editor's right), and each refusal is one line naming the right."""
    env = tenants
    tasks = Tasks(kube_api(env), env.a)
    tasks.create("poet", {"prompt": "You write poems.", "model": "scripted", "gpus": 0, "script": {"tasks": {
        "poet": [{"text": "Poet, ready."}, {"text": "Roses are pods."}]}}})
    wait_for(lambda: tasks.phase("poet") == "Idle", timeout=SETTLE, what="poet Idle")

    def conv(user: str, *args: str) -> subprocess.CompletedProcess[str]:
        return env.plugin(user, "conv", *args, "-n", env.a)

    made = conv("alice", "create", "lounge", "--title", "Lounge", "--task", "poet")
    assert made.returncode == 0 and made.stdout == "conversation lounge: alice, poet\n", made.stderr
    assert conv("alice", "post", "lounge", "   ").returncode == 2  # refused before anything is asked
    posted = conv("alice", "post", "lounge", "--id", "lounge-1", "@poet", "a poem, please")
    assert posted.returncode == 0 and posted.stdout.startswith("posted #"), posted.stderr
    again = conv("alice", "post", "lounge", "--id", "lounge-1", "@poet again?")
    assert again.stdout == "post lounge-1 was posted before: not again\n", again.stderr

    def answered() -> str:
        shown = conv("alice", "show", "lounge")
        return shown.stdout if "poet (agent) answered: Roses are pods." in shown.stdout else ""

    shown = wait_for(answered, timeout=SETTLE, what="the poet's answer in `conv show`")
    assert shown.startswith(f"conversation {env.a}/lounge: Lounge [open]\nparticipants: alice, poet (agent)\n")
    assert shown.count("alice posted: @poet a poem, please") == 1 and "again?" not in shown

    listed = conv("carol", "list")
    assert listed.returncode == 0 and "lounge  [open]  posts=" in listed.stdout, listed.stderr
    assert forbidden(conv("carol", "post", "lounge", "hi")) == (
        f"error: forbidden: carol cannot create conversations/posts (tasks.unicore.dev) in namespace {env.a}, so "
        "cannot post to its conversations (ask for the unicore-agenttask-messenger role there)\n")
    assert forbidden(conv("bob", "show", "lounge")).startswith(
        f"error: forbidden: bob cannot get conversations (tasks.unicore.dev) in namespace {env.a}")
    assert forbidden(conv("alice", "delete", "lounge")).startswith(
        f"error: forbidden: alice cannot delete conversations (tasks.unicore.dev) in namespace {env.a}")

    plugin_env = {**os.environ, "KUBECONFIG": str(env.users["alice"]),
                  "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    with subprocess.Popen(["kubectl", "agenttask", "conv", "show", "lounge", "-n", env.a, "--follow", "--timeout",
                           "100"], env=plugin_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as follow:
        assert conv("alice", "pause", "lounge").stdout == "conversation lounge is now paused\n"
        assert conv("alice", "resume", "lounge").stdout == "conversation lounge is now open\n"
        assert conv("alice", "close", "lounge").stdout == "conversation lounge is now closed\n"
        out, err = follow.communicate(timeout=60)  # ends at the close, long before its --timeout
    assert follow.returncode == 0 and out.rstrip().endswith("note: alice closed the conversation"), err
    assert err == ""  # the poet's live text was followed too: the messenger may read its stream
    assert "note: alice paused the conversation" in out
    assert forbidden(conv("alice", "resume", "lounge")) == f"error: conversation {env.a}/lounge is closed\n"


# Last in the module: it points the APIService at an operator of its own, which the tests above must not see.
def test_an_operator_that_may_not_read_the_request_header_ca_says_so_at_start_up(
        control_plane: Any, redis_server: Any, tmp_path: Path) -> None:
    """Without the chart's kube-system RoleBinding the task API cannot authenticate anyone: the operator stops at
    start-up with one line saying why (exit 2, no traceback) instead of serving it."""
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    namespace = f"norbac-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "bare"}})
        bare = token_kubeconfig(Path(control_plane.kubeconfig), tmp_path, namespace, "bare")
        with aggregated_task_api(control_plane, namespace, tmp_path) as endpoint:
            operator = OperatorProcess(bare, redis_server.url, namespace, tmp_path / "operator.log", **endpoint.env)
            operator.start()
            assert operator.proc is not None
            try:
                assert operator.proc.wait(60) == 2
            finally:
                operator.stop()
        assert operator.log().strip() == (
            f"unicore-operator: the task API (UNICORE_TASK_API_PORT={endpoint.task_api_port}) cannot authenticate the "
            "API server: the operator may not read the ConfigMap kube-system/extension-apiserver-authentication (bind "
            "it the Role extension-apiserver-authentication-reader in kube-system, as the chart does)")
    finally:
        core.delete_namespace(namespace)
        api.close()
