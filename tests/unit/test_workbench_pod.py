"""The workbench of a turn pod (``workbench_pod``) on plain dicts: only for a task that may use run_command; the GPUs,
the image and the user's variables go to the workbench; the runtime's variables and the token stay with the turn."""

from __future__ import annotations

from typing import Any

from unicore.api.spec import agent_spec_of, task_spec_of
from unicore_operator.job_builder import build_turn_job_spec, with_agent_defaults
from unicore_operator.settings import OperatorSettings
from unicore_operator.workbench_pod import EXEC_SOCKET, TOKEN_PATH, WORKBENCH_CONTAINER

SETTINGS = OperatorSettings(redis_url="redis://redis:6379/0", agent_image="example/agent:1", default_gpus=0)


def task(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask",
            "metadata": {"name": "demo", "namespace": "team-a", "uid": "uid-1", "labels": {}},
            "spec": {"prompt": "hi", **spec}}


def pod(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def named(containers: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(c for c in containers if c["name"] == name)


def test_a_task_without_run_command_has_no_workbench() -> None:
    spec = pod(build_turn_job_spec(task(tools=["read_file", "write_file"], gpus=1), 1, SETTINGS))
    assert "initContainers" not in spec
    assert spec["automountServiceAccountToken"] is True
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert not any(e["name"] == "UNICORE_EXEC_SOCKET" for e in spec["containers"][0]["env"])
    assert "initContainers" not in pod(build_turn_job_spec(task(), 1, SETTINGS))  # the default toolset has none


def test_the_workbench_holds_the_gpus_and_nothing_of_the_runtime() -> None:
    body = task(tools=["write_file", "run_command"], gpus=2, image="python:3.12-slim",
                workbench={"env": [{"name": "DATASET_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ds", "key": "t"}}},
                                   {"name": "HOME", "value": "/workspace"}],
                           "envFrom": [{"configMapRef": {"name": "train-config"}}],
                           "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "8Gi"}}})
    spec = pod(build_turn_job_spec(body, 1, SETTINGS))
    install, bench = spec["initContainers"]
    turn = spec["containers"][0]
    assert bench["name"] == WORKBENCH_CONTAINER and bench["restartPolicy"] == "Always"  # a native sidecar
    assert install.get("restartPolicy") is None and install["image"] == "example/agent:1"
    assert bench["image"] == "python:3.12-slim"
    assert bench["resources"] == {"requests": {"memory": "2Gi"}, "limits": {"nvidia.com/gpu": "2", "memory": "8Gi"}}
    assert "nvidia.com/gpu" not in turn["resources"].get("limits", {})
    assert "nvidia.com/gpu" not in turn["resources"].get("requests", {})
    names = [e["name"] for e in bench["env"]]
    assert names == ["DATASET_TOKEN", "HOME"]  # the user's HOME wins over the default /tmp
    assert bench["envFrom"] == [{"configMapRef": {"name": "train-config"}}]
    assert {"name": "UNICORE_EXEC_SOCKET", "value": EXEC_SOCKET} in turn["env"]
    assert any(e["name"] == "REDIS_URL" for e in turn["env"])
    # no token for the pod; the turn container mounts its own, the workbench none
    assert spec["automountServiceAccountToken"] is False
    assert any(m["mountPath"] == TOKEN_PATH for m in turn["volumeMounts"])
    assert not any(m["mountPath"] == TOKEN_PATH for m in bench["volumeMounts"])
    assert {m["mountPath"] for m in bench["volumeMounts"]} == {"/workspace", "/unicore-exec", "/tmp"}
    assert bench["securityContext"] == turn["securityContext"]  # the same restricted context
    assert bench["command"][:2] == ["/unicore-exec/unicore-exec", "serve"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(volumes) >= {"exec", "workbench-tmp", "kube-api-access", "workspace", "tmp"}
    sources = volumes["kube-api-access"]["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"


def test_the_default_workbench_image_is_the_agent_image_and_home_is_tmp() -> None:
    spec = pod(build_turn_job_spec(task(tools=["run_command"]), 1, SETTINGS))
    bench = named(spec["initContainers"], WORKBENCH_CONTAINER)
    assert bench["image"] == "example/agent:1"
    assert bench["env"] == [{"name": "HOME", "value": "/tmp"}]
    assert bench["resources"] == {}  # no GPUs asked (default_gpus 0), nothing else by default
    assert "envFrom" not in bench


def test_a_task_takes_its_agents_tools_and_image() -> None:
    agent = agent_spec_of({"spec": {"tools": ["run_command", "read_file"], "image": "team/cuda:12", "gpus": 1}})
    body = task(agentRef={"name": "trainer"})
    spec = with_agent_defaults(task_spec_of(body), agent)
    built = pod(build_turn_job_spec(body, 1, SETTINGS, spec=spec))
    bench = named(built["initContainers"], WORKBENCH_CONTAINER)
    assert bench["image"] == "team/cuda:12" and bench["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    # the task's own tools narrow the agent's: without run_command, no workbench
    narrowed = task(agentRef={"name": "trainer"}, tools=["read_file"])
    spec = with_agent_defaults(task_spec_of(narrowed), agent)
    assert "initContainers" not in pod(build_turn_job_spec(narrowed, 1, SETTINGS, spec=spec))
    # an agent without tools has the default toolset: no workbench
    plain = with_agent_defaults(task_spec_of(body), agent_spec_of({"spec": {"image": "team/cuda:12"}}))
    assert "initContainers" not in pod(build_turn_job_spec(body, 1, SETTINGS, spec=plain))
