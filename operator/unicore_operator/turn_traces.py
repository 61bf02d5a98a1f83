"""The spans only the operator can see of a turn (``unicore.traces``): its Job's wait to be scheduled (queue
admission, pod creation, the scheduler) and its pod's start (image, sandbox, the workbench), from the Job's and the
pod's timestamps, emitted once when the Job's end is recorded, under the task's anchor in its tree's trace. A warm
pod's start was before its turn existed: it has none."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from unicore.traces import genai, spans

from unicore_operator.watchdog.views import PodView, parse_time

JOB_SCHEDULE = "job_schedule"


def start_spans(job: Mapping[str, Any], pod: PodView | None) -> list[tuple[str, float, float]]:
    """(name, start, end) of the Job's schedule wait and its pod's start, as far as their timestamps go (pure)."""
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    if pod is None or pod.assigned_at is not None or created is None:
        return []
    found: list[tuple[str, float, float]] = []
    if pod.scheduled_at is not None:
        found.append((JOB_SCHEDULE, created, max(created, pod.scheduled_at)))
        if pod.started_at is not None:
            found.append((genai.POD_START, pod.scheduled_at, max(pod.scheduled_at, pod.started_at)))
    return found


def the_pod(pods: Iterable[PodView] | None, job: str) -> PodView | None:
    """The Job's pod that ran (the newest of its pods)."""
    mine = [pod for pod in pods or () if pod.job_name == job]
    return max(mine, key=lambda pod: pod.created_at) if mine else None


def emit_start_spans(job: Mapping[str, Any], pod: PodView | None, trace_parent: str, task_id: str,
                     turn: int) -> int:
    """Emit ``start_spans`` under ``trace_parent`` (nothing while tracing is off or the task has no trace); how many."""
    if not spans.active() or spans.parse(trace_parent) is None:
        return 0
    found = start_spans(job, pod)
    for name, start, end in found:
        spans.emit(name, start=start, end=end, parent=trace_parent,
                   attributes={genai.TASK_ID: task_id, genai.TURN_NUMBER: turn,
                               "k8s.job.name": str((job.get("metadata") or {}).get("name") or ""),
                               "k8s.pod.name": pod.name if pod is not None else None})
    return len(found)


__all__ = ["JOB_SCHEDULE", "emit_start_spans", "start_spans", "the_pod"]
