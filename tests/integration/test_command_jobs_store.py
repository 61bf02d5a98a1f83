"""Command Jobs in Redis (submit_job, issue 29) against a real redis-server: a request is fenced by the turn's lease,
a result reaches the task's inbox once however often it is delivered, and while a job is outstanding with nothing
queued the task waits with no turn (the shared scheduling decision, as local mode reads it)."""

from __future__ import annotations

import pytest
from unicore.api.schema import TaskSpec
from unicore.errors import LeaseLost
from unicore.scheduling import Reason, next_action
from unicore.store import command_jobs
from unicore.store.command_jobs import JobOutcome
from unicore.store.scheduling_reads import read_observation
from unicore.store.tasks import TaskStore


def test_a_request_waits_and_its_result_comes_once(store: TaskStore) -> None:
    store.create_task(TaskSpec(id="trainer", prompt="train", model="scripted"))
    lease = store.acquire_lease("trainer")
    n = command_jobs.request_job(store, lease, {"command": "python train.py", "image": None, "gpus": 1,
                                                "timeout_seconds": 600, "turn": 0})
    assert n == 1
    assert command_jobs.request_job(store, lease, {"command": "echo two", "gpus": 0, "timeout_seconds": 5}) == 2
    store.release_lease(lease)
    store.redis.delete("uc:{trainer}:inbox")  # the prompt: as if the turn that submitted had drained it
    [first, second] = command_jobs.job_states(store, "trainer")
    assert (first.request.command, first.request.gpus, first.created, first.ended) == ("python train.py", 1, None,
                                                                                      None)
    observed = read_observation(store.redis, "trainer")
    assert observed.jobs_outstanding == 2 and observed.queued == 0
    assert next_action(observed).reason is Reason.WAITING_FOR_JOBS and not next_action(observed).run_turn

    command_jobs.mark_created(store, "trainer", 1, "uid-1")
    outcome = JobOutcome("succeeded", exit_code=0, duration_seconds=12.0, log_tail="loss 0.1\n")
    assert command_jobs.deliver_result(store, "trainer", "trainer-j1", first.request, outcome) is True
    assert command_jobs.deliver_result(store, "trainer", "trainer-j1", first.request, outcome) is False  # once
    [entry] = store.inbox("trainer")
    assert entry.type == "completion" and entry.sender == "job:trainer-j1"
    assert "ended: succeeded, exit code 0, after 12 s" in entry.content and "loss 0.1" in entry.content
    observed = read_observation(store.redis, "trainer")
    assert observed.jobs_outstanding == 1 and next_action(observed).run_turn  # the result gives it a turn
    states = command_jobs.job_states(store, "trainer")
    assert states[0].ended == {"state": "succeeded", "exit_code": 0, "reason": "", "duration_seconds": 12.0}
    assert [s.request.n for s in command_jobs.outstanding(states)] == [2]


def test_a_turn_that_lost_its_lease_requests_nothing(store: TaskStore) -> None:
    store.create_task(TaskSpec(id="zombie", prompt="go", model="scripted"))
    old = store.acquire_lease("zombie", ttl_ms=50)
    store.release_lease(old)
    store.acquire_lease("zombie")  # a newer turn holds it now
    with pytest.raises(LeaseLost):
        command_jobs.request_job(store, old, {"command": "rm -rf /workspace", "gpus": 0, "timeout_seconds": 5})
    assert command_jobs.job_states(store, "zombie") == []
