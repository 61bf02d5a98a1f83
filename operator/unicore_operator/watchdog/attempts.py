"""Which turn attempt a reap counts as failed (pure): the watchdog records one failure per attempt, under the name of
the attempt's Job, where the Job's own outcome is recorded too (see ``scan``'s module docstring)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from unicore_operator.watchdog.views import JobView, PodView


@dataclass(frozen=True, slots=True)
class Attempt:
    """A turn attempt: its Job's name and turn; ``ended`` when the Job shows its end (finished or being deleted),
    so the operator's Job path records that end itself."""

    job: str
    turn: int
    ended: bool = False


def turn_attempt(holder: str, task_id: str, pods: Mapping[str, PodView], jobs: Mapping[str, JobView]
                 ) -> Attempt | None:
    """The turn attempt whose process is ``holder`` (``<pod name>:<pid>``, see
    ``unicore.store.task_leases._holder_id``).

    The pod's ``job-name`` label when the pod is cached, else the Job named like the pod without its generated
    suffix (the Job controller names pods ``<job>-<5 chars>``); None when neither is a Job of ``task_id``."""
    pod_name = holder.split(":", 1)[0]
    if not pod_name:
        return None
    namespace = task_id.split("/", 1)[0]
    pod = pods.get(f"{namespace}/{pod_name}")
    job_name = pod.job_name if pod is not None and pod.job_name else pod_name.rsplit("-", 1)[0]
    job = jobs.get(f"{namespace}/{job_name}")
    if job is not None and job.task_id == task_id:
        return Attempt(job.name, job.turn or (pod.turn if pod else 0), ended=job.finished or job.deleting)
    if pod is not None and pod.job_name:
        return Attempt(pod.job_name, pod.turn)
    return None
