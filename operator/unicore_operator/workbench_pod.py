"""The workbench of a turn pod (pure): the container where ``run_command`` runs the agent's commands, for a task whose
tools name ``run_command`` (docs/workbench.md).

A turn pod with a workbench has, besides the turn container:

* the init container ``exec-server-install`` (the agent image) copying the static exec server ``unicore-exec`` into
  the emptyDir ``exec`` (``/unicore-exec``), so the workbench image needs nothing of UniCore (the pattern of Argo's
  emissary executor);
* the native sidecar ``workbench`` (an init container with ``restartPolicy: Always``: it starts before the turn and
  ends when the turn container has ended, so the Job completes) running ``spec.image`` (default: the agent image)
  with the exec server as its command, serving the turn container on a unix socket in ``exec``. It holds the task's
  GPUs, shares ``/workspace``, gets only ``spec.workbench``'s variables (never ``REDIS_URL``, the endpoint map, model
  keys or ``UNICORE_*``) and no ServiceAccount token: the pod's automount is off and only the turn container mounts
  a projected token (``kube-api-access``), at the path the Kubernetes clients read.
"""

from __future__ import annotations

import copy
from typing import Any

from unicore.api import pod_env
from unicore.api.spec import AgentTaskSpec

from unicore_operator.settings import OperatorSettings

RUN_COMMAND_TOOL = "run_command"
WORKBENCH_CONTAINER = "workbench"
INSTALL_CONTAINER = "exec-server-install"
EXEC_VOLUME = "exec"
EXEC_DIR = "/unicore-exec"
EXEC_SOCKET = f"{EXEC_DIR}/exec.sock"
EXEC_SERVER = f"{EXEC_DIR}/unicore-exec"
EXEC_SERVER_IN_AGENT_IMAGE = "/usr/local/bin/unicore-exec"
TOKEN_VOLUME = "kube-api-access"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SECONDS = 3607  # what the kubelet's own automounted token asks for
WORKBENCH_HOME = "/tmp"  # the root filesystem is read-only; /tmp is the workbench's own emptyDir


def runs_commands(spec: AgentTaskSpec) -> bool:
    """The task's turn pods get a workbench: its tools (its own, else its Agent's: ``with_agent_defaults``) name
    ``run_command``. The tool is never in a default toolset."""
    return spec.tools is not None and RUN_COMMAND_TOOL in spec.tools


def workbench_image(spec: AgentTaskSpec, settings: OperatorSettings) -> str:
    return spec.image or settings.agent_image


def split_gpus(resources: dict[str, Any], gpu_resource: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(the turn container's resources without the GPU, the GPU limit for the workbench)."""
    turn = copy.deepcopy(resources)
    gpus: dict[str, str] = {}
    for section in ("limits", "requests"):
        value = (turn.get(section) or {}).pop(gpu_resource, None)
        if value is not None and section == "limits":
            gpus[gpu_resource] = str(value)
    return turn, gpus


def workbench_env(spec: AgentTaskSpec) -> list[dict[str, Any]]:
    """The variables of what runs the task's code (the workbench, a command Job): ``HOME=/tmp`` and
    ``spec.workbench.env`` (a name the user sets wins), nothing of the runtime."""
    env: list[dict[str, Any]] = [{"name": "HOME", "value": WORKBENCH_HOME}]
    own = spec.workbench
    if own is not None and own.env:
        env = [var for var in env if var["name"] not in {v.get("name") for v in own.env}] + copy.deepcopy(own.env)
    return env


def workbench_resources(spec: AgentTaskSpec, gpus: dict[str, str]) -> dict[str, Any]:
    """``spec.workbench.resources`` with the GPU limit ``gpus`` (the workbench's, or a command Job's) under them."""
    own = spec.workbench
    resources: dict[str, Any] = own.resources.model_dump(exclude_none=True) if own and own.resources else {}
    if gpus:
        resources["limits"] = {**gpus, **(resources.get("limits") or {})}
    return resources


def install_container(settings: OperatorSettings, security_context: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": INSTALL_CONTAINER,
        "image": settings.agent_image,
        "imagePullPolicy": settings.agent_image_pull_policy,
        "command": [EXEC_SERVER_IN_AGENT_IMAGE, "install", EXEC_SERVER],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": copy.deepcopy(security_context),
        "volumeMounts": [{"name": EXEC_VOLUME, "mountPath": EXEC_DIR}],
    }


def workbench_container(spec: AgentTaskSpec, settings: OperatorSettings, gpus: dict[str, str],
                        workspace_mount: dict[str, Any], security_context: dict[str, Any]) -> dict[str, Any]:
    """The native sidecar that runs the agent's commands (``gpus``: the GPU limit taken off the turn container)."""
    own = spec.workbench
    container: dict[str, Any] = {
        "name": WORKBENCH_CONTAINER,
        "image": workbench_image(spec, settings),
        "imagePullPolicy": settings.agent_image_pull_policy if spec.image is None else "IfNotPresent",
        "restartPolicy": "Always",
        "command": [EXEC_SERVER, "serve", "--socket", EXEC_SOCKET, "--workdir", workspace_mount["mountPath"]],
        "workingDir": workspace_mount["mountPath"],
        "env": workbench_env(spec),
        "resources": workbench_resources(spec, gpus),
        "securityContext": copy.deepcopy(security_context),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            dict(workspace_mount),
            {"name": EXEC_VOLUME, "mountPath": EXEC_DIR},
            {"name": "workbench-tmp", "mountPath": "/tmp"},
        ],
    }
    if own is not None and own.env_from:
        container["envFrom"] = copy.deepcopy(own.env_from)
    return container


def token_volume() -> dict[str, Any]:
    """The projected ServiceAccount token the kubelet would automount, for the turn container alone."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }


def add_workbench(pod_spec: dict[str, Any], turn: dict[str, Any], spec: AgentTaskSpec, settings: OperatorSettings,
                  workspace_mount: dict[str, Any], security_context: dict[str, Any]) -> None:
    """Give ``pod_spec`` (whose one container is ``turn``) the workbench: the install init container, the sidecar
    with the GPUs, the exec volume, and the token mounted into the turn container only."""
    turn["resources"], gpus = split_gpus(turn["resources"], settings.gpu_resource)
    turn["env"].append({"name": pod_env.EXEC_SOCKET, "value": EXEC_SOCKET})
    turn["volumeMounts"] += [{"name": EXEC_VOLUME, "mountPath": EXEC_DIR},
                             {"name": TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True}]
    pod_spec["automountServiceAccountToken"] = False
    pod_spec["initContainers"] = [
        install_container(settings, security_context),
        workbench_container(spec, settings, gpus, workspace_mount, security_context),
    ]
    pod_spec["volumes"] += [{"name": EXEC_VOLUME, "emptyDir": {}}, {"name": "workbench-tmp", "emptyDir": {}},
                            token_volume()]


__all__ = ["EXEC_SOCKET", "RUN_COMMAND_TOOL", "WORKBENCH_CONTAINER", "add_workbench", "runs_commands",
           "split_gpus", "workbench_env", "workbench_image", "workbench_resources"]
