"""A no-op Kopf operator watching what unicore-operator watches (AgentTasks; Jobs and pods labelled
``app.kubernetes.io/managed-by``), standalone, in the namespaces of ``UNICORE_NAMESPACES``. Its handlers only
count the distinct objects seen and log ``seen tasks=<n> jobs=<n> pods=<n>`` when a count changes by 100 (and at
the end of the initial listing, once the counts stay put). The anchor of bench/bench_operator_memory.py.

    KUBECONFIG=... UNICORE_NAMESPACES=bench .venv/bin/python bench/noop_operator.py
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

import kopf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
from unicore_operator import names  # noqa: E402 (labels and group/version only: a constants module)

SELECTOR = {names.MANAGED_BY_LABEL: names.MANAGED_BY}
SEEN: dict[str, set[str]] = {"tasks": set(), "jobs": set(), "pods": set()}


def _note(kind: str, name: str) -> None:
    before = len(SEEN[kind])
    SEEN[kind].add(name)
    if len(SEEN[kind]) != before and len(SEEN[kind]) % 100 == 0:
        _log()


def _log() -> None:
    print(f"seen tasks={len(SEEN['tasks'])} jobs={len(SEEN['jobs'])} pods={len(SEEN['pods'])}", flush=True)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL)
def task_event(name: str, **_: Any) -> None:
    _note("tasks", name)


@kopf.on.event("batch", "v1", "jobs", labels=SELECTOR)
def job_event(name: str, **_: Any) -> None:
    _note("jobs", name)


@kopf.on.event("", "v1", "pods", labels=SELECTOR)
def pod_event(name: str, **_: Any) -> None:
    _note("pods", name)


async def _report() -> None:
    last = None
    while True:
        await asyncio.sleep(2)
        now = tuple(len(s) for s in SEEN.values())
        if now != last:
            _log()
            last = now


async def _main() -> None:
    namespaces = [ns for ns in os.environ.get("UNICORE_NAMESPACES", "default").split(",") if ns]
    reporter = asyncio.create_task(_report())
    try:
        await kopf.operator(standalone=True, clusterwide=False, namespaces=namespaces)
    finally:
        reporter.cancel()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kopf").setLevel(logging.WARNING)
    try:
        asyncio.run(_main())
    except KeyboardInterrupt:
        pass
