"""Large AgentTask specs on the real local control plane (issue 25, 7): a prompt the CRD admits (it counts characters)
but the runtime cannot queue (its cap counts the stored message's bytes) is Failed saying so, not Ready and Idle
forever; a 1.4 MB spec.script runs and Kopf's bookkeeping annotation stays small (it was patched with the whole
script and refused with 422 on every event), and Kopf still handles later changes."""

from __future__ import annotations

import pytest
import redis
from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES
from unicore.store.keys import TaskKeys

from tests.cluster.operator_harness import OperatorProcess, Tasks, task_events
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

SETTLE = 180.0
LAST_HANDLED = "unicore.dev/last-handled-configuration"


def test_a_prompt_over_the_byte_cap_is_failed_with_the_reason(
    operator: OperatorProcess, tasks: Tasks, redis_client: redis.Redis, k8s_namespace: str,
) -> None:
    tasks.create("wide", {"prompt": "\u00e9" * 200_000})  # 200000 characters (the CRD's cap: 262144), 400000 bytes
    wait_for(lambda: tasks.phase("wide") == "Failed", timeout=60, what="the task Failed")
    status = (tasks.get("wide") or {}).get("status") or {}
    assert "spec.prompt cannot be queued" in status["message"], status
    assert f"over the cap of {DEFAULT_MESSAGE_CAP_BYTES} bytes" in status["message"]
    (event,) = task_events(tasks, "wide", "InvalidSpec")
    assert "spec.prompt cannot be queued" in event.message
    assert tasks.jobs() == [] and not redis_client.exists(TaskKeys(f"{k8s_namespace}/wide").task)  # nothing stored


def test_a_large_script_runs_and_kopf_keeps_handling_the_task(
    operator: OperatorProcess, tasks: Tasks, k8s_namespace: str,
) -> None:
    script = {"default": "done", "tasks": {"big": [{"text": "The big script answered."}],
                                           "padding-*": [{"text": "x" * 1_400_000}]}}
    tasks.create("big", {"prompt": "hello", "model": "scripted", "script": script})
    wait_for(lambda: tasks.phase("big") == "Idle", timeout=SETTLE, what="the task with a 1.4 MB script Idle")

    def stored() -> str | None:
        return (((tasks.get("big") or {}).get("metadata") or {}).get("annotations") or {}).get(LAST_HANDLED)

    annotation = wait_for(stored, timeout=60, what="Kopf's last-handled-configuration")
    assert len(annotation) < 4096 and "unicore-digest:sha256:" in annotation, annotation[:300]
    tasks.patch("big", {"suspend": True})  # a change Kopf must still see (the spec.suspend handler)
    wait_for(lambda: tasks.phase("big") == "Suspended", timeout=60, what="the task Suspended")
    log = operator.log(lines=100_000)
    assert "Too long" not in log and "Unprocessable" not in log, log[-3000:]
