"""Approvals and questions on the real local control plane (issue 15): examples/approval.yaml waits as
WaitingForApproval with no Job running, survives the operator being killed and restarted while it waits, and
finishes once approved with ``kubectl agenttask approve`` (the real plugin through the aggregated task API); the tool
runs once however often it is approved (409 AlreadyDecided); a denial gives the model the error with its reason; a
user whose role does not grant ``create agenttasks/approvals`` gets 403 and decides nothing; an approval nobody
decides is denied after the task's timeout; an ``ask_user`` question waits as WaitingForInput until a message
answers it.

One host-process operator watches one namespace and serves the task API behind the real API server (as in
test_task_api_tenancy.py: the chart's operator RBAC and user ClusterRoles, rendered and applied as they are; users
with client certificates): alice holds the messenger role, carol the reader role."""

from __future__ import annotations

import json
import os
import subprocess
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
from unicore.store import approvals

from tests.cluster.operator_harness import (
    REPO,
    VENV_BIN,
    OperatorProcess,
    Tasks,
    install_agent_rbac,
    install_crd,
    kubectl,
    stored_messages,
    task_events,
)
from tests.cluster.task_api_harness import TaskApiEndpoint, aggregated_task_api, ca_pair, task_path
from tests.cluster.test_chart_render import one, render
from tests.cluster.test_task_api_tenancy import ROLES, bind, operator_rbac, token_kubeconfig, user_kubeconfig
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

SETTLE = 180.0


@dataclass
class Env:
    namespace: str
    kubeconfig: Path  # the admin's
    endpoint: TaskApiEndpoint
    redis: redis.Redis
    tasks: Tasks
    operator_kubeconfig: Path
    redis_url: str
    tmp: Path
    users: dict[str, Path] = field(default_factory=dict)
    operator: OperatorProcess | None = None

    def start_operator(self) -> None:
        self.operator = OperatorProcess(self.operator_kubeconfig, self.redis_url, self.namespace,
                                        self.tmp / "operator.log", **self.endpoint.env,
                                        POD_NAME=f"operator-{self.namespace}").start()

    def plugin(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.users[user]),
               "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        return subprocess.run(["kubectl", "agenttask", *args], env=env, capture_output=True, text=True, timeout=120)

    def task_id(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def status(self, name: str) -> dict[str, Any]:
        return dict((self.tasks.get(name) or {}).get("status") or {})

    def wait_phase(self, name: str, phase: str, timeout: float = SETTLE) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status = self.status(name)
            return status if status.get("phase") == phase else None

        found: dict[str, Any] = wait_for(reached, timeout=timeout, interval=0.3, what=f"{name} {phase}")
        return found

    def jobs_of(self, name: str) -> list[Any]:
        return [job for job in self.tasks.jobs() if job.metadata.name.startswith(f"{name}-t")]

    def tool_results(self, name: str, call_id: str) -> list[dict[str, Any]]:
        """The stored toolResult blocks answering ``call_id``."""
        return [block["toolResult"] for message in stored_messages(self.redis, self.task_id(name))
                for block in message.get("content") or [] if isinstance(block, dict)
                and (block.get("toolResult") or {}).get("toolUseId") == call_id]

    def metric(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.endpoint.http_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.split()[-1])
        raise AssertionError(f"{wanted} not exported")


def example(name: str, **approval: Any) -> dict[str, Any]:
    """examples/approval.yaml's spec, for task ``name`` (its script keyed by the new name)."""
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / "approval.yaml").read_text())["spec"]
    spec["script"]["tasks"] = {name: spec["script"]["tasks"]["approval"]}
    spec["approval"] = {**spec["approval"], **approval}
    return spec


