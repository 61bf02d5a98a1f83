"""A command Job's end -> its task's next turn Job (issue 29), next to the activation path's own figure in the same
run: a message queued + activated -> the task's turn Job.

One task runs a loop of command Jobs (scripted model: each turn submits ``true`` with submit_job and ends; the
Job's result wakes the next turn, which submits again). A watch of the namespace's Jobs notes when each command Job
shows Complete and when the next turn Job is ADDED. Interleaved, another (Idle) task gets a message + activation and
the same watch notes its turn Job. Local control plane with the pod runner (a Job's pod runs as a local process),
a real redis-server, the operator as a host process.

    .venv/bin/python bench/bench_job_wake.py [--samples 20]

Target (docs/jobs.md): job end -> next turn p50 within 1.5x of the activation path's p50.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import watch  # noqa: E402
from unicore.api.schema import InboxMessage  # noqa: E402

from bench.bench_cluster import BenchCluster  # noqa: E402
from tests.cluster.operator_harness import OperatorProcess  # noqa: E402
from tests.waiting import wait_for  # noqa: E402


class JobTimes:
    """When the watch first saw each Job ADDED, and Complete."""

    def __init__(self, batch: Any, namespace: str) -> None:
        self.added: dict[str, float] = {}
        self.complete: dict[str, float] = {}
        self._watch = watch.Watch()
        threading.Thread(target=self._run, args=(batch, namespace), daemon=True).start()

    def _run(self, batch: Any, namespace: str) -> None:
        try:
            for event in self._watch.stream(batch.list_namespaced_job, namespace, timeout_seconds=3600):
                now, job = time.perf_counter(), event["object"]
                self.added.setdefault(job.metadata.name, now)
                if any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or []):
                    self.complete.setdefault(job.metadata.name, now)
        except Exception:  # noqa: BLE001 - the API server goes away at the end of the run
            return


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    n = args.samples
    steps: list[dict[str, Any]] = []
    for _ in range(n + 1):
        steps += [{"tool_use": [{"name": "submit_job", "input": {"command": "true", "timeout_seconds": 60}}]},
                  {"text": "waiting for my job"}]
    with BenchCluster("jobwake") as bench:
        tasks, ns = bench.tasks, bench.namespace
        times = JobTimes(tasks.batch, ns)
        operator = OperatorProcess(bench.kubeconfig, bench.redis_url, ns, bench.data / "operator.log",
                                   UNICORE_RESYNC_SECONDS="30", UNICORE_DEFAULT_GPUS="0").start()
        try:
            tasks.create("idle", {"prompt": "hi", "model": "scripted", "gpus": 0, "script": {"default": "ok"}})
            wait_for(lambda: tasks.phase("idle") == "Idle", timeout=120, what="the activation task Idle")
            tasks.create("loop", {"prompt": "go", "model": "scripted", "gpus": 0, "tools": ["submit_job"],
                                  "script": {"default": "done", "tasks": {"loop": steps}}})
            wakes, activations = [], []
            for i in range(1, n + 1):
                job, next_turn = f"loop-j{i}", f"loop-t{i + 1}"
                wait_for(lambda j=job, t=next_turn: j in times.complete and t in times.added, timeout=120,
                         interval=0.01, what=f"{job} to end and {next_turn} to start")
                wakes.append((times.added[next_turn] - times.complete[job]) * 1000)
                wait_for(lambda: tasks.phase("idle") == "Idle", timeout=120, interval=0.05, what="idle Idle")
                start = time.perf_counter()
                bench.store.queue_message(f"{ns}/idle", InboxMessage(type="user", content=f"sample {i}"))
                bench.store.activate(f"{ns}/idle", "bench")
                turn = f"idle-t{i + 1}"
                wait_for(lambda t=turn: t in times.added, timeout=60, interval=0.005, what=turn)
                activations.append((times.added[turn] - start) * 1000)
        finally:
            operator.stop()
    wake50, act50 = statistics.median(wakes), statistics.median(activations)
    print(f"{n} samples each, local control plane (pod runner), operator as a host process\n")
    print("| path | p50 (ms) | p95 (ms) |")
    print("|---|---:|---:|")
    print(f"| command Job Complete -> the task's next turn Job | {wake50:.1f} | {p(wakes, 0.95):.1f} |")
    print(f"| message + activation -> the task's turn Job | {act50:.1f} | {p(activations, 0.95):.1f} |")
    print(f"\np50 ratio {wake50 / act50:.2f} (target: at most 1.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
