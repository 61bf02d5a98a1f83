"""The turn Job builder is pure: every field is checked on plain dicts."""

from __future__ import annotations

from typing import Any

import pytest
from unicore_operator import names
from unicore_operator.job_builder import build_turn_job_spec, turn_job_name
from unicore_operator.settings import OperatorSettings, load_settings

SETTINGS = OperatorSettings(redis_url="redis://redis:6379/0", agent_image="example/agent:1")


def task(name: str = "demo", namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "unicore.dev/v1alpha1",
        "kind": "AgentTask",
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-1", "labels": {}},
        "spec": {"prompt": "hi", **spec},
    }


def container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]["containers"][0]


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container(job)["env"]}


def test_same_task_and_turn_give_the_same_job() -> None:
    assert build_turn_job_spec(task(), 3, SETTINGS) == build_turn_job_spec(task(), 3, SETTINGS)
    assert build_turn_job_spec(task(), 3, SETTINGS)["metadata"]["name"] == "demo-t3"
    assert build_turn_job_spec(task(), 3, SETTINGS, attempt=2)["metadata"]["name"] == "demo-t3-r2"
    assert build_turn_job_spec(task(), 4, SETTINGS)["metadata"]["name"] == "demo-t4"


def test_long_names_are_cut_with_a_hash_and_stay_unique() -> None:
    long_a = "a" * 100 + "-x"
    long_b = "a" * 100 + "-y"
    name_a = turn_job_name(long_a, 12, 1, namespace="ns")
    assert len(name_a) <= 52
    assert name_a.endswith("-t12-r1")
    assert name_a == turn_job_name(long_a, 12, 1, namespace="ns")
    assert name_a != turn_job_name(long_b, 12, 1, namespace="ns")
    assert name_a != turn_job_name(long_a, 12, 1, namespace="other")
    exact = "b" * (52 - len("-t1"))
    assert turn_job_name(exact, 1) == f"{exact}-t1"


def test_owner_reference_labels_and_command() -> None:
    job = build_turn_job_spec(task(parentRef={"name": "root"}), 1, SETTINGS)
    meta = job["metadata"]
    assert meta["ownerReferences"] == [{
        "apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask", "name": "demo", "uid": "uid-1",
        "controller": True, "blockOwnerDeletion": True,
    }]
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "unicore-operator", "unicore.dev/task": "demo", "unicore.dev/turn": "1",
        "unicore.dev/attempt": "0", "unicore.dev/parent": "root", "unicore.dev/root": "root",
    }
    assert job["spec"]["template"]["metadata"]["labels"] == meta["labels"]
    assert meta["annotations"][names.TASK_ID_ANNOTATION] == "team-a/demo"
    assert container(job)["command"] == ["unicore-turn", "team-a/demo"]
    assert container(job)["image"] == "example/agent:1"


def test_root_label_comes_from_the_tasks_own_root_label() -> None:
    child = task(name="demo-a-b", parentRef={"name": "demo-a"})
    child["metadata"]["labels"] = {names.ROOT_LABEL: "demo"}
    assert build_turn_job_spec(child, 1, SETTINGS)["metadata"]["labels"][names.ROOT_LABEL] == "demo"


def test_env_literal_redis_url_and_task_identity() -> None:
    env = env_of(build_turn_job_spec(task(), 1, SETTINGS))
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    assert env["UNICORE_TASK_ID"] == "team-a/demo"
    assert env["UNICORE_SPAWNER"] == "kubernetes"
    assert env["UNICORE_NAMESPACE"] == "team-a"
    assert "envFrom" not in container(build_turn_job_spec(task(), 1, SETTINGS))


def test_env_from_secrets() -> None:
    settings = SETTINGS.model_copy(update={"agent_redis_secret": "redis-creds", "agent_env_secret": "bedrock"})
    job = build_turn_job_spec(task(), 1, settings)
    assert env_of(job)["REDIS_URL"] == {"secretKeyRef": {"name": "redis-creds", "key": "redis-url"}}
    assert container(job)["envFrom"] == [{"secretRef": {"name": "bedrock"}}]


