"""Warm turn pods on the real node (issue 30): an Agent with ``warmPool: {size: 2}`` keeps two turn pods running and
waiting (their Redis records say so); three tasks of it created at once: two turns run in pods that existed before
the tasks did, the third in a cold Job, each task answers once, and the pool refills with new pods; a task whose own
spec changes its pod goes cold while warm pods wait. Crashes: the operator between an assignment and its labels, a
warm pod during its turn and while it waits. Under Kueue (an Agent with a ``queueName``): warm Jobs are admitted
before they wait and hold the queue's quota while they do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client
from unicore.store import warm_pods

from tests.cluster.operator_harness import GROUP, VERSION, StartOperator, Tasks, operator_factory, stored_messages
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

POOL_LABEL, TASK_LABEL = "unicore.dev/warm-pool", "unicore.dev/task"


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    env = {"UNICORE_DEFAULT_GPUS": "0", "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1"}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def idle_warm_pods(tasks: Tasks, redis_client: redis.Redis) -> list[Any]:
    """The namespace's warm pods that run, have no task and whose record says they wait."""
    pods = [pod for pod in tasks.pods() if (pod.metadata.labels or {}).get(POOL_LABEL)
            and not (pod.metadata.labels or {}).get(TASK_LABEL) and pod.status.phase == "Running"
            and not pod.metadata.deletion_timestamp]
    waiting = warm_pods.waiting(redis_client, tasks.namespace, [pod.metadata.name for pod in pods])
    return [pod for pod in pods if pod.metadata.name in waiting]


def create_greeter(crd: Any, namespace: str, *, pool: int, **spec: Any) -> None:
    """The Agent ``greeter`` (scripted model, no GPU unless ``spec`` says) with a warm pool of ``pool`` pods."""
    agent = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Agent", "metadata": {"name": "greeter"},
             "spec": {"model": "scripted", "tools": ["read_file"], "gpus": 0, "warmPool": {"size": pool}, **spec}}
    client.CustomObjectsApi(crd.api_client()).create_namespaced_custom_object(GROUP, VERSION, namespace, "agents",
                                                                              agent)


def answers(redis_client: redis.Redis, task_id: str) -> list[str]:
    """The texts of the task's stored assistant messages."""
    return [m["content"][0]["text"] for m in stored_messages(redis_client, task_id) if m["role"] == "assistant"]


def phase(tasks: Tasks, name: str) -> str:
    return str(((tasks.get(name) or {}).get("status") or {}).get("phase") or "")