@pytest.fixture(scope="module")
def env(control_plane: Any, redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    from unicore_devcluster import pki

    install_crd(control_plane.kubeconfig)
    tmp = tmp_path_factory.mktemp("approvals")
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    namespace, operator_ns = f"approvals-{suffix}", f"unicore-{suffix}"
    for ns in (namespace, operator_ns):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), timeout=30, what="default SA")
    install_agent_rbac(control_plane.kubeconfig, namespace)
    chart = render("--set", "rbac.clusterWide=true", namespace=operator_ns)
    for role in ROLES:
        rbac.create_cluster_role(one(chart, "ClusterRole", role))
    operator_objects = operator_rbac(chart, operator_ns)
    applied = kubectl(control_plane.kubeconfig, "apply", "-f", "-", input_text=yaml.safe_dump_all(operator_objects),
                      check=False)
    assert applied.returncode == 0, applied.stderr
    store = redis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        with aggregated_task_api(control_plane, operator_ns, tmp) as endpoint:
            found = Env(namespace, Path(control_plane.kubeconfig), endpoint, store, Tasks(api, namespace),
                        token_kubeconfig(Path(control_plane.kubeconfig), tmp, operator_ns, "unicore-operator"),
                        redis_server.url, tmp)
            found.start_operator()
            try:
                for user in ("alice", "carol"):
                    cert = pki.issue(ca_pair(control_plane), tmp / "users", user, user, client=True)
                    found.users[user] = user_kubeconfig(found.kubeconfig, tmp / "users", user, cert, namespace)
                bind(api, namespace, "unicore-agenttask-messenger", "alice")
                bind(api, namespace, "unicore-agenttask-reader", "carol")
                endpoint.publish()
                yield found
            finally:
                if found.operator is not None:
                    found.operator.stop()
                    print(f"--- operator log ({found.operator.log_path}):\n{found.operator.log(300)}")
    finally:
        for role in ROLES:
            rbac.delete_cluster_role(role)
        kubectl(control_plane.kubeconfig, "delete", "--ignore-not-found", "-f", "-",
                input_text=yaml.safe_dump_all(operator_objects), check=False)
        for ns in (namespace, operator_ns):
            core.delete_namespace(ns)
        api.close()


def test_the_example_waits_without_a_pod_survives_an_operator_restart_and_finishes_once_approved(env: Env) -> None:
    env.tasks.create("approval", example("approval"))
    status = env.wait_phase("approval", "WaitingForApproval")
    waiting = status["waitingFor"]
    assert (waiting["kind"], waiting["tool"], waiting["calls"]) == ("approval", "write_file", 1)
    call_id = waiting["callId"]
    (ready,) = status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForApproval") and call_id in ready["message"]
    assert status["activeJob"] == "" and len(env.jobs_of("approval")) == 1  # the first turn's, ended; none since
    assert all(job.status.active in (None, 0) for job in env.jobs_of("approval"))
    assert env.tool_results("approval", call_id) == []  # the tool has not run
    wait_for(lambda: task_events(env.tasks, "approval", "WaitingForApproval"), timeout=30, what="the Event")
    listed = kubectl(env.kubeconfig, "get", "agenttasks", "-n", env.namespace).stdout
    assert "WaitingForApproval" in listed.splitlines()[1], listed  # the printer column
    tree = env.plugin("carol", "tree", "-n", env.namespace)
    assert tree.returncode == 0 and "WaitingForApproval" in tree.stdout and "write_file" in tree.stdout, tree.stderr
    described = env.plugin("carol", "describe", "approval", "-n", env.namespace)
    assert described.returncode == 0 and f"WAITING   {call_id}  write_file" in described.stdout, described.stdout

    # the operator dies while the task waits; its successor finds it waiting and starts nothing
    assert env.operator is not None
    env.operator.kill()
    assert approvals.waiting_for(env.redis, env.task_id("approval")) == "approval"
    env.start_operator()
    wait_for(env.endpoint.available, timeout=60, interval=0.5, what="the restarted operator's task API")
    assert env.status("approval")["phase"] == "WaitingForApproval" and len(env.jobs_of("approval")) == 1

    approved = env.plugin("alice", "approve", "approval", "-n", env.namespace, "--reason", "fine")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == f"agenttask.unicore.dev/approval: call {call_id} (write_file) approved\n"
    done = env.wait_phase("approval", "Idle")
    assert "appended 20 bytes to notes/release.txt" in done["lastResponse"] and "waitingFor" not in done
    (result,) = env.tool_results("approval", call_id)
    assert result.get("status") != "error"

    # approving again changes nothing: 409, and the tool ran once
    again = env.plugin("alice", "approve", "approval", "-n", env.namespace, "--call", call_id)
    assert again.returncode == 1 and again.stderr.startswith("error: ") and "already approved" in again.stderr
    assert again.stderr.count("\n") == 1
    body = env.tmp / "again.json"
    body.write_text(json.dumps({"callId": call_id, "decision": "approve"}))
    raw = kubectl(env.users["alice"], "create", "--raw", task_path(env.namespace, "approval", "approvals"), "-f",
                  str(body), check=False)  # sends no Content-Type: 415, before the body is read
    assert raw.returncode != 0 and "UnsupportedMediaType" in raw.stderr, raw.stderr
    assert len(env.tool_results("approval", call_id)) == 1 and env.status("approval")["phase"] == "Idle"
    decided = task_events(env.tasks, "approval", "ApprovalDecided")
    assert len(decided) == 1 and f"call {call_id} (write_file) approved by alice: fine" in decided[0].message
    assert env.metric("unicore_approvals_total", decision="approved") == 1  # counted since the restart
    assert env.metric("unicore_approvals_pending") == 0


