"""The warm Job builder is pure (issue 30): a warm pod is its Agent's cold turn pod but for the task id, and the pod
template hash tells which tasks may take one."""

from __future__ import annotations

from typing import Any

from unicore.api import pod_env
from unicore.api.spec import agent_spec_of, task_spec_of
from unicore_operator import names
from unicore_operator.job_builder import build_turn_job_spec, owner_reference, with_agent_defaults
from unicore_operator.settings import OperatorSettings
from unicore_operator.warm_pool import (
    build_warm_job_spec,
    pod_template,
    pod_template_hash,
    template_task,
    warm_job_prefix,
    workspace_folder_of,
)

SETTINGS = OperatorSettings(redis_url="redis://redis:6379/0", agent_image="example/agent:1")
AGENT = {"apiVersion": "unicore.dev/v1alpha1", "kind": "Agent",
         "metadata": {"name": "writer", "namespace": "team-a", "uid": "agent-uid"},
         "spec": {"model": "scripted", "tools": ["read_file", "run_command"], "gpus": 1,
                  "nodeSelector": {"pool": "gpu"}}}


def task(name: str, *, parent: str = "", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "labels": {}},
                            "spec": {"prompt": "hi", "agentRef": {"name": "writer"}, **spec}}
    if parent:
        body["spec"]["parentRef"] = {"name": parent}
        body["metadata"]["labels"] = {names.ROOT_LABEL: parent}
    return body


def turn_job(body: dict[str, Any], settings: OperatorSettings = SETTINGS, turn: int = 1) -> dict[str, Any]:
    spec = with_agent_defaults(task_spec_of(body), agent_spec_of(AGENT))
    return build_turn_job_spec(body, turn, settings, spec=spec)


def build_turn_job(body: dict[str, Any], agent: dict[str, Any]) -> dict[str, Any]:
    return build_turn_job_spec(body, 1, SETTINGS, spec=with_agent_defaults(task_spec_of(body), agent_spec_of(agent)))


def warm_job(settings: OperatorSettings = SETTINGS) -> dict[str, Any]:
    return build_warm_job_spec(turn_job(template_task(AGENT), settings), "writer", owner_reference(AGENT),
                               max_wait_seconds=1800)


def turn_of(job: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "turn")


def env_names(job: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in turn_of(job)["env"]}


def test_the_agents_tasks_roots_and_children_any_turn_have_the_pools_template() -> None:
    pool = pod_template_hash(turn_job(template_task(AGENT)))
    assert pod_template_hash(turn_job(task("a"))) == pool
    assert pod_template_hash(turn_job(task("b", parent="a"), turn=7)) == pool
    assert warm_job()["metadata"]["labels"][names.WARM_TEMPLATE_LABEL] == pool


def test_a_task_that_changes_its_pod_has_another_template() -> None:
    pool = pod_template_hash(turn_job(template_task(AGENT)))
    for change in ({"gpus": 2}, {"image": "python:3.12"}, {"nodeSelector": {"pool": "cpu"}},
                   {"tools": ["read_file"]}, {"resources": {"limits": {"memory": "8Gi"}}}, {"queueName": "other"}):
        assert pod_template_hash(turn_job(task("c", **change))) != pool, change
    # the model is read from the task's record by the turn: without an endpoint map it does not change the pod
    assert pod_template_hash(turn_job(task("d", model="openai:gpt-4o"))) == pool


def test_with_a_workspace_claim_a_pool_serves_every_tree_unless_its_pods_run_the_agents_code() -> None:
    settings = SETTINGS.model_copy(update={"workspace_claim": "work"})
    plain = {"tools": ["read_file", "write_file"]}  # no run_command: only the turn container mounts the claim
    pool = pod_template_hash(turn_job(template_task(AGENT) | {"spec": {"agentRef": {"name": "writer"}, **plain}},
                                      settings))
    assert pod_template_hash(turn_job(task("a", **plain), settings)) == pool
    assert pod_template_hash(turn_job(task("b", **plain), settings)) == pool
    assert workspace_folder_of(turn_job(task("b", parent="a", **plain), settings)) == "a"  # the assignment says it
    # a workbench runs the agent's code beside the workspace: it keeps its tree's folder, a template per tree
    assert pod_template_hash(turn_job(task("a"), settings)) != pod_template_hash(turn_job(task("b"), settings))
    assert pod_template_hash(turn_job(task("b", parent="a"), settings)) == pod_template_hash(
        turn_job(task("a"), settings))
    template = turn_job(task("t", **plain), settings)
    warm = build_warm_job_spec(template, "writer", owner_reference(AGENT), max_wait_seconds=60)
    mount = next(m for m in turn_of(warm)["volumeMounts"] if m["name"] == "workspace")
    assert mount == {"name": "workspace", "mountPath": "/workspace"}  # the claim whole
    assert next(m for m in turn_of(template)["volumeMounts"] if m["name"] == "workspace")["subPath"] == "t"