def test_turns_take_waiting_warm_pods_a_third_goes_cold_and_the_pool_refills(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    start_operator()
    create_greeter(crd, k8s_namespace, pool=2)
    first = wait_for(lambda: (found := idle_warm_pods(tasks, redis_client)) and len(found) == 2 and found,
                     timeout=180, interval=0.2, what="two warm pods running and waiting")
    before = {pod.metadata.name for pod in first}

    names = ("a", "b", "c")
    for name in names:
        tasks.create(name, {"prompt": "Say hello.", "agentRef": {"name": "greeter"},
                            "script": {"default": f"Hello from {name}."}})
    wait_for(lambda: all(phase(tasks, name) == "Idle" for name in names), timeout=180, interval=0.2,
             what="the three tasks answered")

    runs: dict[str, list[Any]] = {name: [] for name in names}
    for job in tasks.jobs():
        task = (job.metadata.labels or {}).get(TASK_LABEL)
        if task in runs:
            runs[task].append(job)
    assert all(len(jobs) == 1 for jobs in runs.values()), {k: [j.metadata.name for j in v] for k, v in runs.items()}
    warm = {name: jobs[0] for name, jobs in runs.items() if (jobs[0].metadata.labels or {}).get(POOL_LABEL)}
    assert len(warm) == 2, sorted(warm)
    (cold,) = set(names) - set(warm)
    assert runs[cold][0].metadata.name == f"{cold}-t1"  # the cold path's deterministic Job
    pods_by_job = {(p.metadata.labels or {}).get("job-name"): p for p in tasks.pods()}
    for name, job in warm.items():
        pod = pods_by_job[job.metadata.name]
        assert pod.metadata.name in before  # the turn ran in a pod that was waiting before the task existed
        created = (tasks.get(name) or {})["metadata"]["creationTimestamp"]
        assert pod.metadata.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ") <= created
        assert (pod.metadata.labels or {}).get("unicore.dev/turn") == "1"

    for name in names:  # each answered once
        assert answers(redis_client, f"{k8s_namespace}/{name}") == [f"Hello from {name}."]
    from unicore.store.keys import METRICS_HISTOGRAMS

    started = redis_client.hgetall(METRICS_HISTOGRAMS)  # the turns' own measure of their start, by kind
    assert (started["turn_start_seconds|start=warm|count"], started["turn_start_seconds|start=cold|count"]) == (
        "2", "1")

    refilled = wait_for(lambda: (found := idle_warm_pods(tasks, redis_client)) and len(found) == 2 and found,
                        timeout=180, interval=0.2, what="the pool refilled")
    assert not {pod.metadata.name for pod in refilled} & before  # new pods: each warm pod runs one turn

    # a task whose spec changes its pod (its own memory limit) never takes a pod of the pool's template, waiting as
    # they are
    tasks.create("d", {"prompt": "Say hello.", "agentRef": {"name": "greeter"},
                       "resources": {"limits": {"memory": "700Mi"}}, "script": {"default": "Hello from d."}})
    wait_for(lambda: phase(tasks, "d") == "Idle", timeout=180, interval=0.2, what="task d answered")
    ran = [job for job in tasks.jobs() if (job.metadata.labels or {}).get(TASK_LABEL) == "d"]
    assert [job.metadata.name for job in ran] == ["d-t1"], ran  # the cold path
    assert {pod.metadata.name for pod in idle_warm_pods(tasks, redis_client)} == {
        pod.metadata.name for pod in refilled}


def test_an_operator_killed_between_the_assignment_and_the_labels_still_runs_the_turn_once_in_the_warm_pod(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    first = start_operator(UNICORE_FAULTS="kill:after warm assign")
    create_greeter(crd, k8s_namespace, pool=1)
    (pod,) = wait_for(lambda: (found := idle_warm_pods(tasks, redis_client)) and found, timeout=180, interval=0.2,
                      what="a warm pod running and waiting")
    tasks.create("k", {"prompt": "Say hello.", "agentRef": {"name": "greeter"}, "script": {"default": "Hello."}})
    assert first.proc is not None
    wait_for(lambda: first.proc is not None and first.proc.poll() is not None, timeout=120,
             what="the operator to die right after the assignment")
    assert warm_pods.holder(redis_client, k8s_namespace, "k-t1") == pod.metadata.name

    start_operator()  # the next operator finishes the assignment; it makes no cold Job for the turn
    wait_for(lambda: phase(tasks, "k") == "Idle", timeout=180, interval=0.2, what="the task answered")
    ran = [job for job in tasks.jobs() if (job.metadata.labels or {}).get(TASK_LABEL) == "k"]
    assert [(job.metadata.labels or {}).get(POOL_LABEL) for job in ran] == ["greeter"], ran
    assert "k-t1" not in {job.metadata.name for job in tasks.jobs()}
    assert answers(redis_client, f"{k8s_namespace}/k") == ["Hello."]


def test_a_warm_pod_killed_during_its_turn_is_a_failed_attempt_and_the_turn_runs_again_once(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    from unicore.store.gates import open_gate

    start_operator()
    create_greeter(crd, k8s_namespace, pool=1)
    wait_for(lambda: idle_warm_pods(tasks, redis_client), timeout=180, interval=0.2, what="a warm pod that waits")
    # the turn holds its model call at a gate until the test opens it
    tasks.create("g", {"prompt": "Say hello.", "agentRef": {"name": "greeter"},
                       "script": {"tasks": {"g": [{"gate": "go", "timeout": 240, "text": "Hello from g."}]}}})
    pod = wait_for(lambda: next((p for p in tasks.pods() if (p.metadata.labels or {}).get(TASK_LABEL) == "g"
                                 and (p.metadata.labels or {}).get(POOL_LABEL)), None),
                   timeout=120, interval=0.2, what="the warm pod that took g's turn")
    tasks.core.delete_namespaced_pod(pod.metadata.name, k8s_namespace, grace_period_seconds=0)
    wait_for(lambda: int(((tasks.get("g") or {}).get("status") or {}).get("failedAttempts") or 0) >= 1,
             timeout=120, interval=0.2, what="the killed turn counted as a failed attempt")
    open_gate(redis_client, f"{k8s_namespace}/g", "go")
    wait_for(lambda: phase(tasks, "g") == "Idle", timeout=180, interval=0.2, what="g answered after the retry")
    assert answers(redis_client, f"{k8s_namespace}/g") == ["Hello from g."]  # once
    ran = {job.metadata.name: job for job in tasks.jobs() if (job.metadata.labels or {}).get(TASK_LABEL) == "g"}
    assert len(ran) == 2, sorted(ran)  # the killed warm Job and the retry (attempt 1: a warm pod or g-t1-r1)
    assert sorted((job.metadata.labels or {}).get("unicore.dev/attempt") for job in ran.values()) == ["0", "1"]


def test_a_warm_pod_killed_while_it_waits_is_replaced_and_forgotten(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    from unicore.store.keys import warm_pod_key

    start_operator()
    create_greeter(crd, k8s_namespace, pool=1)
    (killed,) = wait_for(lambda: idle_warm_pods(tasks, redis_client), timeout=180, interval=0.2,
                         what="a warm pod that waits")
    tasks.core.delete_namespaced_pod(killed.metadata.name, k8s_namespace, grace_period_seconds=0)
    fresh = wait_for(lambda: [p for p in idle_warm_pods(tasks, redis_client)
                              if p.metadata.name != killed.metadata.name], timeout=180, interval=0.2,
                     what="the pool's new warm pod")
    wait_for(lambda: not redis_client.exists(warm_pod_key(k8s_namespace, killed.metadata.name)), timeout=60,
             what="the killed pod's record forgotten")
    tasks.create("h", {"prompt": "Say hello.", "agentRef": {"name": "greeter"}, "script": {"default": "Hello."}})
    wait_for(lambda: phase(tasks, "h") == "Idle", timeout=180, interval=0.2, what="h answered")
    (job,) = [j for j in tasks.jobs() if (j.metadata.labels or {}).get(TASK_LABEL) == "h"]
    assert (job.metadata.labels or {}).get(POOL_LABEL) == "greeter"  # the new warm pod took it
    assert answers(redis_client, f"{k8s_namespace}/h") == ["Hello."]
    assert killed.metadata.name not in {pod.metadata.name for pod in fresh}


def test_a_queued_agents_warm_jobs_are_admitted_by_kueue_before_they_wait_and_hold_its_quota(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
    kueue: Any,
) -> None:
    from unicore_devcluster import kueue as kq

    kueue.ensure_queues(k8s_namespace, gpus=1)
    start_operator()
    create_greeter(crd, k8s_namespace, pool=2, gpus=1, queueName=kq.LOCAL_QUEUE)

    def warm_jobs() -> list[Any]:
        return [job for job in tasks.jobs() if (job.metadata.labels or {}).get(POOL_LABEL)
                and not (job.metadata.labels or {}).get(TASK_LABEL)]

    def one_waits_one_queued() -> list[Any] | None:
        jobs, waiting = warm_jobs(), idle_warm_pods(tasks, redis_client)
        held = [job for job in jobs if job.spec.suspend]
        return waiting if len(jobs) == 2 and len(held) == 1 and len(waiting) == 1 else None

    (waiting,) = wait_for(one_waits_one_queued, timeout=180, interval=0.2,
                          what="one warm pod admitted and waiting, the other warm Job held by the 1-GPU queue")
    (held,) = [job.metadata.name for job in warm_jobs() if job.spec.suspend]
    assert all((job.metadata.labels or {}).get("kueue.x-k8s.io/queue-name") == kq.LOCAL_QUEUE for job in warm_jobs())

    tasks.create("q", {"prompt": "Say hello.", "agentRef": {"name": "greeter"}, "script": {"default": "Hello."}})
    wait_for(lambda: phase(tasks, "q") == "Idle", timeout=180, interval=0.2, what="q answered")
    (ran,) = [job for job in tasks.jobs() if (job.metadata.labels or {}).get(TASK_LABEL) == "q"]
    assert ran.metadata.name == (waiting.metadata.labels or {}).get("job-name")  # the admitted warm pod took it
    assert answers(redis_client, f"{k8s_namespace}/q") == ["Hello."]

    # the turn's end frees the GPU: the held warm Job is admitted and its pod waits; the refill is held in turn
    (next_pod,) = wait_for(lambda: (found := idle_warm_pods(tasks, redis_client)) and found, timeout=180,
                           interval=0.2, what="the held warm Job admitted and its pod waiting")
    assert (next_pod.metadata.labels or {}).get("job-name") == held
    wait_for(lambda: [job.metadata.name for job in warm_jobs() if job.spec.suspend and job.metadata.name != held],
             timeout=120, interval=0.2, what="the pool's new warm Job held by the queue")


def test_a_warm_pod_that_hangs_is_offered_no_turn_and_is_replaced(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    from unicore.store.keys import warm_pod_key

    from tests.cluster.real_node import kill_pod_container

    start_operator(UNICORE_HEARTBEAT_TIMEOUT_SECONDS="5")
    create_greeter(crd, k8s_namespace, pool=1)
    (hung,) = wait_for(lambda: idle_warm_pods(tasks, redis_client), timeout=180, interval=0.2,
                       what="a warm pod that waits")
    kill_pod_container(crd, tasks.core, k8s_namespace, hung.metadata.name, "SIGSTOP")  # frozen, still Running
    wait_for(lambda: not redis_client.exists(warm_pod_key(k8s_namespace, hung.metadata.name)), timeout=60,
             what="the frozen pod's record to expire (it renews it no more)")
    tasks.create("s", {"prompt": "Say hello.", "agentRef": {"name": "greeter"}, "script": {"default": "Hello."}})
    wait_for(lambda: phase(tasks, "s") == "Idle", timeout=180, interval=0.2, what="s answered")
    assert answers(redis_client, f"{k8s_namespace}/s") == ["Hello."]
    status = (tasks.get("s") or {}).get("status") or {}
    assert not status.get("failedAttempts"), status  # the frozen pod never got the turn
    hung_job = (hung.metadata.labels or {}).get("job-name")
    (ran,) = [job for job in tasks.jobs() if (job.metadata.labels or {}).get(TASK_LABEL) == "s"]
    assert ran.metadata.name != hung_job
    wait_for(lambda: hung_job not in {job.metadata.name for job in tasks.jobs()
                                      if not job.metadata.deletion_timestamp},
             timeout=60, what="the frozen pod's warm Job replaced")
    wait_for(lambda: [p for p in idle_warm_pods(tasks, redis_client) if p.metadata.name != hung.metadata.name],
             timeout=180, interval=0.2, what="a new warm pod waiting in its place")


def test_redis_restarted_while_a_warm_pod_waits_and_while_one_runs_a_turn_loses_and_repeats_nothing(
    crd: Any, tasks: Tasks, k8s_namespace: str, tmp_path: Path,
) -> None:
    from unicore.store.gates import open_gate
    from unicore_devcluster.node_host import node_ip

    from tests.cluster.real_node import NodeRedis

    host = node_ip()
    assert host is not None
    server = NodeRedis(host, appendfsync="always")  # Redis as the chart runs it: from its AOF after a crash
    store = redis.Redis.from_url(server.url, decode_responses=True)
    env = {"UNICORE_DEFAULT_GPUS": "0", "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1"}

    def restart_once_noticed(pod: str) -> None:
        run_id = store.info("server")["run_id"]
        server.crash()
        try:
            wait_for(lambda: "Redis unavailable" in tasks.core.read_namespaced_pod_log(pod, k8s_namespace),
                     timeout=30, interval=0.2, what=f"pod {pod} to find Redis down")
        finally:
            server.start()
        assert store.info("server")["run_id"] != run_id

    try:
        with operator_factory(crd, k8s_namespace, server.url, tmp_path, env=env, pod_logs=True) as start:
            start()
            create_greeter(crd, k8s_namespace, pool=1)
            (waiting,) = wait_for(lambda: idle_warm_pods(tasks, store), timeout=180, interval=0.2,
                                  what="a warm pod that waits")
            restart_once_noticed(waiting.metadata.name)
            # it rides out the outage (its namespace's Redis user, dropped with the restart, is applied again)
            wait_for(lambda: [p.metadata.name for p in idle_warm_pods(tasks, store)] == [waiting.metadata.name],
                     timeout=60, interval=0.2, what="the same warm pod waiting again")

            tasks.create("g", {"prompt": "Say hello.", "agentRef": {"name": "greeter"},
                               "script": {"tasks": {"g": [{"gate": "go", "timeout": 240, "text": "Hello from g."}]}}})
            wait_for(lambda: store.exists(f"uc:{{{k8s_namespace}/g}}:lease"), timeout=120, interval=0.2,
                     what="g's turn running in the warm pod")
            restart_once_noticed(waiting.metadata.name)  # mid-turn: its model call waits at the gate
            open_gate(store, f"{k8s_namespace}/g", "go")
            wait_for(lambda: phase(tasks, "g") == "Idle", timeout=180, interval=0.2, what="g answered")

            assert answers(store, f"{k8s_namespace}/g") == ["Hello from g."]  # once
            status = (tasks.get("g") or {}).get("status") or {}
            assert not status.get("failedAttempts"), status  # the turn outlived both outages
            (ran,) = [job for job in tasks.jobs() if (job.metadata.labels or {}).get(TASK_LABEL) == "g"]
            assert ran.metadata.name == (waiting.metadata.labels or {}).get("job-name")  # the pod that waited
            pod = tasks.core.read_namespaced_pod(waiting.metadata.name, k8s_namespace)
            assert pod.status.container_statuses[0].restart_count == 0
    finally:
        store.close()
        server.stop()


def test_the_operators_pool_serves_tasks_without_an_agent_and_empties_when_the_setting_drops_it(
    start_operator: StartOperator, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    import json

    first = start_operator(UNICORE_WARM_POOLS=json.dumps({k8s_namespace: 1}))
    (waiting,) = wait_for(lambda: idle_warm_pods(tasks, redis_client), timeout=180, interval=0.2,
                          what="the namespace's warm pod for tasks without an Agent")
    assert (waiting.metadata.labels or {}).get(POOL_LABEL) == "no_agent"
    tasks.create("p", {"prompt": "Say hello.", "model": "scripted", "gpus": 0, "script": {"default": "Hello."}})
    wait_for(lambda: phase(tasks, "p") == "Idle", timeout=180, interval=0.2, what="p answered")
    (ran,) = [job for job in tasks.jobs() if (job.metadata.labels or {}).get(TASK_LABEL) == "p"]
    assert ran.metadata.name == (waiting.metadata.labels or {}).get("job-name")  # it waited before p existed
    assert answers(redis_client, f"{k8s_namespace}/p") == ["Hello."]
    wait_for(lambda: idle_warm_pods(tasks, redis_client), timeout=180, interval=0.2, what="the pool refilled")

    first.stop()
    start_operator()  # the setting no longer names the namespace: its idle warm Jobs go
    wait_for(lambda: not [job for job in tasks.jobs() if (job.metadata.labels or {}).get(POOL_LABEL)
                          and not (job.metadata.labels or {}).get(TASK_LABEL) and not job.metadata.deletion_timestamp],
             timeout=60, interval=0.2, what="the idle warm Jobs deleted")
