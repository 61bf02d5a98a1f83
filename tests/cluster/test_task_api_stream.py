"""The live token stream through the real API server (issue 14): ``GET .../agenttasks/<name>/stream`` of the aggregated
task API, on the local control plane of tests/cluster/test_task_api_tenancy.py (its ``tenants`` fixture: one host-
process operator for two namespaces behind the APIService, the chart's roles bound to users with client
certificates). A turn run by the operator (a turn pod of the local pod runner) writes the stream; a user with the
chart's messenger or reader role reads it with ``kubectl get --raw`` (a long poll bounded by ``wait``) and
``kubectl agenttask logs --follow`` prints the answer once; a user of the other namespace, and one whose role grants
the transcript but not ``agenttasks/stream``, get 403 from the API server's RBAC and no entries."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest
from kubernetes import client
from unicore.store.gates import open_gate

from tests.cluster import test_task_api_tenancy as tenancy
from tests.cluster.operator_harness import VENV_BIN, Tasks
from tests.cluster.task_api_harness import ca_pair, task_path
from tests.cluster.test_kubectl import Output
from tests.cluster.test_task_api_tenancy import Tenants, user_kubeconfig
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster
tenants = tenancy.tenants  # the module-scoped fixture: a control plane with two tenants and the operator


def stream(env: Tenants, user: str, namespace: str, name: str, query: str = "") -> subprocess.CompletedProcess[str]:
    return env.raw(user, "get", "--raw", task_path(namespace, name, "stream") + query)


def test_a_turns_answer_reaches_readers_of_its_namespace_through_the_api_server(tenants: Tenants,
                                                                                 control_plane: Any) -> None:
    from unicore_devcluster import pki

    env = tenants
    api = control_plane.api_client()
    try:
        tasks = Tasks(api, env.a)
        # the answer waits at a gate the test opens once alice follows the turn
        tasks.create("streamer", {"prompt": "Talk.", "model": "scripted", "gpus": 0, "script": {"tasks": {
            "streamer": [{"gate": "followed", "text": "a streamed answer from the turn pod"}]}}})
        task_id = f"{env.a}/streamer"
        wait_for(lambda: env.store.lease_holder(task_id) and [m.role for m in env.store.messages(task_id)] == ["user"],
                 timeout=120, what="the turn to run (prompt drained, inside its model call)")
        follow = subprocess.Popen(  # until Idle
            ["kubectl", "agenttask", "logs", "streamer", "-n", env.a, "--follow"],
            env={**os.environ, "KUBECONFIG": str(env.users["alice"]),
                 "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            printed = Output(follow)
            wait_for(lambda: "Talk." in printed.text(), timeout=60, what="logs --follow to print the prompt")
            assert follow.poll() is None, "logs --follow returned while the turn ran"
            open_gate(env.store.redis, task_id, "followed")
            follow.wait(timeout=120)
            printed.thread.join(timeout=30)
        finally:
            if follow.poll() is None:
                follow.kill()
        stderr = follow.stderr.read() if follow.stderr else ""
        assert follow.returncode == 0, stderr
        assert printed.text().count("a streamed answer from the turn pod") == 1, printed.text()
        assert "no live answers" not in stderr
        assert tasks.phase("streamer") == "Idle"

        # kubectl get --raw: everything kept, then a bounded long poll after the last entry
        raw = stream(env, "carol", env.a, "streamer", "?after=0")  # the chart's reader role
        assert raw.returncode == 0, raw.stderr
        body = json.loads(raw.stdout)
        assert body["kind"] == "TokenStream" and body["task"] == f"{env.a}/streamer"
        assert "".join(e["text"] for e in body["entries"] if e["kind"] == "text") == (
            "a streamed answer from the turn pod")
        assert [e["kind"] for e in body["entries"]][-1] == "turn_end" and body["state"]["busy"] is False
        began = time.monotonic()
        idle = json.loads(stream(env, "alice", env.a, "streamer", f"?after={body['next']}&wait=2").stdout)
        assert idle["entries"] == [] and 1.5 <= time.monotonic() - began < 30

        # the other namespace's user, and a user whose role lacks agenttasks/stream: 403, no entries
        denied = stream(env, "bob", env.a, "streamer", "?after=0")
        assert denied.returncode != 0 and "Forbidden" in denied.stderr and "entries" not in denied.stdout
        rbac = client.RbacAuthorizationV1Api(api)
        rbac.create_namespaced_role(env.a, {
            "metadata": {"name": "transcript-only"},
            "rules": [{"apiGroups": ["tasks.unicore.dev"], "resources": ["agenttasks/transcript"], "verbs": ["get"]}]})
        rbac.create_namespaced_role_binding(env.a, {
            "metadata": {"name": "dave-transcript-only"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "transcript-only"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dave"}]})
        cert = env.certs["dave"] = pki.issue(ca_pair(control_plane), env.tmp / "users", "dave", "dave", client=True)
        env.users["dave"] = user_kubeconfig(env.kubeconfig, env.tmp / "users", "dave", cert, env.a)
        wait_for(lambda: env.raw("dave", "get", "--raw", task_path(env.a, "streamer", "transcript")).returncode == 0,
                 timeout=30, what="dave's binding")
        refused = stream(env, "dave", env.a, "streamer", "?after=0")
        assert refused.returncode != 0 and 'cannot get resource "agenttasks/stream"' in refused.stderr, refused.stderr
        # his plugin says so and follows the transcript instead
        older = env.plugin("dave", "logs", "streamer", "-n", env.a, "--follow")
        assert older.returncode == 0 and "no live answers" in older.stderr, older.stderr
        assert older.stdout.count("a streamed answer from the turn pod") == 1, older.stdout
    finally:
        api.close()

