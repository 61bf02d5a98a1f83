"""The pods/status bodies the pod runner reports for a pod it runs: Running, waiting to restart
(CrashLoopBackOff), terminated (Succeeded or Failed with the exit code), or failed before its process started."""

from __future__ import annotations

from typing import Any

from unicore_devcluster.pod_process import PodProcess, now
from unicore_devcluster.podenv import PodSetupError


def conditions(ready: bool, reason: str | None = None) -> list[dict[str, Any]]:
    stamp = now()
    out = []
    for kind, value in (
        ("PodReadyToStartContainers", True),
        ("Initialized", True),
        ("ContainersReady", ready),
        ("Ready", ready),
    ):
        cond: dict[str, Any] = {
            "type": kind,
            "status": "True" if value else "False",
            "lastTransitionTime": stamp,
        }
        if not value and reason:
            cond["reason"] = reason
        out.append(cond)
    return out


def base_status(tracked: PodProcess) -> dict[str, Any]:
    return {
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": "127.0.0.1",
        "podIPs": [{"ip": "127.0.0.1"}],
        "startTime": tracked.started_at or now(),
    }


def container_status(tracked: PodProcess, state: dict[str, Any], ready: bool) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": tracked.container,
        "image": tracked.image,
        "imageID": "",
        "containerID": f"local://{tracked.pid or 0}",
        "ready": ready,
        "started": ready,
        "restartCount": tracked.restart_count,
        "state": state,
    }
    if tracked.history and len(tracked.history) > 1 or tracked.restart_count:
        status["lastState"] = {"terminated": {"exitCode": tracked.history[-1] if tracked.history else 0}}
    return status


def running_status(tracked: PodProcess) -> dict[str, Any]:
    state = {"running": {"startedAt": tracked.started_at}, "terminated": None, "waiting": None}
    return {
        **base_status(tracked),
        "phase": "Running",
        "conditions": conditions(True),
        "containerStatuses": [container_status(tracked, state, True)],
    }


def waiting_status(tracked: PodProcess) -> dict[str, Any]:
    state = {"waiting": {"reason": "CrashLoopBackOff"}, "running": None, "terminated": None}
    return {
        **base_status(tracked),
        "phase": "Running",
        "conditions": conditions(False, "ContainersNotReady"),
        "containerStatuses": [container_status(tracked, state, False)],
    }


def terminated_status(tracked: PodProcess, reason: str | None = None) -> dict[str, Any]:
    code = tracked.exit_code if tracked.exit_code is not None else 137
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": reason or ("Completed" if code == 0 else "Error"),
        "startedAt": tracked.started_at or now(),
        "finishedAt": tracked.finished_at or now(),
        "containerID": f"local://{tracked.pid or 0}",
    }
    if code > 128:
        terminated["signal"] = code - 128
    state = {"terminated": terminated, "running": None, "waiting": None}
    return {
        **base_status(tracked),
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": conditions(False, "PodCompleted"),
        "containerStatuses": [container_status(tracked, state, False)],
    }


def setup_failure_status(tracked: PodProcess, exc: PodSetupError) -> dict[str, Any]:
    """The pod could not start (``exc`` says why); its exit code is 128, which the caller records."""
    state = {
        "terminated": {
            "exitCode": 128,
            "reason": exc.reason,
            "message": str(exc),
            "startedAt": now(),
            "finishedAt": now(),
        },
        "running": None,
        "waiting": None,
    }
    return {
        **base_status(tracked),
        "phase": "Failed",
        "message": str(exc),
        "reason": exc.reason,
        "conditions": conditions(False, "PodFailed"),
        "containerStatuses": [container_status(tracked, state, False)],
    }
