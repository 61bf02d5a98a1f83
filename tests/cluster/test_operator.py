"""The AgentTask operator on the real local control plane (scripted model, real Redis): its turn pods are real
containers of the agent image on the real node (containerd + kubelet), the operator a host process."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import redis
import yaml
from kubernetes.client.rest import ApiException
from unicore.store.gates import open_gate
from unicore.store.tasks import TaskStore

from tests.cluster.operator_harness import (
    REPO,
    OperatorProcess,
    Tasks,
    kubectl,
    stored_messages,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

SETTLE = 180.0


def demo_spec() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load((REPO / "examples" / "demo.yaml").read_text())["spec"])


def role_texts(client: redis.Redis, task_id: str, role: str) -> list[str]:
    """The text blocks of the task's stored ``role`` messages, in order."""
    return [block["text"] for message in stored_messages(client, task_id) if message["role"] == role
            for block in message["content"] if "text" in block]


def settled(tasks: Tasks, expected: int) -> dict[str, str | None] | None:
    phases = tasks.all_phases()
    if len(phases) == expected and all(phase == "Idle" for phase in phases.values()):
        return phases
    return None


def test_root_spawns_three_children_on_gpu_jobs_and_answers_with_their_results(
    operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str, crd: Any,
) -> None:
    spec = demo_spec()
    spec["script"]["tasks"]["demo"][2:] = [{"echo": True}] * 4  # every wake-up reports what arrived
    root = tasks.create("demo", spec)
    wait_for(lambda: settled(tasks, 4), timeout=SETTLE, what=f"4 Idle tasks (have {tasks.all_phases()})")

    children = [obj for obj in tasks.all() if obj["spec"].get("parentRef")]
    assert sorted(obj["metadata"]["name"] for obj in children) == ["demo-a", "demo-b", "demo-c"]
    for child in children:
        assert child["spec"]["parentRef"] == {"name": "demo", "uid": root["metadata"]["uid"]}
        assert [(ref["kind"], ref["name"], ref["uid"]) for ref in child["metadata"]["ownerReferences"]] == [
            ("AgentTask", "demo", root["metadata"]["uid"])
        ]

    jobs = tasks.jobs()
    turns = {obj["metadata"]["name"]: obj["status"]["turns"] for obj in tasks.all()}
    assert len(jobs) == sum(turns.values()) and turns["demo"] >= 2
    for job in jobs:
        resources = job.spec.template.spec.containers[0].resources  # the GPU default over the operator's defaults
        assert resources.limits == {"nvidia.com/gpu": "1", "memory": "1Gi"}
        assert resources.requests == {"cpu": "100m", "memory": "256Mi"}
        assert job.status.succeeded == 1, job.metadata.name
    pods = tasks.pods()
    assert len(pods) == len(jobs)
    assert {pod.spec.node_name for pod in pods} == {crd.real_node.name}  # the GPU Jobs ran on the real node
    assert all(pod.status.container_statuses[0].container_id.startswith("containerd://") for pod in pods)

    root_answers = "\n".join(role_texts(redis_client, f"{k8s_namespace}/demo", "assistant")[1:])
    for fact in ("water boils at 100 C", "water freezes at 0 C", "densest at 4 C"):
        assert root_answers.count(fact) == 1, root_answers

    status = tasks.get("demo")["status"]  # type: ignore[index]
    assert sorted(c["name"] for c in status["children"]) == ["demo-a", "demo-b", "demo-c"]
    assert {c["phase"] for c in status["children"]} == {"Idle"}
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["observedGeneration"] == root["metadata"]["generation"]
    assert status["treePath"] == "demo" and tasks.get("demo-a")["status"]["treePath"] == "demo/demo-a"  # type: ignore[index]

    table = kubectl(crd.kubeconfig, "get", "agenttasks", "-n", k8s_namespace, "--sort-by=.status.treePath").stdout
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["NAME", "PARENT", "PHASE", "TURNS"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["demo", "Idle", str(turns["demo"])],
        ["demo-a", "demo", "Idle"], ["demo-b", "demo", "Idle"], ["demo-c", "demo", "Idle"],
    ]


def test_four_children_completing_together_reach_the_parent_exactly_once(
    operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    script = {"default": "Done.", "tasks": {
        "seven": [
            {"tool_use": [{"name": "spawn_task", "input": {"name": n, "prompt": f"report {n}"}} for n in "wxyz"]},
            {"text": "Waiting for four children."},
            *[{"echo": True}] * 5,
        ],
        "seven-*": [{"gate": "together", "echo": True}],
    }}
    tasks.create("seven", {"prompt": "fan out to four", "gpus": 0, "script": script})
    # the four children's turns all run (lease held, prompt drained, inside the model call); then all four answer
    children, store = [f"{k8s_namespace}/seven-{n}" for n in "wxyz"], TaskStore(redis_client)
    wait_for(lambda: all(store.exists(c) and store.lease_holder(c) and [m.role for m in store.messages(c)] == ["user"]
                         for c in children), timeout=SETTLE, what="the four children's turns to run at once")
    for child in children:
        open_gate(redis_client, child, "together")
    wait_for(lambda: settled(tasks, 5), timeout=SETTLE, what=f"5 Idle tasks (have {tasks.all_phases()})")
    delivered = "\n".join(role_texts(redis_client, f"{k8s_namespace}/seven", "user"))
    for name in "wxyz":
        assert delivered.count(f"Child task {k8s_namespace}/seven-{name} has completed") == 1, delivered
    assert redis_client.llen(f"uc:{{{k8s_namespace}/seven}}:inbox") == 0


@pytest.mark.parametrize(("spec", "kwargs", "fragment"), [
    ({"model": "scripted"}, {}, "spec.prompt is required"),
    ({"prompt": "x", "limits": {"maxChildren": -1}}, {}, "maxChildren"),
    ({"prompt": "x", "limits": {"turnTimeoutSeconds": 0}}, {}, "turnTimeoutSeconds"),
    ({"prompt": "x", "bogusField": 1}, {"field_validation": "Strict"}, "bogusField"),
])
def test_invalid_agenttasks_are_rejected_by_the_api_server(
    crd: Any, tasks: Tasks, spec: dict[str, Any], kwargs: dict[str, Any], fragment: str,
) -> None:
    with pytest.raises(ApiException) as caught:
        tasks.create("bad", spec, **kwargs)
    assert caught.value.status in (400, 422)
    assert fragment in str(caught.value.body)
    assert tasks.get("bad") is None
