"""Activation latency: message pushed to a task's inbox + activation -> its turn Job seen through a watch.

Printed next to the raw latency of creating the same Job directly with a plain client (same watch, same
run), with 1 and with N (default 1,000) existing AgentTasks. Sample tasks are children of a Redis-only parent
and have no prompt, so they are created (8 API clients in parallel) straight into Idle without running a
turn; only the sampled tasks run turns (scripted model, one step).

    .venv/bin/python bench/bench_activation.py [--tasks 1000] [--samples 100] [--verbose]
"""

from __future__ import annotations

import argparse
import copy
import queue
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch  # noqa: E402
from unicore.api.schema import InboxMessage, TaskSpec  # noqa: E402
from unicore.store.tasks import TaskStore  # noqa: E402
from unicore_devcluster.cluster import DevCluster  # noqa: E402

from bench.bench_cluster import BenchCluster  # noqa: E402
from tests.cluster.operator_harness import OperatorProcess, Tasks  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

VERBOSE = False


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


def settled(tasks: Tasks, name: str, turns: int) -> bool:
    """``name`` is Idle and its status already counts ``turns`` turns (so a stale Idle from before the last
    sample's Job does not count: the next message must not reach that Job's still-running turn)."""
    status = (tasks.get(name) or {}).get("status") or {}
    counted = int(status.get("turns") or 0) >= turns
    return status.get("phase") == "Idle" and counted and not status.get("activeJob")


def operator_sample(tasks: Tasks, store: TaskStore, jobs: JobWatch, namespace: str, name: str, i: int,
                    turns_of: dict[str, int]) -> tuple[str, float]:
    """Queue a message + activate ``name``; (its turn Job, ms until the watch shows it)."""
    start = time.perf_counter()
    store.queue_message(f"{namespace}/{name}", InboxMessage(type="user", content=f"sample {i}"))
    store.activate(f"{namespace}/{name}", "bench")
    job_name, seen = jobs.wait(lambda j, n=name: j.startswith(f"{n}-t"))
    turns_of[name] = int(job_name[len(name) + 2:].split("-", 1)[0])
    return job_name, (seen - start) * 1000


def raw_sample(tasks: Tasks, jobs: JobWatch, namespace: str, template: dict[str, Any]) -> float:
    """The operator's pod template as a suspended Job, made with a plain client; ms until the watch has it."""
    raw_job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": f"raw-{uuid.uuid4().hex[:10]}", "namespace": namespace},
               "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 60, "suspend": True,
                        "template": {"spec": client.ApiClient().sanitize_for_serialization(
                            client.V1PodSpec(**_snake(copy.deepcopy(template)["spec"]["template"]["spec"])))}}}
    start = time.perf_counter()
    tasks.batch.create_namespaced_job(namespace, raw_job)
    _, seen = jobs.wait(lambda j, n=raw_job["metadata"]["name"]: j == n)
    return (seen - start) * 1000


def measure(tasks: Tasks, store: TaskStore, jobs: JobWatch, namespace: str, names: list[str],
            samples: int, turns_of: dict[str, int]) -> tuple[list[float], list[float]]:
    """One sample at a time on a quiet system: every earlier sampled turn has ended (its pod no longer
    competes for the CPU) and the sample's task is Idle. Each sample creates the raw Job first, pauses 0.2 s,
    then activates the task, so both figures are taken on a quiet system (the raw Job is the operator's pod
    template with ``suspend: true``: the API server does the same admission and storage work, and no pod runs
    for it). One unrecorded warm-up sample takes the operator's Job template and warms both clients."""
    operator_ms, raw_ms = [], []

    def settle(*names_: str) -> None:
        for task in names_:
            wait_for(lambda n=task: settled(tasks, n, turns_of.get(n, 0)), timeout=120, interval=0.05,
                     what=f"{task} Idle")

    settle(*turns_of, names[0])
    job_name, _ = operator_sample(tasks, store, jobs, namespace, names[0], -1, turns_of)
    template = tasks.batch.read_namespaced_job(job_name, namespace).to_dict()
    previous = names[0]
    for i in range(samples):
        name = names[i % len(names)]
        settle(*dict.fromkeys((previous, name)))
        raw_ms.append(raw_sample(tasks, jobs, namespace, template))
        time.sleep(0.2)  # let the API server and the Job controller finish with the raw Job
        _, elapsed = operator_sample(tasks, store, jobs, namespace, name, i, turns_of)
        operator_ms.append(elapsed)
        if VERBOSE:
            print(f"  {time.strftime('%H:%M:%S')} {name} operator {elapsed:.1f} ms raw {raw_ms[-1]:.1f} ms",
                  flush=True)
        previous = name
    return operator_ms, raw_ms


