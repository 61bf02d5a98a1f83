"""Traces on the real node (issue 32): a 3-level tree of AgentTasks, each turn a real container under the kubelet, is
one trace in a real Jaeger whose span tree is the task tree: spawn -> child turns (their AgentTasks carry the spawn
call in an annotation) -> report -> parent turn. A turn container SIGKILLed from outside Kubernetes mid-turn shows as
a lost attempt under the same id its exported children name, then its retry; nothing is orphaned. The operator adds
each cold turn's Job schedule wait and pod start, and the AgentTask's status links to the trace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from unicore.store.gates import open_gate
from unicore.store.tasks import TaskStore
from unicore_client.traces.jaeger import JaegerServer
from unicore_devcluster.node_host import node_ip

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory
from tests.cluster.real_node import container_id, kill_container
from tests.jaeger_binary import jaeger_binary
from tests.trace_tree import (
    AGENT_ATTRIBUTES,
    CHAT_ATTRIBUTES,
    LEAF,
    MID,
    ROOT,
    TOOL_ATTRIBUTES,
    TraceTree,
    missing,
    three_level_script,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

SCRIPT = three_level_script({"gate": "killed", "text": "Leaf: 42."})


@pytest.fixture
def jaeger() -> Iterator[JaegerServer]:
    host = node_ip()
    assert host is not None, "no node IP for a Jaeger the real node's pods reach"
    with JaegerServer(jaeger_binary(), host=host) as server:
        yield server


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path,
                   jaeger: JaegerServer) -> Iterator[StartOperator]:
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}
    env = {**tracing, "UNICORE_AGENT_EXTRA_ENV": json.dumps(tracing), "UNICORE_DEFAULT_GPUS": "0",
           "UNICORE_TRACE_URL": f"{jaeger.query_url}/trace/{{trace_id}}", "UNICORE_TURN_RETRY_BACKOFF_SECONDS": "1",
           "UNICORE_WATCHDOG_INTERVAL_SECONDS": "1"}
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env=env, pod_logs=True) as start:
        yield start


def _status(tasks: Tasks, name: str) -> dict[str, Any]:
    return dict((tasks.get(name) or {}).get("status") or {})


def test_a_tree_of_real_turn_pods_is_one_trace_shaped_like_the_tree_across_a_killed_container(
    start_operator: StartOperator, tasks: Tasks, crd: Any, redis_client: redis.Redis, k8s_namespace: str,
    jaeger: JaegerServer,
) -> None:
    start_operator()
    ns = k8s_namespace
    tasks.create(ROOT, {"prompt": "Start.", "model": "scripted", "script": SCRIPT})
    leaf_id = f"{ns}/{LEAF}"

    def leaf_mid_turn() -> Any:
        if not redis_client.exists(f"uc:{{{leaf_id}}}:lease"):
            return None
        running = [p for p in tasks.pods() if p.metadata.labels.get("job-name", "").startswith(f"{LEAF}-t")
                   and p.status.phase == "Running" and container_id(p)]
        return running[0] if running else None

    pod = wait_for(leaf_mid_turn, timeout=180, interval=0.2, what="the leaf's turn container inside its model call")
    store = TaskStore(redis_client)
    trace_id = store.get_task(leaf_id).trace_id

    def drain_exported() -> bool | None:  # the attempt's own steps reached Jaeger (its batch went out) before the kill
        trace = jaeger.get_trace(trace_id)
        names = {span.name for span in TraceTree(trace).spans.values()
                 if span.tags.get("unicore.task.id") == leaf_id} if trace is not None else set()
        return names >= {"inbox_drain", "queue_wait"} or None

    wait_for(drain_exported, timeout=60, what="the leaf attempt's inbox_drain and queue_wait spans in Jaeger")
    kill_container(crd, container_id(pod))
    # the retry waits at the same gate once the first attempt's end is recorded
    wait_for(lambda: _status(tasks, LEAF).get("failedAttempts") == 1 or None, timeout=90,
             what="the killed attempt recorded")
    open_gate(redis_client, leaf_id, "killed")
    wait_for(lambda: _status(tasks, MID).get("turns") == 2 and _status(tasks, MID).get("phase") == "Idle" or None,
             timeout=180, what="mid's second turn (after the leaf's report)")

    trace_ids = {store.get_task(f"{ns}/{name}").trace_id for name in (ROOT, MID, LEAF)}
    assert len(trace_ids) == 1 and "" not in trace_ids, trace_ids
    (trace_id,) = trace_ids
    status = wait_for(lambda: _status(tasks, ROOT).get("trace"), timeout=30, what="status.trace")
    assert status == {"id": trace_id, "url": jaeger.trace_url(trace_id)}

    def complete() -> TraceTree | None:
        trace = jaeger.get_trace(trace_id)
        tree = TraceTree(trace) if trace else None
        if not tree or len(tree.turns(f"{ns}/{MID}")) != 2 or len(tree.turns(leaf_id)) != 2:
            return None
        if not any(tree.turns(f"{ns}/{MID}")[1].id in turn.links for turn in tree.turns(f"{ns}/{ROOT}")):
            return None
        return tree if len(tree.named("pod_start")) >= 5 else None

    tree = wait_for(complete, timeout=90, what="every turn's span and the operator's pod starts in Jaeger")
    assert not tree.orphans() and not tree.foreign, tree.outline()
    (root_task,) = tree.roots()
    assert root_task.name == f"task {ROOT}", tree.outline()
    root_turns, mid_turns, leaf_turns = (tree.turns(f"{ns}/{name}") for name in (ROOT, MID, LEAF))
    assert {tree.parent(t).id for t in root_turns} == {root_task.id}, tree.outline()
    for turns, spawner in ((mid_turns, root_turns[0]), (leaf_turns, mid_turns[0])):
        for turn in turns:
            spawn = tree.parent(turn)
            assert spawn.name == "execute_tool spawn_task" and tree.parent(spawn).id == spawner.id, tree.outline()
    lost, retry = leaf_turns
    assert lost.failed and lost.tags.get("error.type") == "TurnLost", lost.tags
    assert not retry.failed and retry.tags.get("unicore.turn.number") == 1, retry.tags
    # the killed attempt had exported its own steps (the gate held it long enough): they hang under the lost span
    assert {span.name for span in tree.within(lost)} >= {"queue_wait", "inbox_drain"}, tree.outline()
    assert retry.id in mid_turns[1].links and mid_turns[1].id in root_turns[-1].links, tree.outline()
    for turn in root_turns + mid_turns + leaf_turns:
        assert not missing(turn, AGENT_ATTRIBUTES), turn.tags
        assert turn.tags["gen_ai.conversation.id"] == f"{ns}/{ROOT}"
    for chat in tree.prefixed("chat "):
        assert not missing(chat, CHAT_ATTRIBUTES), chat.tags
    for tool in tree.prefixed("execute_tool "):
        assert not missing(tool, TOOL_ATTRIBUTES), tool.tags
    # the operator's view of each cold turn: its Job's schedule wait, then its pod's start, under the task's anchor
    for start in tree.named("pod_start"):
        assert start.tags.get("k8s.job.name") and start.tags.get("k8s.pod.name"), start.tags
        anchor = tree.parent(start)
        assert anchor.name in (f"task {ROOT}", "execute_tool spawn_task"), tree.outline()
    assert len(tree.named("job_schedule")) == len(tree.named("pod_start"))
