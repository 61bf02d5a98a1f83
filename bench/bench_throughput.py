"""Sustained turn throughput: root AgentTasks with one-step scripted turns fed at R per minute, vs a plain client
creating the same turn Jobs (the spec ``build_turn_job_spec`` gives) at the same rate, on the same control plane.

For each rate R (stepped up) and a window of W seconds, items are submitted evenly spaced; an item is done when its
Job reports ``succeeded`` on a watch. A rate is *sustained* when the backlog (submitted, not done) at the
window's end is at most 2 more than at its middle, and every item is done within ``--grace`` seconds after the
window ends. Operator items: an AgentTask with
``prompt``, ``gpus: 0``, ``script: {default: done}`` (Pending -> Job -> Idle/Succeeded). Anchor items: the Redis task
written with a plain TaskStore, then the Job that build_turn_job_spec makes for it (owner reference dropped) created
with a plain client. The anchor steps run first, before the operator is started (so no operator competes with
them); both share the node ceiling (each pod is a host process here).

    KUBEBUILDER_ASSETS=... .venv/bin/python bench/bench_throughput.py [--rates 20,40,60] [--window 45] [--grace 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch  # noqa: E402
from unicore.schema import TaskSpec  # noqa: E402
from unicore.state.store import TaskStore, connect  # noqa: E402
from unicore_devcluster.cluster import DevCluster  # noqa: E402
from unicore_operator.job_builder import build_turn_job_spec  # noqa: E402
from unicore_operator.settings import load_settings  # noqa: E402

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, install_crd  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

SCRIPT = {"default": "done"}


class JobTimes:
    """ADDED and succeeded/failed times of every Job in the namespace, from one watch."""

    def __init__(self, batch: client.BatchV1Api, namespace: str) -> None:
        self.added: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.failed: set[str] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._run, args=(batch, namespace), daemon=True).start()

    def _run(self, batch: client.BatchV1Api, namespace: str) -> None:
        try:
            for event in watch.Watch().stream(batch.list_namespaced_job, namespace, timeout_seconds=3600):
                job = event["object"]
                name, now = job.metadata.name, time.monotonic()
                with self._lock:
                    self.added.setdefault(name, now)
                    status = job.status
                    if status and (status.succeeded or status.failed) and name not in self.done:
                        self.done[name] = now
                        if status.failed:
                            self.failed.add(name)
        except Exception:  # the API server went away at the end of the run
            return

    def drain(self, timeout: float = 180.0) -> None:
        """Wait until every Job seen so far is done (then 3 s more for their pods to go)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if set(self.added) <= set(self.done):
                    break
            time.sleep(0.5)
        time.sleep(3)

    def count(self, prefix: str) -> tuple[int, int, int]:
        with self._lock:
            return (sum(n.startswith(prefix) for n in self.added), sum(n.startswith(prefix) for n in self.done),
                    sum(n.startswith(prefix) for n in self.failed))


