"""The kubectl experience on the real local control plane: `kubectl agenttask` (as a real kubectl plugin on
PATH) talking to a real operator's task API, an aggregated API behind the API server (APIService
v1alpha1.tasks.unicore.dev), scripted model, real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from kubernetes import client
from unicore.store.gates import open_gate
from unicore.store.keys import namespace_activations_stream
from unicore.store.tasks import TaskStore

from tests.cluster.operator_harness import (
    REPO,
    VENV_BIN,
    OperatorProcess,
    Tasks,
    install_agent_rbac,
    install_crd,
    kubectl,
)
from tests.cluster.task_api_harness import TaskApiEndpoint, aggregated_task_api, task_path
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

SETTLE = 180.0
PROXY = "/api/v1/namespaces/{ns}/services/unicore-operator:http/proxy"


@dataclass
class Env:
    """One namespace with its own operator (task API on a host port, behind the APIService)."""

    namespace: str
    kubeconfig: Path
    operator: OperatorProcess
    tasks: Tasks
    store: TaskStore
    tmp: Path
    endpoint: TaskApiEndpoint

    def plugin(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl agenttask ...` through kubectl's plugin mechanism (kubectl-agenttask on PATH)."""
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig or self.kubeconfig),
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        return subprocess.run(
            ["kubectl", "agenttask", "-n", self.namespace, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        return subprocess.Popen(
            ["kubectl", "agenttask", "-n", self.namespace, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def task_id(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def user_texts(self, name: str) -> list[tuple[int, str]]:
        """(turn number, text) of every user text block of the task's history."""
        return [
            (turn.turn_number, block["text"])
            for turn in self.store.load_history(self.task_id(name))
            for message in turn.messages
            if message.role == "user"
            for block in message.content
            if "text" in block
        ]

    def idle(self, name: str, turns: int) -> bool:
        obj = self.tasks.get(name) or {}
        status = obj.get("status") or {}
        record = self.store.get_task(self.task_id(name))
        return (
            status.get("phase") == "Idle"
            and record.turns >= turns
            and record.status == "idle"
            and self.store.pending_count(self.task_id(name)) == 0
        )


@pytest.fixture(scope="module")
def env(control_plane: Any, redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    install_crd(control_plane.kubeconfig)
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    namespace = f"kc-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait_for(
        lambda: core.read_namespaced_service_account("default", namespace), timeout=30, what="default SA"
    )
    install_agent_rbac(control_plane.kubeconfig, namespace)
    tmp = tmp_path_factory.mktemp("kubectl")
    with aggregated_task_api(control_plane, namespace, tmp) as endpoint:
        operator = OperatorProcess(
            control_plane.kubeconfig, redis_server.url, namespace, tmp / "operator.log", **endpoint.env
        ).start()
        store = TaskStore(redis.Redis.from_url(redis_server.url, decode_responses=True))
        environment = Env(
            namespace, Path(control_plane.kubeconfig), operator, Tasks(api, namespace), store, tmp, endpoint
        )
        try:
            endpoint.publish()
            yield environment
        finally:
            operator.stop()
            print(f"--- operator log ({operator.log_path}):\n{operator.log()}")
            core.delete_namespace(namespace)
            api.close()


def _demo_spec() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "examples" / "demo.yaml").read_text())["spec"])


def _chat_spec(name: str, gate: str | None = None) -> dict[str, Any]:
    """A root that answers, then echoes each later turn's messages; with ``gate``, the echo of its second turn waits
    until the test opens that gate."""
    second: dict[str, Any] = {"echo": True, **({"gate": gate} if gate else {})}
    return {
        "prompt": "Say you are ready.",
        "model": "scripted",
        "gpus": 0,
        "script": {
            "default": "Done.",
            "tasks": {name: [{"text": "ready"}, second] + [{"echo": True}] * 7},
        },
    }


class Output:
    """A process's stdout as it is written (read by a thread), so a test can wait on what it printed so far."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)


def test_wait_tree_and_logs_of_a_finished_tree(env: Env) -> None:
    env.tasks.create("demo", _demo_spec())
    waited = kubectl(
        env.kubeconfig,
        "wait",
        "--for=condition=Ready",
        "agenttask/demo",
        "-n",
        env.namespace,
        f"--timeout={int(SETTLE)}s",
        check=False,
    )
    assert waited.returncode == 0, waited.stderr
    phases = env.tasks.all_phases()  # Ready on the root means the whole tree has settled
    assert phases == {"demo": "Idle", "demo-a": "Idle", "demo-b": "Idle", "demo-c": "Idle"}

    tree = env.plugin("tree", "demo")
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "PHASE", "TURNS"]
    assert [line.split("  ")[0].strip() for line in lines[1:]] == [
        "✔ demo",
        "├─✔ demo-a",
        "├─✔ demo-b",
        "└─✔ demo-c",
    ]
    assert "water boils at 100 C" in tree.stdout  # demo-a's last response
    ascii_tree = env.plugin("tree", "--no-utf8")
    assert [line.split("  ")[0].strip() for line in ascii_tree.stdout.splitlines()[1:]] == [
        "+ demo",
        "|-+ demo-a",
        "|-+ demo-b",
        "`-+ demo-c",
    ]

    root_turns = int(env.tasks.get("demo")["status"]["turns"])  # type: ignore[index]
    logs = env.plugin("logs", "demo")
    assert logs.returncode == 0, logs.stderr
    banners = [line for line in logs.stdout.splitlines() if line.startswith("=== turn ")]
    assert [banner.split()[2] for banner in banners] == [str(n) for n in range(1, root_turns + 1)]  # from 1
    for fact in ("water boils at 100 C", "water freezes at 0 C", "densest at 4 C"):
        assert fact in logs.stdout
    assert "[Used spawn_task tool]" in logs.stdout and '"prompt"' not in logs.stdout
    with_tools = env.plugin("logs", "demo", "--tools", "--turn", "1")  # the turn of Job demo-t1
    assert "Assistant used tool spawn_task" in with_tools.stdout and "=== turn 2" not in with_tools.stdout
    for child, fact in (("demo-a", "boils"), ("demo-b", "freezes"), ("demo-c", "densest")):
        child_logs = env.plugin("logs", child)
        assert fact in child_logs.stdout and "=== turn 1 " in child_logs.stdout

    # the APIService leaves `agenttasks` to the CRD: kubectl still resolves it to unicore.dev
    names = kubectl(env.kubeconfig, "get", "agenttasks", "-n", env.namespace, "-o", "name")
    assert sorted(names.stdout.split()) == [f"agenttask.unicore.dev/{n}" for n in sorted(phases)]
    summary = json.loads(env.endpoint.raw(task_path(env.namespace, "demo", "summary")).stdout)
    assert summary["kind"] == "TaskSummary" and summary["status"] == "idle" and summary["turns"] == root_turns
    tree_nodes = json.loads(env.endpoint.raw(task_path(env.namespace, "demo", "tree")).stdout)["nodes"]
    ids = [node["id"].split("/")[1] for node in tree_nodes]  # the root first; siblings in no promised order
    assert ids[0] == "demo" and sorted(ids[1:]) == ["demo-a", "demo-b", "demo-c"]

    described = env.plugin("describe", "demo")
    assert described.returncode == 0, described.stderr
    assert "Phase:              Idle" in described.stdout
    assert all(name in described.stdout for name in ("demo-a", "demo-b", "demo-c"))
    assert "TurnStarted" in described.stdout or "ChildSpawned" in described.stdout, described.stdout


def test_send_reaches_the_next_turn_exactly_once_and_follow_ends_when_idle(env: Env) -> None:
    env.tasks.create("chat", _chat_spec("chat", gate="echo"))
    wait_for(lambda: env.idle("chat", 1), timeout=SETTLE, what="chat Idle after its first turn")

    sent = env.plugin("send", "chat", "--id", "fixed-1", "first", "follow-up")
    assert sent.returncode == 0, sent.stderr
    again = env.plugin("send", "chat", "--id", "fixed-1", "first follow-up")  # a retry of the same message
    assert again.returncode == 0 and "already queued" in again.stdout
    wait_for(lambda: (1, "first follow-up") in env.user_texts("chat"), timeout=SETTLE,
             what="chat's second turn to take the follow-up (its echo waits at the gate)")
    follow = env.popen("logs", "chat", "--follow")
    try:
        printed = Output(follow)
        wait_for(lambda: "first follow-up" in printed.text(), timeout=60,
                 what="logs --follow to print the follow-up while the turn still runs")
        assert follow.poll() is None, "logs --follow returned while the turn ran"
        open_gate(env.store.redis, env.task_id("chat"), "echo")
        follow.wait(timeout=SETTLE)
        printed.thread.join(timeout=30)
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 0, follow.stderr.read() if follow.stderr else ""
    assert env.tasks.phase("chat") == "Idle"  # --follow returned once the task went Idle ...
    assert "Assistant: first follow-up" in printed.text()  # ... after the echo, which came once it followed
    assert [t for t in env.user_texts("chat") if t[1] == "first follow-up"] == [(1, "first follow-up")]

    first, second = env.popen("send", "chat", "concurrent one"), env.popen("send", "chat", "concurrent two")
    for proc in (first, second):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    wait_for(
        lambda: env.idle("chat", 3) and len(env.user_texts("chat")) == 4,
        timeout=SETTLE,
        what=f"both concurrent messages in chat's history (have {env.user_texts('chat')})",
    )
    texts = [text for _, text in env.user_texts("chat")]
    assert texts.count("concurrent one") == 1 and texts.count("concurrent two") == 1

    # without the plugin (docs/kubectl.md): `kubectl create --raw` sends no Content-Type, so it is refused (415);
    # through `kubectl proxy`, a web page's text/plain POST is refused too, and curl's application/json is read
    message = env.tmp / "msg.json"
    body = json.dumps({"id": str(uuid.uuid4()), "text": "plain kubectl"}).encode()
    message.write_bytes(body)
    path = task_path(env.namespace, "chat", "messages")
    raw = kubectl(env.kubeconfig, "create", "--raw", path, "-f", str(message), check=False)
    assert raw.returncode != 0 and "UnsupportedMediaType" in raw.stderr, raw.stderr
    with kubectl_proxy(env.kubeconfig) as base:
        cross_site = {"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example"}
        assert post_through_proxy(base + path, body, cross_site)[0] == 415
        assert env.store.pending_count(env.task_id("chat")) == 0
        for _ in range(2):
            status, receipt = post_through_proxy(base + path, body, {"Content-Type": "application/json"})
            assert (status, receipt["kind"]) == (202, "MessageReceipt"), receipt
    wait_for(
        lambda: env.idle("chat", 4) and "plain kubectl" in [t for _, t in env.user_texts("chat")],
        timeout=SETTLE,
        what="the plain kubectl message in chat's history",
    )
    assert [t for _, t in env.user_texts("chat")].count("plain kubectl") == 1

    missing = env.plugin("send", "no-such-task", "hello")
    assert missing.returncode != 0 and f'agenttask "{env.namespace}/no-such-task" not found' in missing.stderr


@contextmanager
def kubectl_proxy(kubeconfig: Path) -> Iterator[str]:
    """`kubectl proxy` on a free local port (what a user runs, and what a web page can post to); yields its URL."""
    proc = subprocess.Popen(["kubectl", "proxy", "--port=0"], env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # "Starting to serve on 127.0.0.1:<port>"; "" when it exits
        if "Starting to serve on" not in line:
            proc.wait(timeout=10)
            raise AssertionError(f"kubectl proxy did not start: {line}{proc.stderr.read()}")
        yield "http://" + line.rsplit(" ", 1)[-1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def post_through_proxy(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (a local kubectl proxy)
            return answer.status, dict(json.load(answer))
    except urllib.error.HTTPError as exc:
        return exc.code, dict(json.loads(exc.read() or b"{}"))


def _token_kubeconfig(env: Env, service_account: str) -> Path:
    token = kubectl(env.kubeconfig, "create", "token", service_account, "-n", env.namespace).stdout.strip()
    admin = yaml.safe_load(env.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    path = env.tmp / f"{service_account}.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "sa",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": service_account, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": "sa",
                        "context": {"cluster": "c", "user": service_account, "namespace": env.namespace},
                    }
                ],
            }
        )
    )
    return path


def _snapshot(env: Env, name: str) -> tuple[Any, ...]:
    keys = env.store.keys(env.task_id(name))
    r = env.store.redis
    return (
        r.lrange(keys.inbox, 0, -1),
        r.lrange(keys.messages, 0, -1),
        r.smembers(keys.seen) if r.type(keys.seen) == "set" else r.zrange(keys.seen, 0, -1),
        r.hget(keys.task, "turns"),
    )


def test_a_user_without_the_task_api_rights_is_forbidden_and_the_task_is_untouched(env: Env) -> None:
    env.tasks.create("guarded", _chat_spec("guarded"))
    wait_for(lambda: env.idle("guarded", 1), timeout=SETTLE, what="guarded Idle")
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "viewer", "namespace": env.namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "viewer", "namespace": env.namespace},
            "rules": [
                {"apiGroups": ["unicore.dev"], "resources": ["agenttasks"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "viewer", "namespace": env.namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": env.namespace}],
        },
    ]
    kubectl(env.kubeconfig, "apply", "-f", "-", input_text=yaml.safe_dump_all(objects))
    viewer = _token_kubeconfig(env, "viewer")
    before = _snapshot(env, "guarded")
    stream_before = env.store.redis.xlen(namespace_activations_stream(env.namespace))

    tree = env.plugin("tree", kubeconfig=viewer)  # reading AgentTasks is allowed
    assert tree.returncode == 0 and "guarded" in tree.stdout, tree.stderr
    user = f"system:serviceaccount:{env.namespace}:viewer"
    sent = env.plugin("send", "guarded", "let me in", kubeconfig=viewer)
    assert sent.returncode != 0
    assert sent.stderr.startswith(
        f"error: forbidden: {user} cannot create agenttasks/messages (tasks.unicore.dev) in namespace {env.namespace}"
    ), sent.stderr
    assert "unicore-agenttask-messenger" in sent.stderr
    logs = env.plugin("logs", "guarded", kubeconfig=viewer)
    assert logs.returncode != 0
    assert logs.stderr.startswith(
        f"error: forbidden: {user} cannot get agenttasks/transcript (tasks.unicore.dev) in namespace {env.namespace}"
    ), logs.stderr
    assert "unicore-agenttask-reader" in logs.stderr
    suspended = env.plugin("suspend", "guarded", kubeconfig=viewer)
    assert suspended.returncode != 0 and "forbidden" in suspended.stderr

    assert _snapshot(env, "guarded") == before  # inbox, history, accepted ids and turns unchanged
    assert env.store.redis.xlen(namespace_activations_stream(env.namespace)) == stream_before
    assert not (env.tasks.get("guarded") or {}).get("spec", {}).get("suspend")

    # what the chart's messenger ClusterRole adds in the namespace: the task API's subresources
    grant = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "unicore-agenttask-messenger", "namespace": env.namespace},
            "rules": [
                {
                    "apiGroups": ["tasks.unicore.dev"],
                    "resources": ["agenttasks/messages"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["tasks.unicore.dev"],
                    "resources": ["agenttasks/transcript", "agenttasks/tree", "agenttasks/summary"],
                    "verbs": ["get"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "viewer-messenger", "namespace": env.namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "unicore-agenttask-messenger",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": env.namespace}],
        },
    ]
    kubectl(env.kubeconfig, "apply", "-f", "-", input_text=yaml.safe_dump_all(grant))
    allowed = wait_for(
        lambda: (
            (
                r := env.plugin("send", "guarded", "--id", "granted-1", "now allowed", kubeconfig=viewer)
            ).returncode
            == 0
            and r
        ),
        timeout=30,
        what="send allowed once the messenger Role is bound",
    )
    assert "queued" in allowed.stdout


def test_send_during_an_operator_restart_arrives_exactly_once(env: Env) -> None:
    env.tasks.create("restart", _chat_spec("restart"))
    wait_for(lambda: env.idle("restart", 1), timeout=SETTLE, what="restart Idle")
    probe = task_path(env.namespace, "restart", "summary")
    env.operator.kill()  # SIGKILL: no goodbye
    down = env.endpoint.raw(probe)
    assert down.returncode != 0 and "ServiceUnavailable" in down.stderr, down.stderr

    stderr_path = env.tmp / "send-restart.err"
    with open(stderr_path, "w") as stderr:
        sender = subprocess.Popen(
            [
                "kubectl",
                "agenttask",
                "-v",
                "-n",
                env.namespace,
                "send",
                "restart",
                "--timeout",
                "150",
                "survived",
            ],
            env={
                **os.environ,
                "KUBECONFIG": str(env.kubeconfig),
                "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            },
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        wait_for(
            lambda: "retrying POST" in stderr_path.read_text(),
            timeout=60,
            what="the plugin retrying while the operator is down",
        )
        env.operator.start()
        out, _ = sender.communicate(timeout=SETTLE)
    finally:
        if sender.poll() is None:
            sender.kill()
    assert sender.returncode == 0, stderr_path.read_text()
    assert "queued" in out
    wait_for(
        lambda: env.idle("restart", 2) and "survived" in [t for _, t in env.user_texts("restart")],
        timeout=SETTLE,
        what="the message sent during the restart in the next turn",
    )
    assert [t for t in env.user_texts("restart") if t[1] == "survived"] == [(1, "survived")]


def test_the_plain_port_serves_only_health_and_metrics(env: Env) -> None:
    """The service-proxy route to the operator's HTTP port reaches no task data any more (it did: /v1/...)."""
    env.tasks.create("plain", _chat_spec("plain"))
    wait_for(lambda: env.idle("plain", 1), timeout=SETTLE, what="plain Idle")
    proxy = PROXY.format(ns=env.namespace)
    assert env.endpoint.raw(f"{proxy}/healthz").returncode == 0
    assert "unicore_" in env.endpoint.raw(f"{proxy}/metrics").stdout
    for path in ("/v1", f"/v1/namespaces/{env.namespace}/agenttasks/plain/transcript",
                 task_path(env.namespace, "plain", "transcript")):
        answer = env.endpoint.raw(proxy + path)
        assert answer.returncode != 0 and "NotFound" in answer.stderr and "ready" not in answer.stdout, answer
    posted = env.tmp / "plain-msg.json"
    posted.write_text(json.dumps({"id": "plain-1", "text": "through the proxy"}))
    old_route = f"{proxy}/v1/namespaces/{env.namespace}/agenttasks/plain/messages"
    sent = kubectl(env.kubeconfig, "create", "--raw", old_route, "-f", str(posted), check=False)
    assert sent.returncode != 0 and env.store.pending_count(env.task_id("plain")) == 0