def test_a_warm_job_is_the_template_pod_waiting_for_a_task() -> None:
    template, job = turn_job(template_task(AGENT)), warm_job()
    meta = job["metadata"]
    assert "name" not in meta and meta["generateName"] == "writer-warm-"
    assert meta["labels"] == {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.WARM_POOL_LABEL: "writer",
                              names.WARM_TEMPLATE_LABEL: pod_template_hash(template)}
    assert names.TASK_LABEL not in job["spec"]["template"]["metadata"]["labels"]
    assert meta["ownerReferences"][0]["uid"] == "agent-uid"
    assert turn_of(job)["command"] == ["unicore-turn", "--warm"]
    env = env_names(job)
    assert pod_env.TASK_ID not in env
    assert (env[pod_env.WARM_POOL], env[pod_env.WARM_TEMPLATE], env[pod_env.WARM_MAX_WAIT_SECONDS]) == (
        "writer", pod_template_hash(template), "1800")
    pod, template_pod = job["spec"]["template"]["spec"], template["spec"]["template"]["spec"]
    assert pod["activeDeadlineSeconds"] == template_pod["activeDeadlineSeconds"] + 1800
    assert job["spec"]["activeDeadlineSeconds"] == template["spec"]["activeDeadlineSeconds"] + 1800
    # the rest of the pod is the template's: its GPUs (in the workbench), placement, sidecar, security context
    warm_parts, template_parts = pod_template(job), pod_template(template)
    for parts in (warm_parts, template_parts):
        parts["pod"].pop("activeDeadlineSeconds")
        turn_of({"spec": {"template": {"spec": parts["pod"]}}})["env"] = [
            item for item in turn_of({"spec": {"template": {"spec": parts["pod"]}}})["env"]
            if not item["name"].startswith("UNICORE_WARM_")]
    assert warm_parts == template_parts


def test_a_long_pool_name_keeps_the_generated_job_name_within_the_cap() -> None:
    assert len(warm_job_prefix("p" * 80)) + 5 <= names.JOB_NAME_MAX


def test_an_agents_queue_is_its_tasks_and_its_warm_jobs_queue_unless_a_task_names_its_own() -> None:
    queued_agent = {**AGENT, "spec": {**AGENT["spec"], "queueName": "team-a-gpus"}}
    template = build_turn_job(template_task(queued_agent), queued_agent)
    job = build_warm_job_spec(template, "writer", owner_reference(queued_agent), max_wait_seconds=60)
    assert job["metadata"]["labels"][names.KUEUE_QUEUE_LABEL] == "team-a-gpus"  # admitted by Kueue before it waits
    own_task = build_turn_job(task("a"), queued_agent)
    assert own_task["metadata"]["labels"][names.KUEUE_QUEUE_LABEL] == "team-a-gpus"
    assert pod_template_hash(own_task) == pod_template_hash(template)  # its tasks take the queued warm pods
    elsewhere = build_turn_job(task("b", queueName="team-a-cpus"), queued_agent)
    assert elsewhere["metadata"]["labels"][names.KUEUE_QUEUE_LABEL] == "team-a-cpus"
    assert pod_template_hash(elsewhere) != pod_template_hash(template)  # another queue's quota: the cold path


def test_only_an_agent_asking_for_warm_pods_has_a_pool() -> None:
    from unicore_operator.warm_pools import pool_spec

    assert pool_spec(None) is None
    assert pool_spec(AGENT) is None  # no warmPool
    sized = {**AGENT, "spec": {**AGENT["spec"], "warmPool": {"size": 2, "maxWaitSeconds": 600}}}
    found = pool_spec(sized)
    assert found is not None and (found.size, found.max_wait_seconds) == (2, 600)
    assert pool_spec({**sized, "spec": {**sized["spec"], "warmPool": {"size": 0}}}) is None
    assert pool_spec({**sized, "metadata": {**sized["metadata"], "deletionTimestamp": "2026-11-28T10:00:00Z"}}) is None