def run_step(label: str, rate: int, window: float, grace: float, jobs: JobTimes,
             submit: Callable[[str], None]) -> dict[str, Any]:
    """Submit ``rate``/min for ``window`` s (names ``<label>r<rate>-<i>``); wait ``grace`` s for the stragglers."""
    prefix = f"{label}r{rate}-"
    count = max(1, int(round(rate * window / 60)))
    jobs.drain()  # the previous step's stragglers must not compete with this one
    start = time.monotonic()
    late = 0.0
    mid: tuple[int, int, int] | None = None
    for i in range(count):
        due = start + i * 60.0 / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            late = max(late, -delay)
        submit(f"{prefix}{i}")
        if mid is None and i >= count // 2:
            mid = jobs.count(prefix)
    time.sleep(max(0.0, start + window - time.monotonic()))
    added, done_in_window, _ = jobs.count(prefix)
    backlog_end = count - done_in_window
    backlog_mid = (count // 2 + 1) - (mid[1] if mid else 0)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and jobs.count(prefix)[1] < count:
        time.sleep(0.5)
    _, done, failed = jobs.count(prefix)
    with jobs._lock:
        finished = [t for n, t in jobs.done.items() if n.startswith(prefix)]
    span = (max(finished) - start) if finished else float("inf")
    return {"rate": rate, "submitted": count, "done_in_window": done_in_window,
            "per_min": done_in_window / count * rate, "backlog_mid": backlog_mid, "backlog_end": backlog_end,
            "done": done, "failed": failed, "all_done_s": span,
            "sustained": done == count and not failed and backlog_end <= backlog_mid + 2,
            "submit_late_s": late, "jobs_added_in_window": added}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rates", default="20,40,60", help="turns per minute, comma-separated, ascending")
    parser.add_argument("--window", type=float, default=45.0, help="seconds of submission per rate")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds after the window to finish")
    parser.add_argument("--skip-anchor", action="store_true")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    data = Path(tempfile.mkdtemp(prefix="unicore-bench-throughput-"))
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
        tasks = Tasks(api, namespace)
        jobs = JobTimes(tasks.batch, namespace)
        operator = OperatorProcess(cluster.kubeconfig, redis_server.url, namespace, data / "operator.log")
        settings = load_settings(operator.env)

        def raw_submit(name: str) -> None:
            store.create_task(TaskSpec(id=f"{namespace}/{name}", prompt="go", model="scripted", script=SCRIPT))
            task = {"metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
                    "spec": {"prompt": "go", "gpus": 0, "script": SCRIPT}}
            job = build_turn_job_spec(task, 1, settings)
            job["metadata"].pop("ownerReferences", None)
            tasks.batch.create_namespaced_job(namespace, job)

        def operator_submit(name: str) -> None:
            tasks.create(name, {"prompt": "go", "gpus": 0, "script": SCRIPT})

        results: list[tuple[str, dict[str, Any]]] = []
        if not args.skip_anchor:
            for rate in rates:
                r = run_step("a", rate, args.window, args.grace, jobs, raw_submit)
                print(f"anchor   {rate}/min: {r}", flush=True)
                results.append(("anchor", r))
            # The anchor's Jobs and Redis tasks go before the operator starts: its watchdog would reap them as
            # orphans (no AgentTask) during the first operator step.
            tasks.batch.delete_collection_namespaced_job(namespace, propagation_policy="Background")
            wait_for(lambda: not tasks.jobs() and not tasks.pods(), timeout=120, interval=1.0, what="anchor gone")
            for name in [n for n in jobs.added if n.startswith("a")]:
                store.delete_task(f"{namespace}/{name.rsplit('-t', 1)[0]}")
        operator.start()
        time.sleep(10)
        for rate in rates:
            r = run_step("o", rate, args.window, args.grace, jobs, operator_submit)
            print(f"operator {rate}/min: {r}", flush=True)
            results.append(("operator", r))
        print(f"\nwindow {args.window:g} s, grace {args.grace:g} s")
        print(f"{'who':<9} {'rate/min':>8} {'items':>5} {'done/min in window':>18} {'backlog mid':>11} "
              f"{'backlog end':>11} {'all done after s':>16} {'failed':>6} {'sustained':>9}")
        for who, r in results:
            print(f"{who:<9} {r['rate']:>8} {r['submitted']:>5} {r['per_min']:>18.1f} {r['backlog_mid']:>11} "
                  f"{r['backlog_end']:>11} {r['all_done_s']:>16.1f} {r['failed']:>6} {str(r['sustained']):>9}")

        def ceiling(who: str) -> int:
            return max([r["rate"] for w, r in results if w == who and r["sustained"]], default=0)

        op_ceiling, raw_ceiling = ceiling("operator"), ceiling("anchor")
        print(f"sustained ceiling: operator {op_ceiling}/min, anchor {raw_ceiling}/min"
              + (f", ratio {op_ceiling / raw_ceiling:.2f} (target >= 0.90)" if raw_ceiling else ""))
        for rate in rates:
            op = [r for w, r in results if w == "operator" and r["rate"] == rate]
            raw = [r for w, r in results if w == "anchor" and r["rate"] == rate]
            if op and raw and raw[0]["per_min"]:
                print(f"  at {rate}/min: done/min in window operator/anchor = "
                      f"{op[0]['per_min'] / raw[0]['per_min']:.2f}")
        return 0
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()
        redis_server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