DEFAULT_REQUESTS = {"cpu": "100m", "memory": "256Mi"}


def test_default_gpu_and_toleration() -> None:
    job = build_turn_job_spec(task(), 1, SETTINGS)
    assert container(job)["resources"] == {"requests": DEFAULT_REQUESTS,
                                           "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"}}
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_zero_gpus_removes_gpu_and_toleration() -> None:
    job = build_turn_job_spec(task(gpus=0), 1, SETTINGS)
    assert container(job)["resources"] == {"requests": DEFAULT_REQUESTS, "limits": {"memory": "1Gi"}}
    assert "tolerations" not in job["spec"]["template"]["spec"]


def test_resources_merge_and_tolerations_replace() -> None:
    spec = {"gpus": 2, "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi", "cpu": 2}},
            "tolerations": [{"key": "pool", "operator": "Equal", "value": "x", "effect": "NoSchedule"}]}
    job = build_turn_job_spec(task(**spec), 1, SETTINGS)
    assert container(job)["resources"] == {"limits": {"nvidia.com/gpu": "2", "memory": "2Gi", "cpu": "2"},
                                           "requests": {"cpu": "500m", "memory": "256Mi"}}
    assert job["spec"]["template"]["spec"]["tolerations"] == spec["tolerations"]


def test_task_resources_win_key_by_key_over_the_defaults_and_the_gpu_limit() -> None:
    spec = {"gpus": 1, "resources": {"requests": {"memory": "512Mi"}, "limits": {"nvidia.com/gpu": 3}}}
    assert container(build_turn_job_spec(task(**spec), 1, SETTINGS))["resources"] == {
        "requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi", "nvidia.com/gpu": "3"}}
    # the operator's defaults: any resource, or none at all (BestEffort)
    custom = SETTINGS.model_copy(update={"agent_resources": {"requests": {"ephemeral-storage": "1Gi"}}})
    assert container(build_turn_job_spec(task(gpus=0), 1, custom))["resources"] == {
        "requests": {"ephemeral-storage": "1Gi"}}
    none = SETTINGS.model_copy(update={"agent_resources": {}})
    assert container(build_turn_job_spec(task(gpus=0), 1, none))["resources"] == {}


