"""Operator lifecycle on the real control plane with the real node (turn pods are containers under the kubelet, which
stops them with SIGTERM when their Job goes): suspend/resume, SIGKILL restart, deleting a tree."""

from __future__ import annotations

import pytest
import redis
from unicore.api.schema import InboxMessage
from unicore.store.gates import open_gate
from unicore.store.tasks import TaskStore

from tests.cluster.operator_harness import (
    GATE,
    OperatorProcess,
    Tasks,
    gated_script,
    running_pods,
)
from tests.cluster.test_operator import role_texts, settled
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

SETTLE = 180.0


def test_suspend_during_a_long_turn_then_resume(
    operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    tid = f"{k8s_namespace}/slow"
    # its model call lasts until the gate opens, after the suspend: the turn is stopped inside it
    tasks.create("slow", {"prompt": "take your time", "gpus": 0, "script": gated_script("slow")})
    wait_for(lambda: running_pods(tasks) and redis_client.exists(f"uc:{{{tid}}}:lease"), timeout=60,
             what="the turn process to run")
    first_job = tasks.get("slow")["status"]["activeJob"]  # type: ignore[index]
    assert first_job

    tasks.patch("slow", {"suspend": True})
    wait_for(lambda: tasks.phase("slow") == "Suspended", timeout=60, what="phase Suspended")
    wait_for(lambda: not tasks.jobs(), timeout=60, what="the turn Job to be deleted")
    wait_for(lambda: not running_pods(tasks) and not redis_client.exists(f"uc:{{{tid}}}:lease"), timeout=60,
             what="the turn process to stop and release its lease")
    assert not redis_client.hget(f"uc:{{{tid}}}:turnmeta", "1:ended_at")  # the interrupted turn stays open
    wait_for(lambda: tasks.get("slow")["status"]["activeJob"] == "", timeout=30,  # type: ignore[index]
             what="status.activeJob to be cleared")
    assert not tasks.jobs()  # suspended: nothing new is started

    open_gate(redis_client, tid, GATE)  # the resumed turn's model call answers at once
    tasks.patch("slow", {"suspend": False})
    wait_for(lambda: tasks.phase("slow") == "Idle", timeout=SETTLE, what="the resumed turn to finish")
    assert "take your time" in "\n".join(role_texts(redis_client, tid, "user"))
    assert role_texts(redis_client, tid, "user").count("take your time") == 1
    assert role_texts(redis_client, tid, "assistant")[-1] == "Slow answer."
    assert redis_client.llen(f"uc:{{{tid}}}:inbox") == 0


def test_operator_sigkill_mid_turn_and_restart(
    operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    tid = f"{k8s_namespace}/steady"
    # its first model call lasts until the gate opens, after the operator's restart: the turn runs throughout
    tasks.create("steady", {"prompt": "count to three", "gpus": 0, "script": gated_script("steady")})
    wait_for(lambda: running_pods(tasks) and role_texts(redis_client, tid, "user") == ["count to three"], timeout=60,
             what="the first turn to have drained its prompt")
    operator.kill()
    store = TaskStore(redis_client)  # a follow-up arrives while the operator is down (activation included)
    store.queue_message(tid, InboxMessage(id="follow-1", type="user", content="and now to four"))
    store.activate(tid, "message")
    operator.start()
    open_gate(redis_client, tid, GATE)

    def both_turns_done() -> bool:
        status = (tasks.get("steady") or {}).get("status") or {}
        return status.get("phase") == "Idle" and status.get("turns") == 2

    wait_for(both_turns_done, timeout=SETTLE, what=f"both turns to finish ({tasks.get('steady')})")
    jobs = sorted(job.metadata.name for job in tasks.jobs())
    assert jobs == ["steady-t1", "steady-t2"]
    status = tasks.get("steady")["status"]  # type: ignore[index]
    assert status["turns"] == 2 and status["activeJob"] == "" and status["failedAttempts"] == 0
    texts = role_texts(redis_client, tid, "user")
    assert texts.count("count to three") == 1 and texts.count("and now to four") == 1
    assert role_texts(redis_client, tid, "assistant") == ["Slow answer.", "and now to four"]


def test_delete_the_root_removes_the_whole_tree(
    operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    script = {"tasks": {
        "tree": [{"tool_use": [{"name": "spawn_task", "input": {"name": "a", "prompt": "go"}}]},
                 {"text": "waiting"}, {"echo": True}],
        "tree-a": [{"tool_use": [{"name": "spawn_task", "input": {"name": "b", "prompt": "deeper"}}]},
                   {"text": "waiting too"}, {"echo": True}],
    }}
    tasks.create("tree", {"prompt": "build a tree", "gpus": 0, "script": script})
    wait_for(lambda: settled(tasks, 3), timeout=SETTLE, what=f"3 Idle tasks (have {tasks.all_phases()})")
    assert redis_client.keys(f"uc:{{{k8s_namespace}/tree*")
    tasks.delete("tree")
    wait_for(lambda: not tasks.all(), timeout=90, what="every AgentTask of the tree to be gone")
    wait_for(lambda: not tasks.jobs() and not tasks.pods(), timeout=90, what="Jobs and pods to be gone")
    wait_for(lambda: not redis_client.keys(f"uc:{{{k8s_namespace}/tree*"), timeout=30,
             what="the tree's Redis keys to be gone")
