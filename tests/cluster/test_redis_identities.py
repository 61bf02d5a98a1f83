"""Per-namespace Redis identities on the real control plane (issue 13, item 2): the operator, run with
UNICORE_REDIS_IDENTITIES, writes a Secret into a fresh namespace on its first AgentTask; the turn pods of a scripted
tree (a root and a child whose report reaches it) run with that Secret's URL and nothing else; the URL's user works for
its namespace only; a deleted Secret comes back with a new password (rotation) and a user that Redis lost comes back
(a restart without an aclfile); an operator whose own Redis user may not manage ACL users stops with one line."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client
from redis.exceptions import AuthenticationError, NoPermissionError
from unicore.store import acl
from unicore.store.client import build_client
from unicore.store.keys import ACTIVATIONS_STREAM, TaskKeys

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

SECRET = "unicore-redis-agent"
TREE = {
    "default": "Done.",
    "tasks": {
        "tree": [{"tool_use": [{"name": "spawn_task", "input": {"name": "a", "prompt": "Report."}}]},
                 {"text": "Waiting for a."}, {"echo": True}],
        "tree-a": [{"text": "A reporting."}],
    },
}


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    env = {"UNICORE_REDIS_IDENTITIES": "true", "UNICORE_REDIS_IDENTITY_RESYNC_SECONDS": "1"}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start
    admin = redis.Redis.from_url(redis_url)
    try:
        acl.delete_namespace_user(admin, k8s_namespace)
    finally:
        admin.close()


def secret_url(core: client.CoreV1Api, namespace: str) -> str | None:
    try:
        secret = core.read_namespaced_secret(SECRET, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return base64.b64decode(secret.data["redis-url"]).decode()


def login(url: str) -> redis.Redis:
    return build_client(url, decode_responses=True, retry_for=0)


def test_a_fresh_namespace_gets_its_own_redis_user_that_its_turn_pods_use_and_that_works_there_only(
    start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    ns = k8s_namespace
    assert secret_url(tasks.core, ns) is None  # a fresh namespace: no Secret yet
    start_operator()
    tasks.create("tree", {"prompt": "Ask a, then report.", "gpus": 0, "script": TREE})
    url = wait_for(lambda: secret_url(tasks.core, ns), timeout=60, what=f"Secret {SECRET} in {ns}")
    user, password = acl.url_credentials(url)  # type: ignore[misc]
    assert user == f"unicore-ns-{ns}" and len(password) == 64
    secret = tasks.core.read_namespaced_secret(SECRET, ns)
    assert set(secret.data) == {"redis-url"}  # only that user's credentials
    assert secret.metadata.labels["app.kubernetes.io/managed-by"] == "unicore-operator"

    # the tree runs to the end on turn pods that got that URL (the pod runner resolves the secretKeyRef)
    def settled() -> dict[str, str | None] | None:
        phases = tasks.all_phases()
        root = tasks.get("tree") or {}
        done = set(phases) == {"tree", "tree-a"} and all(p == "Idle" for p in phases.values())
        return phases if done and (root.get("status") or {}).get("turns", 0) >= 2 else None

    wait_for(settled, timeout=240, interval=1, what="the tree tree, tree-a settled Idle")
    jobs = tasks.jobs()
    assert jobs
    for job in jobs:
        env = {e.name: e for e in job.spec.template.spec.containers[0].env}
        ref = env["REDIS_URL"].value_from.secret_key_ref
        assert env["REDIS_URL"].value is None and (ref.name, ref.key) == (SECRET, "redis-url")
    assert "A reporting." in redis_client.hget(TaskKeys(f"{ns}/tree").task, "last_response")

    # the user works for its own namespace, and answers NOPERM for any other (read and write) and shared reads
    tenant = login(url)
    try:
        assert tenant.hget(TaskKeys(f"{ns}/tree").task, "id") == f"{ns}/tree"
        with pytest.raises(NoPermissionError):
            tenant.hgetall(TaskKeys("default/other").task)
        with pytest.raises(NoPermissionError):
            tenant.rpush(TaskKeys("default/other").inbox, "{}")
        with pytest.raises(NoPermissionError):
            tenant.xrange(ACTIVATIONS_STREAM)
        with pytest.raises(NoPermissionError):
            tenant.hgetall(TaskKeys(f"{ns}/tree").operator)
    finally:
        tenant.close()


def test_a_deleted_secret_comes_back_with_a_new_password_and_a_lost_user_comes_back(
    start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    ns = k8s_namespace
    start_operator()
    tasks.create("one", {"prompt": "hi", "gpus": 0})
    first = wait_for(lambda: secret_url(tasks.core, ns), timeout=60, what=f"Secret {SECRET} in {ns}")
    wait_for(lambda: login(first).ping(), timeout=30, what="the first password to work")

    tasks.core.delete_namespaced_secret(SECRET, ns)  # rotation
    second = wait_for(lambda: (secret_url(tasks.core, ns) or first) != first and secret_url(tasks.core, ns),
                      timeout=60, what="a new Secret with a new password")
    assert acl.url_credentials(second)[0] == acl.url_credentials(first)[0]  # type: ignore[index]
    wait_for(lambda: login(second).ping(), timeout=30, what="the new password to work")
    with pytest.raises(AuthenticationError):
        login(first).ping()

    acl.delete_namespace_user(redis_client, ns)  # what a Redis restart without an aclfile does
    with pytest.raises(AuthenticationError):
        login(second).ping()
    wait_for(lambda: login(second).ping(), timeout=30, what="the user applied again from its Secret")
    assert secret_url(tasks.core, ns) == second


def test_an_operator_whose_redis_user_may_not_manage_acl_users_stops_with_one_line(
    start_operator: StartOperator, redis_client: redis.Redis, redis_url: str, k8s_namespace: str,
) -> None:
    redis_client.acl_setuser("operator-without-acl", enabled=True, passwords=["+pw"], commands=["+@all", "-@admin"],
                             keys=["*"], channels=["*"], reset=True)
    try:
        proc = start_operator(REDIS_URL=acl.identity_url(redis_url, "operator-without-acl", "pw"))
        assert proc.proc is not None
        wait_for(lambda: proc.proc.poll() is not None, timeout=90, what="the operator to exit")  # type: ignore[union-attr]
        assert proc.proc.returncode == 2
        log = proc.log(400)
        (line,) = [line for line in log.splitlines() if "may not manage ACL users" in line]
        assert line.startswith("unicore-operator: UNICORE_REDIS_IDENTITIES is on, but Redis user "
                               "'operator-without-acl' may not manage ACL users (NOPERM"), log
        assert "+acl|setuser" in line and "Traceback" not in log
    finally:
        redis_client.acl_deluser("operator-without-acl")


def test_the_charts_operator_with_the_charts_rbac_gives_its_namespace_a_redis_identity(
    control_plane: Any, redis_server: Any, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    """The chart with redis.identities on (an external Redis: the test's redis-server): the operator pod the pod runner
    starts from the chart's Deployment, with the chart's ServiceAccount and RBAC, writes the namespace's Secret, and a
    tree runs on it; the operator still cannot read the admin URL's Secret."""
    from tests.cluster.test_chart_install import (
        CHART,
        RESTRICTED,
        _free_port,
        helm,
        helm_env,
        make_namespace,
        status_of,
        token_client,
        uninstall,
    )

    api = control_plane.api_client()
    namespace = make_namespace(api, RESTRICTED)
    env = helm_env(control_plane, tmp_path)
    try:
        helm("install", "unicore", str(CHART), "--namespace", namespace,
             "--set", "redis.enabled=false", "--set", f"redis.external.url={redis_server.url}",
             "--set", "redis.identities.enabled=true", "--set", "redis.identities.resyncSeconds=2",
             "--set", "rbac.userRoles=false",  # cluster-scoped; another release may hold them
             "--set", "admission.webhook.enabled=false",  # a host-process operator pod: the API server cannot call it
             "--set", "taskApi.enabled=false",  # (nor its aggregated task API)
             "--set", "operator.resyncSeconds=2", "--set", "agent.turnRetryBackoffSeconds=1",
             "--set-json", f'operator.extraEnv=[{{"name":"UNICORE_HTTP_PORT","value":"{_free_port()}"}}]', env=env)
        tasks = Tasks(api, namespace)
        tasks.create("tree", {"prompt": "Ask a, then report.", "script": TREE})
        url = wait_for(lambda: secret_url(tasks.core, namespace), timeout=120, what=f"Secret {SECRET}")
        assert acl.url_credentials(url)[0] == f"unicore-ns-{namespace}"  # type: ignore[index]

        def settled() -> bool:
            phases = tasks.all_phases()
            root = tasks.get("tree") or {}
            return (set(phases) == {"tree", "tree-a"} and all(p == "Idle" for p in phases.values())
                    and (root.get("status") or {}).get("turns", 0) >= 2)

        try:
            wait_for(settled, timeout=240, interval=1, what="the tree tree, tree-a settled Idle")
        except AssertionError:
            for pod in tasks.core.list_namespaced_pod(namespace).items:
                print(f"--- pod {pod.metadata.name} log:\n{control_plane.read_log(namespace, pod.metadata.name)}")
            raise
        for job in tasks.jobs():
            ref = {e.name: e for e in job.spec.template.spec.containers[0].env}["REDIS_URL"].value_from
            assert ref.secret_key_ref.name == SECRET
        operator = token_client(control_plane, namespace, "unicore-operator")
        try:
            core = client.CoreV1Api(operator)
            assert status_of(lambda: core.read_namespaced_secret(SECRET, namespace)) == 200
            assert status_of(lambda: core.read_namespaced_secret("unicore-redis", namespace)) == 403
            assert status_of(lambda: core.list_namespaced_secret(namespace)) == 403
        finally:
            operator.close()
    finally:
        uninstall(namespace, api, env)
        acl.delete_namespace_user(redis_client, namespace)