def test_a_denial_reaches_the_model_and_a_reader_cannot_decide(env: Env) -> None:
    env.tasks.create("deny-me", example("deny-me"))
    call_id = env.wait_phase("deny-me", "WaitingForApproval")["waitingFor"]["callId"]
    wait_for(lambda: env.metric("unicore_approvals_pending") >= 1, timeout=30, what="the pending gauge")

    refused = env.plugin("carol", "approve", "deny-me", "-n", env.namespace)
    assert refused.returncode != 0 and refused.stderr.startswith(
        f"error: forbidden: carol cannot create agenttasks/approvals (tasks.unicore.dev) in namespace {env.namespace}, "
        "so cannot approve or deny tool calls of its agent tasks"), refused.stderr
    assert approvals.waiting_for(env.redis, env.task_id("deny-me")) == "approval"
    listed = kubectl(env.users["carol"], "get", "--raw", task_path(env.namespace, "deny-me", "approvals"))
    assert [c["callId"] for c in json.loads(listed.stdout)["pending"]] == [call_id]  # she may read them

    denied = env.plugin("alice", "deny", "deny-me", "-n", env.namespace, "--call", call_id, "--reason", "not today")
    assert denied.returncode == 0 and "(write_file) denied" in denied.stdout, denied.stderr
    done = env.wait_phase("deny-me", "Idle")
    assert "denied by alice: not today" in done["lastResponse"]
    (result,) = env.tool_results("deny-me", call_id)
    assert result.get("status") == "error"


def test_an_approval_nobody_decides_is_denied_after_the_timeout(env: Env) -> None:
    expired_before = env.metric("unicore_approvals_total", decision="expired")
    env.tasks.create("too-late", example("too-late", timeoutSeconds=15))
    call_id = env.wait_phase("too-late", "WaitingForApproval")["waitingFor"]["callId"]
    done = env.wait_phase("too-late", "Idle", timeout=60)
    assert "denied by timeout: no decision within 15s" in done["lastResponse"]
    assert len(env.tool_results("too-late", call_id)) == 1
    (event,) = task_events(env.tasks, "too-late", "ApprovalExpired")
    assert call_id in event.message and event.type == "Warning"
    assert env.metric("unicore_approvals_total", decision="expired") == expired_before + 1


def test_a_question_waits_for_input_until_a_message_answers_it(env: Env) -> None:
    env.tasks.create("asks", {"prompt": "Ask me.", "model": "scripted", "gpus": 0, "tools": ["ask_user"],
                              "script": {"tasks": {"asks": [
                                  {"tool_use": [{"name": "ask_user", "input": {"question": "Which \x1b[31mfile?"}}]},
                                  {"echo_results": True}]}}})
    status = env.wait_phase("asks", "WaitingForInput")
    assert status["waitingFor"]["question"] == "Which \x1b[31mfile?"
    assert status["conditions"][0]["reason"] == "WaitingForInput" and len(env.jobs_of("asks")) == 1
    described = env.plugin("alice", "describe", "asks", "-n", env.namespace)
    assert "Which \\x1b[31mfile?" in described.stdout and "\x1b" not in described.stdout
    sent = env.plugin("alice", "send", "asks", "-n", env.namespace, "notes/release.txt")
    assert sent.returncode == 0, sent.stderr
    done = env.wait_phase("asks", "Idle")
    assert "notes/release.txt" in done["lastResponse"]