def test_a_task_setting_one_side_of_a_resource_moves_the_default_other_side_so_the_pair_stays_valid() -> None:
    # a limit below the default request lowers the request to it
    small = build_turn_job_spec(task(gpus=0, resources={"limits": {"memory": "128Mi", "cpu": "50m"}}), 1, SETTINGS)
    assert container(small)["resources"] == {"requests": {"cpu": "50m", "memory": "128Mi"},
                                             "limits": {"memory": "128Mi", "cpu": "50m"}}
    # a request above the default limit raises the limit to it
    big = build_turn_job_spec(task(gpus=0, resources={"requests": {"memory": "4Gi"}}), 1, SETTINGS)
    assert container(big)["resources"] == {"requests": {"cpu": "100m", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    # values in range are left as they are
    fits = build_turn_job_spec(task(gpus=0, resources={"limits": {"memory": "0.5Gi"}}), 1, SETTINGS)
    assert container(fits)["resources"]["requests"]["memory"] == "256Mi"


def test_scheduling_fields_and_kueue_label() -> None:
    spec = {"nodeSelector": {"pool": "gpu"}, "priorityClassName": "high", "runtimeClassName": "nvidia",
            "queueName": "team-queue"}
    job = build_turn_job_spec(task(**spec), 1, SETTINGS)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["priorityClassName"] == "high"
    assert pod["runtimeClassName"] == "nvidia"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
    plain = build_turn_job_spec(task(), 1, SETTINGS)
    assert "kueue.x-k8s.io/queue-name" not in plain["metadata"]["labels"]
    assert not {"nodeSelector", "priorityClassName", "runtimeClassName"} & set(plain["spec"]["template"]["spec"])


def test_job_policy_fields() -> None:
    job = build_turn_job_spec(task(limits={"turnTimeoutSeconds": 120}), 1, SETTINGS)
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == 300
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "unicore-agent"
    assert pod["automountServiceAccountToken"] is True
    # a failed turn's one-line error (the log's last line) is its termination message, shown in status and Events
    assert pod["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_waiting_for_scheduling_does_not_count_against_the_turn_timeout() -> None:
    # issue 10 #16: the turn timeout is the pod's deadline (from the pod's start); the Job's deadline (from the Job's
    # start) adds the bounded wait for scheduling (UNICORE_PENDING_TIMEOUT_SECONDS, 300 by default)
    job = build_turn_job_spec(task(limits={"turnTimeoutSeconds": 120}), 1, SETTINGS)
    assert job["spec"]["template"]["spec"]["activeDeadlineSeconds"] == 120
    assert job["spec"]["activeDeadlineSeconds"] == 120 + 300
    default = build_turn_job_spec(task(), 1, SETTINGS.model_copy(update={"pending_timeout_seconds": 30.5}))
    assert default["spec"]["template"]["spec"]["activeDeadlineSeconds"] == 3600
    assert default["spec"]["activeDeadlineSeconds"] == 3600 + 31


def test_security_context_passes_restricted() -> None:
    pod = build_turn_job_spec(task(), 1, SETTINGS)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsUser"] != 0
    sc = pod["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert all("hostPath" not in volume for volume in pod["volumes"])


def test_long_task_name_label_values_are_valid() -> None:
    long_name = "x" * 120
    labels = build_turn_job_spec(task(name=long_name), 1, SETTINGS)["metadata"]["labels"]
    assert len(labels[names.TASK_LABEL]) <= 63
    assert labels[names.TASK_LABEL] == names.label_value(long_name)


def test_settings_from_environment() -> None:
    settings = load_settings({"REDIS_URL": "redis://r", "UNICORE_NAMESPACES": "a, b,", "UNICORE_DEFAULT_GPUS": "0",
                              "UNICORE_GPU_TOLERATION": "false", "UNICORE_AGENT_ENV_SECRET": ""})
    assert settings.namespaces == ("a", "b")
    assert settings.default_gpus == 0 and settings.gpu_toleration is False
    assert settings.agent_env_secret is None
    job = build_turn_job_spec(task(), 1, settings)
    assert container(job)["resources"] == {"requests": DEFAULT_REQUESTS, "limits": {"memory": "1Gi"}}


def test_settings_errors_are_clear() -> None:
    from unicore.errors import ConfigError

    with pytest.raises(ConfigError, match="REDIS_URL is required"):
        load_settings({})
    with pytest.raises(ConfigError, match="UNICORE_DEFAULT_GPUS"):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_DEFAULT_GPUS": "-1"})


def test_stall_seconds_and_extra_env_go_to_turn_pods_only_when_set() -> None:
    plain = env_of(build_turn_job_spec(task(), 1, SETTINGS))
    assert "UNICORE_STALL_SECONDS" not in plain and "UNICORE_EXTRA_TOOLS" not in plain
    settings = load_settings({
        "REDIS_URL": "redis://r:6379/0",
        "UNICORE_STALL_SECONDS": "120",
        "UNICORE_AGENT_EXTRA_ENV": '{"UNICORE_EXTRA_TOOLS": "my_tools:TOOLS", "PYTHONPATH": "/opt/tools"}',
    })
    env = env_of(build_turn_job_spec(task(), 1, settings))
    assert env["UNICORE_STALL_SECONDS"] == "120"
    assert env["UNICORE_EXTRA_TOOLS"] == "my_tools:TOOLS" and env["PYTHONPATH"] == "/opt/tools"
    names_ = [item["name"] for item in container(build_turn_job_spec(task(), 1, settings))["env"]]
    assert len(names_) == len(set(names_))


@pytest.mark.parametrize(
    ("var", "raw", "problem"),
    [
        ("UNICORE_STALL_SECONDS", "0", "UNICORE_STALL_SECONDS"),
        ("UNICORE_AGENT_EXTRA_ENV", "{not json", "not valid JSON"),
        ("UNICORE_AGENT_EXTRA_ENV", '["A"]', "JSON object of string values"),
        ("UNICORE_AGENT_EXTRA_ENV", '{"A": 1}', "JSON object of string values"),
        ("UNICORE_AGENT_EXTRA_ENV", '{"1 A": "x"}', "invalid environment variable names"),
        ("UNICORE_AGENT_EXTRA_ENV", '{"REDIS_URL": "x"}', "set by the operator itself"),
        ("UNICORE_AGENT_EXTRA_ENV", '{"UNICORE_STALL_SECONDS": "5"}', "set by the operator itself"),
    ],
)
def test_bad_stall_or_extra_env_settings_are_config_errors(var: str, raw: str, problem: str) -> None:
    from unicore.errors import ConfigError

    with pytest.raises(ConfigError, match=problem):
        load_settings({"REDIS_URL": "redis://r:6379/0", var: raw})
    assert load_settings({"REDIS_URL": "redis://r", "UNICORE_AGENT_EXTRA_ENV": ""}).agent_extra_env == {}


def test_workspace_is_an_empty_dir_without_a_claim() -> None:
    pod = build_turn_job_spec(task(), 1, SETTINGS)["spec"]["template"]["spec"]
    assert {"name": "workspace", "emptyDir": {}} in pod["volumes"]
    assert {"name": "workspace", "mountPath": "/workspace"} in pod["containers"][0]["volumeMounts"]


def test_workspace_claim_gives_every_task_of_a_tree_the_roots_folder() -> None:
    settings = load_settings({"REDIS_URL": "redis://r", "UNICORE_WORKSPACE_CLAIM": "unicore-workspace"})
    assert settings.workspace_claim == "unicore-workspace"
    root = task("research")
    child = task("research-a", parentRef={"name": "research"})
    child["metadata"]["labels"] = {names.ROOT_LABEL: "research"}
    grandchild = task("research-a-x", parentRef={"name": "research-a"})
    grandchild["metadata"]["labels"] = {names.ROOT_LABEL: "research"}
    for obj in (root, child, grandchild):
        pod = build_turn_job_spec(obj, 2, settings)["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "workspace")
        assert volume == {"name": "workspace", "persistentVolumeClaim": {"claimName": "unicore-workspace"}}
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "workspace")
        assert mount == {"name": "workspace", "mountPath": "/workspace", "subPath": "research"}
        assert env_of(build_turn_job_spec(obj, 2, settings))["UNICORE_WORKSPACE"] == "/workspace"
    other = build_turn_job_spec(task("other"), 1, settings)["spec"]["template"]["spec"]
    assert other["containers"][0]["volumeMounts"][0]["subPath"] == "other"


def test_workspace_folder_of_a_long_root_name_matches_its_childrens_root_label() -> None:
    settings = OperatorSettings(redis_url="redis://r", workspace_claim="ws")
    long_root = "r" * 100
    child = task("kid", parentRef={"name": long_root})
    child["metadata"]["labels"] = {names.ROOT_LABEL: names.label_value(long_root)}
    folders = {
        build_turn_job_spec(obj, 1, settings)["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["subPath"]
        for obj in (task(long_root), child)
    }
    assert folders == {names.label_value(long_root)} and len(names.label_value(long_root)) <= 63


@pytest.mark.parametrize("raw", ["Bad_Claim", "-ws", "ws-", "a" * 254, "a..b", "ws/x"])
def test_bad_workspace_claim_names_are_config_errors(raw: str) -> None:
    from unicore.errors import ConfigError

    with pytest.raises(ConfigError, match="UNICORE_WORKSPACE_CLAIM: .*not a valid PersistentVolumeClaim name"):
        load_settings({"REDIS_URL": "redis://r", "UNICORE_WORKSPACE_CLAIM": raw})
    assert load_settings({"REDIS_URL": "redis://r", "UNICORE_WORKSPACE_CLAIM": " "}).workspace_claim is None
    assert load_settings({"REDIS_URL": "redis://r", "UNICORE_WORKSPACE_CLAIM": "ws.team-a"}).workspace_claim
