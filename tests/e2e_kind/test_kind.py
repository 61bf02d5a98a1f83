"""End-to-end on kind with the real images (run by `make e2e-kind`, which builds, loads and deploys first).

Skipped cleanly, at collection, when Docker or kind is not available (our CI machines have neither).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from tests.waiting import wait_for


def _docker_ok() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


if not _docker_ok():
    pytest.skip("Docker is not available (`docker info` failed): kind tests need it", allow_module_level=True)
if shutil.which("kind") is None or shutil.which("kubectl") is None:
    pytest.skip("kind or kubectl is not installed", allow_module_level=True)

pytestmark = pytest.mark.kind

NAMESPACE = os.environ.get("NAMESPACE", "unicore")
CONTEXT = f"kind-{os.environ.get('KIND_CLUSTER', 'unicore')}"


def kubectl(*args: str, input: str | None = None) -> str:
    proc = subprocess.run(
        ["kubectl", "--context", CONTEXT, "-n", NAMESPACE, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_operator_is_ready() -> None:
    kubectl("rollout", "status", "deployment/unicore-operator", "--timeout=180s")


def test_scripted_task_runs_to_idle_and_metrics_are_served() -> None:
    name = f"kind-{uuid.uuid4().hex[:6]}"
    task = {
        "apiVersion": "unicore.dev/v1alpha1",
        "kind": "AgentTask",
        "metadata": {"name": name},
        "spec": {"prompt": "Say hello.", "model": "scripted", "script": {"default": "Hello from kind."}},
    }
    kubectl("apply", "-f", "-", input=json.dumps(task))
    try:
        wait_for(
            lambda: kubectl("get", "agenttask", name, "-o", "jsonpath={.status.phase}") == "Idle",
            timeout=300,
            interval=2,
            what=f"AgentTask {name} Idle",
        )
        metrics = kubectl(
            "get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/services/unicore-operator:http/proxy/metrics"
        )
        assert "unicore_" in metrics
    finally:
        kubectl("delete", "agenttask", name, "--wait=false")