def test_a_warm_pod_given_a_turn_gets_the_turns_own_deadline_from_now() -> None:
    import time

    from unicore_operator.warm_pool import WarmPod
    from unicore_operator.warm_pools import _turn_deadline, agent_owner

    job = turn_job(task("a"))
    timeout = job["spec"]["template"]["spec"]["activeDeadlineSeconds"]
    waited = WarmPod("team-a", "p", "j", "writer", "t", running=True, start_time=time.time() - 100.2)
    assert _turn_deadline(waited, job) in (101 + timeout, 102 + timeout)  # what it waited, rounded up, plus a turn
    assert _turn_deadline(WarmPod("team-a", "p", "j", "writer", "t"), job) is None  # not started: left as it is
    owner = agent_owner(AGENT)
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Agent", "agent-uid", True)


def test_a_pools_idle_pod_seconds_count_from_its_last_check_and_its_gauge_says_its_idle_pods() -> None:
    from unicore_operator import metrics
    from unicore_operator.warm_pools import PoolState, idle_pod_seconds

    state = PoolState()
    assert idle_pod_seconds(state, 2, 100.0) == 0.0  # the first check: nothing counted yet
    assert idle_pod_seconds(state, 2, 103.5) == 7.0  # two pods idle for 3.5 s
    assert idle_pod_seconds(state, 0, 110.0) == 0.0
    before = metrics.REGISTRY.get_sample_value("unicore_warm_pool_idle_pod_seconds_total") or 0.0
    metrics.warm_pool_checked("team-a", "writer", 2, 7.0)
    assert metrics.REGISTRY.get_sample_value("unicore_warm_pool_idle_pods",
                                             {"namespace": "team-a", "pool": "writer"}) == 2
    assert metrics.REGISTRY.get_sample_value("unicore_warm_pool_idle_pod_seconds_total") == before + 7.0
    metrics.warm_pool_gone("team-a", "writer")
    assert metrics.REGISTRY.get_sample_value("unicore_warm_pool_idle_pods",
                                             {"namespace": "team-a", "pool": "writer"}) is None


def test_the_assignment_patch_gives_the_turn_jobs_labels_task_id_and_when_the_turn_started() -> None:
    from unicore_operator.warm_pool import assignment_patch
    from unicore_operator.watchdog.views import pod_view

    job = turn_job(task("a"))
    patch = assignment_patch(job, 1_700_000_000.25)
    assert patch["metadata"]["labels"] == job["metadata"]["labels"]
    annotations = patch["metadata"]["annotations"]
    assert annotations[names.TASK_ID_ANNOTATION] == job["metadata"]["annotations"][names.TASK_ID_ANNOTATION]
    warm_pod = {"metadata": {"name": "p", "namespace": "team-a", **patch["metadata"]}, "status": {"phase": "Running"}}
    assert pod_view(warm_pod).assigned_at == 1_700_000_000.25


def test_a_turns_start_is_timed_from_its_oldest_queued_entry_and_named_by_how_its_process_started() -> None:
    from unicore.settings import RuntimeSettings
    from unicore.store.inbox import oldest_queued
    from unicore.turn.defaults import start_kind

    entries = ['{"type": "user", "content": "a", "timestamp": 20.5}', '{"type": "user", "timestamp": 10.25}',
               '{"type": "user", "timestamp": true}', "not json", '{"type": "user"}']
    assert oldest_queued(entries) == 10.25
    assert oldest_queued(entries[2:]) is None and oldest_queued([]) is None
    assert start_kind(RuntimeSettings.model_validate({})) == "local"
    assert start_kind(RuntimeSettings.model_validate({"UNICORE_NAMESPACE": "team-a"})) == "cold"
    warm = RuntimeSettings.model_validate({"UNICORE_NAMESPACE": "team-a", "UNICORE_WARM_POOL": "w"})
    assert start_kind(warm) == "warm"


def test_the_pool_of_tasks_without_an_agent_serves_plain_tasks_and_is_owned_by_nobody() -> None:
    from unicore_operator.warm_pool import AGENTLESS_POOL, agentless_template_task

    template = build_turn_job_spec(agentless_template_task("team-a"), 1, SETTINGS)
    job = build_warm_job_spec(template, AGENTLESS_POOL, None, max_wait_seconds=600)
    assert job["metadata"]["generateName"] == "no-agent-warm-" and "ownerReferences" not in job["metadata"]
    assert job["metadata"]["labels"][names.WARM_POOL_LABEL] == AGENTLESS_POOL
    plain = {"metadata": {"name": "q", "namespace": "team-a", "uid": "u", "labels": {}}, "spec": {"prompt": "hi"}}
    assert pod_template_hash(build_turn_job_spec(plain, 3, SETTINGS)) == pod_template_hash(template)
    plain["spec"]["gpus"] = 2  # its own pod: the cold path
    assert pod_template_hash(build_turn_job_spec(plain, 1, SETTINGS)) != pod_template_hash(template)
