"""Activation latency: message pushed to a task's inbox + activation -> its turn Job seen through a watch.

Printed next to the raw latency of creating the same Job directly with a plain client (same watch, same run), with
1 and with N (default 1,000) existing AgentTasks. Sample tasks are children of a Redis-only parent and have no
prompt, so they sit Idle until the benchmark queues a message.

    .venv/bin/python bench/bench_activation.py [--tasks 1000] [--samples 30]
"""

from __future__ import annotations

import argparse
import copy
import queue
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch  # noqa: E402

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, install_crd  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402
from tests.waiting import wait_for  # noqa: E402
from unicore.schema import InboxMessage, TaskSpec  # noqa: E402
from unicore.state.store import TaskStore, connect  # noqa: E402
from unicore_devcluster.cluster import DevCluster  # noqa: E402


class JobWatch:
    """Records when each Job name is first seen (ADDED) by a watch."""

    def __init__(self, batch: client.BatchV1Api, namespace: str) -> None:
        self.seen: dict[str, float] = {}
        self.events: queue.Queue[str] = queue.Queue()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(batch, namespace), daemon=True)
        self._thread.start()

    def _run(self, batch: client.BatchV1Api, namespace: str) -> None:
        try:
            self._stream(batch, namespace)
        except Exception:  # the API server went away at the end of the run
            return

    def _stream(self, batch: client.BatchV1Api, namespace: str) -> None:
        for event in self._watch.stream(batch.list_namespaced_job, namespace, timeout_seconds=3600):
            name = event["object"].metadata.name
            if event["type"] == "ADDED" and name not in self.seen:
                self.seen[name] = time.perf_counter()
                self.events.put(name)

    def wait(self, predicate: Any, timeout: float = 30.0) -> tuple[str, float]:
        deadline = time.monotonic() + timeout
        while True:
            name = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if predicate(name):
                return name, self.seen[name]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def measure(tasks: Tasks, store: TaskStore, jobs: JobWatch, namespace: str, names: list[str],
            samples: int) -> tuple[list[float], list[float]]:
    operator_ms, raw_ms = [], []
    template: dict[str, Any] | None = None
    for i in range(samples):
        name = names[i % len(names)]
        wait_for(lambda n=name: tasks.phase(n) == "Idle", timeout=120, what=f"{name} Idle")
        start = time.perf_counter()
        store.queue_message(f"{namespace}/{name}", InboxMessage(type="user", content=f"sample {i}"))
        store.activate(f"{namespace}/{name}", "bench")
        job_name, seen = jobs.wait(lambda j, n=name: j.startswith(f"{n}-t"))
        operator_ms.append((seen - start) * 1000)
        if template is None:
            template = tasks.batch.read_namespaced_job(job_name, namespace).to_dict()
        raw = copy.deepcopy(template)
        raw_job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": f"raw-{uuid.uuid4().hex[:10]}", "namespace": namespace},
                   "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 60,
                            "template": {"spec": client.ApiClient().sanitize_for_serialization(
                                client.V1PodSpec(**_snake(raw["spec"]["template"]["spec"])))}}}
        start = time.perf_counter()
        tasks.batch.create_namespaced_job(namespace, raw_job)
        _, seen = jobs.wait(lambda j, n=raw_job["metadata"]["name"]: j == n)
        raw_ms.append((seen - start) * 1000)
    return operator_ms, raw_ms


def _snake(spec: dict[str, Any]) -> dict[str, Any]:
    keep = {"containers", "restart_policy", "service_account_name", "security_context", "volumes", "tolerations"}
    return {k: v for k, v in spec.items() if k in keep and v is not None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="unicore-bench-activation-"))
    cluster = DevCluster(data / "cluster").start()
    (data / "redis").mkdir()
    redis_server = RedisServer(data / "redis")
    operator: OperatorProcess | None = None
    try:
        install_crd(cluster.kubeconfig)
        api = cluster.api_client()
        namespace = "bench"
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        wait_for(lambda: client.CoreV1Api(api).read_namespaced_service_account("default", namespace), timeout=30)
        install_agent_rbac(cluster.kubeconfig, namespace)
        store = TaskStore(connect(redis_server.url))
        store.create_task(TaskSpec(id=f"{namespace}/parent", prompt=None))
        operator = OperatorProcess(cluster.kubeconfig, redis_server.url, namespace, data / "operator.log",
                                   UNICORE_RESYNC_SECONDS="30").start()
        tasks = Tasks(api, namespace)
        jobs = JobWatch(tasks.batch, namespace)
        spec = {"parentRef": {"name": "parent"}, "gpus": 0, "script": {"default": "ok"}}
        rows = []
        existing: list[str] = []
        for total in (1, args.tasks):
            while len(existing) < total:
                name = f"s{len(existing):05d}"
                tasks.create(name, spec)
                existing.append(name)
            wait_for(lambda n=len(existing): sum(p == "Idle" for p in tasks.all_phases().values()) >= n,
                     timeout=600, interval=1.0, what=f"{total} Idle sample tasks")
            op, raw = measure(tasks, store, jobs, namespace, existing[:max(1, args.samples)], args.samples)
            rows.append((total, op, raw))
        print(f"{'tasks':>6} {'op p50 ms':>10} {'raw p50 ms':>11} {'ratio':>6} {'op p99 ms':>10} "
              f"{'raw p99 ms':>11} {'ratio':>6}")
        for total, op, raw in rows:
            print(f"{total:>6} {statistics.median(op):>10.1f} {statistics.median(raw):>11.1f} "
                  f"{statistics.median(op) / statistics.median(raw):>6.2f} {pct(op, 99):>10.1f} "
                  f"{pct(raw, 99):>11.1f} {pct(op, 99) / pct(raw, 99):>6.2f}")
        return 0
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()
        redis_server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