def create_tasks(cluster: DevCluster, namespace: str, names: list[str], spec: dict[str, Any],
                 workers: int = 8) -> None:
    """Create AgentTasks from ``workers`` threads (one API client each)."""
    local = threading.local()

    def one(name: str) -> None:
        if not hasattr(local, "tasks"):
            local.tasks = Tasks(cluster.api_client(), namespace)
        local.tasks.create(name, spec)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, names))


def _snake(spec: dict[str, Any]) -> dict[str, Any]:
    keep = {"containers", "restart_policy", "service_account_name", "security_context", "volumes", "tolerations"}
    return {k: v for k, v in spec.items() if k in keep and v is not None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--verbose", action="store_true", help="print every operator sample as it is taken")
    args = parser.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    with BenchCluster("activation") as bench:
        bench.store.create_task(TaskSpec(id=f"{bench.namespace}/parent", prompt=None))
        operator = OperatorProcess(bench.kubeconfig, bench.redis_url, bench.namespace, bench.data / "operator.log",
                                   UNICORE_RESYNC_SECONDS="30").start()
        try:
            rows = run(bench, args.tasks, args.samples)
        finally:
            operator.stop()
    print(f"{'tasks':>6} {'op p50 ms':>10} {'raw p50 ms':>11} {'ratio':>6} {'op p99 ms':>10} "
          f"{'raw p99 ms':>11} {'ratio':>6}")
    for total, op, raw in rows:
        print(f"{total:>6} {statistics.median(op):>10.1f} {statistics.median(raw):>11.1f} "
              f"{statistics.median(op) / statistics.median(raw):>6.2f} {pct(op, 99):>10.1f} "
              f"{pct(raw, 99):>11.1f} {pct(op, 99) / pct(raw, 99):>6.2f}")
    return 0


def run(bench: BenchCluster, tasks_total: int, samples: int) -> list[tuple[int, list[float], list[float]]]:
    """Activation latencies (operator, raw) sampled with 1 and then ``tasks_total`` Idle AgentTasks."""
    tasks, namespace = bench.tasks, bench.namespace
    jobs = JobWatch(tasks.batch, namespace)
    spec = {"parentRef": {"name": "parent"}, "gpus": 0, "script": {"default": "ok"}}
    rows = []
    turns_of: dict[str, int] = {}  # task -> turns its last sampled Job ran (carried from row to row)
    existing: list[str] = []
    for total in (1, tasks_total):
        new = [f"s{i:05d}" for i in range(len(existing), total)]
        began = time.monotonic()
        create_tasks(bench.cluster, namespace, new, spec)
        existing.extend(new)
        want = len(existing)
        wait_for(lambda: sum(p == "Idle" for p in tasks.all_phases().values()) >= want,  # noqa: B023
                 timeout=1200, interval=1.0, what=f"{total} Idle sample tasks")
        print(f"{total} task(s) created and Idle in {time.monotonic() - began:.1f}s", flush=True)
        op, raw = measure(tasks, bench.store, jobs, namespace, existing[:max(1, samples)], samples, turns_of)
        rows.append((total, op, raw))
    return rows

if __name__ == "__main__":
    raise SystemExit(main())
