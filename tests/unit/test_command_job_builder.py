"""A task's command Job (submit_job) as the operator builds it, on plain dicts; and the GPU limit it is checked
against, from the API server's objects."""

from __future__ import annotations

from typing import Any

from unicore.api.spec import task_spec_of
from unicore.store.command_jobs import JobRequest
from unicore_operator.command_job_builder import build_command_job_spec, command_job_name, max_job_gpus
from unicore_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(redis_url="redis://redis:6379/0", agent_image="example/agent:1",
                            workspace_claim="workspaces")


def task(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-1", "labels": {"unicore.dev/root": "train"}},
            "spec": {"prompt": "hi", **spec}}


def test_the_job_runs_the_command_with_its_gpus_in_the_queue_and_the_workspace() -> None:
    body = task(image="team/cuda:12", queueName="gpu-queue",
                workbench={"env": [{"name": "WANDB_MODE", "value": "offline"}]})
    request = JobRequest(n=3, command="python train.py --epochs 3", gpus=2, timeout_seconds=7200)
    job = build_command_job_spec(body, task_spec_of(body), request, SETTINGS)
    meta, spec = job["metadata"], job["spec"]
    assert meta["name"] == "train-j3"
    assert meta["labels"]["unicore.dev/command-job"] == "3" and "unicore.dev/turn" not in meta["labels"]
    assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert "suspend" not in spec  # as turn Jobs: Kueue's webhook suspends it (without Kueue it just runs)
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert spec["activeDeadlineSeconds"] == 7200 and spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "team/cuda:12"
    assert container["command"] == ["/bin/sh", "-c", "python train.py --epochs 3"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert pod["automountServiceAccountToken"] is False
    names = {e["name"] for e in container["env"]}
    assert names == {"HOME", "WANDB_MODE"}  # nothing of the runtime
    assert {"name": "workspace", "mountPath": "/workspace", "subPath": "train"} in container["volumeMounts"]
    assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "workspaces"}} in pod["volumes"]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_without_a_queue_the_job_is_not_held_and_its_own_image_wins() -> None:
    body = task()
    job = build_command_job_spec(body, task_spec_of(body), JobRequest(n=1, command="true", image="busybox:1"),
                                 SETTINGS)
    assert "suspend" not in job["spec"] and "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "busybox:1" and "tolerations" not in pod
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"].get("limits", {})


def test_long_names_are_cut_with_a_hash() -> None:
    name = command_job_name("x" * 80, 12, namespace="ml")
    assert len(name) <= 52 and name.endswith("-j12") and name != command_job_name("x" * 79 + "y", 12, namespace="ml")


def test_the_gpu_limit_is_the_lower_of_the_task_and_its_agent() -> None:
    assert max_job_gpus(task_spec_of(task()), None) == 1
    assert max_job_gpus(task_spec_of(task(limits={"maxJobGPUs": 4})), None) == 4
    assert max_job_gpus(task_spec_of(task(limits={"maxJobGPUs": 4})), 2) == 2
    assert max_job_gpus(task_spec_of(task()), 0) == 0
