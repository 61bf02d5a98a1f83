"""A task tree's workspace on a PersistentVolumeClaim (UNICORE_WORKSPACE_CLAIM), on the real local control plane with
the real node: the claim is provisioned by its local-path provisioner (the default StorageClass) when the first turn
pod is scheduled, and the kubelet mounts it into every turn pod (real containers, uid 65532).

Every turn is its own pod: with the default emptyDir, a file written in one turn is gone in the next and a child
never sees it. With the claim, the turn pods of a tree mount one folder (subPath = the root task's name).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

CLAIM = "unicore-workspace"
NOTE = "The tree's plan: boil water at 100 C (written in turn 1 of the root)."
READ = {"name": "read_file", "input": {"path": "plan/notes.txt"}}
SCRIPT = {"default": "Done.", "tasks": {
    "notes": [
        {"tool_use": [{"name": "write_file", "input": {"path": "plan/notes.txt", "content": NOTE}}]},
        {"tool_use": [{"name": "spawn_task", "input": {"name": "reader", "prompt": "read plan/notes.txt"}}]},
        {"text": "Waiting for the reader."},
        {"tool_use": [READ]},  # turn 2, woken by the reader's completion: a new pod
        {"echo_results": True},
    ],
    "notes-reader": [{"tool_use": [READ]}, {"echo_results": True}],
}}


@pytest.fixture
def workspace_claim(crd: Any, k8s_namespace: str) -> Iterator[str]:
    """A claim of the cluster's default StorageClass (local-path, WaitForFirstConsumer: provisioned when the first
    turn pod that mounts it is scheduled)."""
    api = crd.api_client()
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_persistent_volume_claim(k8s_namespace, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        })
        yield CLAIM
    finally:
        api.close()


@pytest.fixture
def operator_with_claim(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path,
                        workspace_claim: str) -> Iterator[OperatorProcess]:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log",
                           UNICORE_WORKSPACE_CLAIM=workspace_claim).start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log()}")


def tool_results(client_: redis.Redis, task_id: str) -> list[str]:
    """The text of every stored toolResult of the task, in order."""
    texts = []
    for raw in client_.lrange(f"uc:{{{task_id}}}:messages", 0, -1):
        for block in json.loads(raw)["content"]:
            result = block.get("toolResult")
            if result:
                texts.append("".join(part.get("text", "") for part in result["content"]))
    return texts


def test_turns_and_children_of_a_tree_share_the_claims_folder(
    operator_with_claim: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str, crd: Any,
) -> None:
    tasks.create("notes", {"prompt": "plan, then let a reader check", "gpus": 0, "script": SCRIPT})

    def settled() -> bool:
        phases = tasks.all_phases()
        return len(phases) == 2 and set(phases.values()) == {"Idle"}

    wait_for(settled, timeout=180, what=f"2 Idle tasks (have {tasks.all_phases()})")

    # each turn ran in its own pod, all of them with the tree's folder of the claim at /workspace
    pods = tasks.pods()
    assert tasks.get("notes")["status"]["turns"] == 2 and len(pods) == 3  # type: ignore[index]
    for pod in pods:
        volume = next(v for v in pod.spec.volumes if v.name == "workspace")
        assert volume.persistent_volume_claim.claim_name == CLAIM and volume.empty_dir is None
        mount = next(m for m in pod.spec.containers[0].volume_mounts if m.name == "workspace")
        assert (mount.mount_path, mount.sub_path) == ("/workspace", "notes")

    # turn 2 of the root and the child (other pods) read what turn 1 of the root wrote
    root_results = tool_results(redis_client, f"{k8s_namespace}/notes")
    assert root_results[-1] == NOTE, root_results
    child_results = tool_results(redis_client, f"{k8s_namespace}/notes-reader")
    assert child_results == [NOTE], child_results
    # and the file outlives the pods, in the claim's folder of the tree: the provisioned volume's host folder
    claim = tasks.core.read_namespaced_persistent_volume_claim(CLAIM, k8s_namespace)
    volume = tasks.core.read_persistent_volume(claim.spec.volume_name)
    assert (Path(volume.spec.host_path.path) / "notes" / "plan" / "notes.txt").read_text() == NOTE
