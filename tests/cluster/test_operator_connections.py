"""An operator that finds hundreds of new AgentTasks at start-up keeps its connections to the API server bounded.

Kopf's own session had no connection limit: each of its concurrent API calls (a finalizer, progress annotations, a
status) opened a TLS connection of its own, and an operator starting with 4,000 new AgentTasks held some 700 of
them and grew to 2 GB (kopf_login.py). Counted here from the operator process's own sockets while it initialises
the tasks: established TCP connections to the API server's port.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from kubernetes.client import Configuration
from unicore_operator.kopf_login import connection_limit

from tests.cluster.operator_harness import StartOperator, Tasks, operator_factory
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

NEW_TASKS = 300


def connections_to(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to ``port`` (its socket inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                count += 1
    return count


@pytest.fixture
def start_operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[StartOperator]:
    with operator_factory(crd, k8s_namespace, redis_url, tmp_path, env={"UNICORE_DEFAULT_GPUS": "0"},
                          log_lines=60) as start:
        yield start


def test_a_start_up_burst_of_new_tasks_uses_a_bounded_number_of_connections(
        crd: Any, k8s_namespace: str, start_operator: StartOperator) -> None:
    tasks = Tasks(crd.api_client(), k8s_namespace)
    for i in range(NEW_TASKS):
        # suspended: initialised (Redis record, prompt queued, status), no turn runs
        tasks.create(f"t{i:03d}", {"prompt": "hi", "suspend": True, "gpus": 0, "script": {"default": "ok"}})
    port = urlparse(crd.api_client().configuration.host).port
    assert port is not None
    operator = start_operator()
    assert operator.proc is not None
    peak = 0

    def all_initialised() -> bool:
        nonlocal peak
        peak = max(peak, connections_to(operator.proc.pid, port))  # type: ignore[union-attr]
        phases = tasks.all_phases()
        return len(phases) == NEW_TASKS and all(phase == "Suspended" for phase in phases.values())

    wait_for(all_initialised, timeout=300, interval=0.05, what=f"{NEW_TASKS} new tasks Suspended")
    # Kopf's session (its watches and calls) + the Kubernetes client's pool (Jobs, Events, patches) + the
    # FailedCreate Event watch.
    bound = connection_limit([k8s_namespace]) + Configuration().connection_pool_maxsize + 1
    assert 3 <= peak <= bound, f"{peak} connections to the API server at once (bound {bound})"
