"""Sustained turn throughput: root AgentTasks with one-step scripted turns fed at R per minute, vs a plain client
creating the same turn Jobs (the spec ``build_turn_job_spec`` gives) at the same rate, on the same control plane.

For each rate R and a window of W seconds, items are submitted evenly spaced; an item is done when its Job reports
``succeeded`` on a watch. A rate is *sustained* when the backlog (submitted, not done) at the window's end is at most
2 more than at its middle, and every item is done within ``--grace`` seconds after the window ends. Operator items:
an AgentTask with ``prompt``, ``gpus: 0``, ``script: {default: done}`` (Pending -> Job -> Idle/Succeeded). Anchor
items: the Redis task written with a plain TaskStore, then the Job that build_turn_job_spec makes for it (owner
reference dropped, label ``bench=anchor`` added) created with a plain client.

The two alternate, rate by rate (anchor R, operator R, anchor R', operator R', ...), so a change in what else runs on
the machine falls on both alike. During an anchor step no operator runs; its Jobs and Redis tasks are deleted after
it (the operator's watchdog would reap them as orphans), then the operator is started (with the AgentTasks of the
earlier steps, as an operator that has been running has them), and the step starts once its start-up is over (its
CPU use has settled); it is stopped after its step. Each pod is a host process here, so the ceiling is the node's,
for both sides. The operator runs with its default resync period (``--resync``, 30 s) as deployed; the cluster tests
use 5 s. A second table gives, per step, the CPU time per item of each part (the control-plane processes, Redis,
the turn pods, this process with its pod runner, the operator) and of the whole machine (everyone's work).

``--operator NAME=TREE`` (repeatable) measures the operator code of a source tree instead (its ``core``,
``operator`` and ``hack`` first on the operator's PYTHONPATH; e.g. ``git archive`` of an earlier commit), several
in one run: after each anchor step, each operator runs the same rate, the order rotating from rate to rate.

    KUBEBUILDER_ASSETS=... .venv/bin/python bench/bench_throughput.py [--rates 120,135,150,165] [--window 30]
        [--grace 20] [--resync 30] [--operator before=/tmp/old --operator after=.]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch  # noqa: E402
from unicore.api.schema import TaskSpec  # noqa: E402
from unicore_operator.job_builder import build_turn_job_spec  # noqa: E402
from unicore_operator.settings import load_settings  # noqa: E402

from bench.bench_cluster import BenchCluster  # noqa: E402
from tests.cluster.operator_harness import OperatorProcess  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

SCRIPT = {"default": "done"}
ANCHOR_LABEL = "bench=anchor"


class JobTimes:
    """ADDED and succeeded/failed times of every Job in the namespace, from one watch."""

    def __init__(self, batch: client.BatchV1Api, namespace: str) -> None:
        self.added: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.failed: set[str] = set()
        self.deleted: set[str] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._run, args=(batch, namespace), daemon=True).start()

    def _run(self, batch: client.BatchV1Api, namespace: str) -> None:
        try:
            for event in watch.Watch().stream(batch.list_namespaced_job, namespace, timeout_seconds=3600):
                job = event["object"]
                name, now = job.metadata.name, time.monotonic()
                with self._lock:
                    self.added.setdefault(name, now)
                    if event["type"] == "DELETED":
                        self.deleted.add(name)
                    status = job.status
                    if status and (status.succeeded or status.failed) and name not in self.done:
                        self.done[name] = now
                        if status.failed:
                            self.failed.add(name)
        except Exception:  # the API server went away at the end of the run
            return

    def drain(self, timeout: float = 180.0) -> None:
        """Wait until every Job seen so far is done or deleted (then 3 s more for their pods to go)."""
        with self._lock:
            seen = set(self.added)

        def over() -> bool:
            with self._lock:
                return seen <= self.done.keys() | self.deleted

        wait_for(over, timeout=timeout, interval=0.5, what="the earlier Jobs to finish")
        time.sleep(3)

    def count(self, prefix: str) -> tuple[int, int, int]:
        with self._lock:
            return (sum(n.startswith(prefix) for n in self.added), sum(n.startswith(prefix) for n in self.done),
                    sum(n.startswith(prefix) for n in self.failed))

    def names(self, prefix: str) -> list[str]:
        with self._lock:
            return [n for n in self.added if n.startswith(prefix)]

    def finished(self, prefix: str) -> list[float]:
        with self._lock:
            return [t for n, t in self.done.items() if n.startswith(prefix)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all processes, everyone's)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


class CpuMeter:
    """CPU seconds by part: the control-plane processes, Redis, this process (the pod runner, the watch, the
    submissions), the turn pods (reaped children of this process), the operator; and the machine."""

    def __init__(self, bench: BenchCluster) -> None:
        self.bench = bench
        self.operator_pid: int | None = None

    def read(self) -> dict[str, float]:
        assert self.bench.cluster is not None and self.bench.redis_server is not None
        pids = {name: pid for name, pid in self.bench.cluster.pids().items() if not name.startswith("pod:")}
        pids["redis"] = self.bench.redis_server.proc.pid
        if self.operator_pid is not None:
            pids["operator"] = self.operator_pid
        out = {name: cpu_seconds(pid) for name, pid in pids.items()}
        times = os.times()
        out["bench+runner"] = times.user + times.system
        out["turn pods"] = times.children_user + times.children_system
        out["machine"] = machine_busy()
        return out

    @staticmethod
    def per_item(before: dict[str, float], after: dict[str, float], items: int) -> dict[str, float]:
        """Milliseconds per item of each part between two readings."""
        return {name: (after[name] - before.get(name, 0.0)) / items * 1000 for name in after}


def run_step(label: str, rate: int, window: float, grace: float, jobs: JobTimes, submit: Callable[[str], None],
             meter: CpuMeter) -> dict[str, Any]:
    """Submit ``rate``/min for ``window`` s (names ``<label>r<rate>-<i>``); wait ``grace`` s for the stragglers."""
    prefix = f"{label}r{rate}-"
    count = max(1, int(round(rate * window / 60)))
    jobs.drain()  # the previous step's stragglers must not compete with this one
    load = load1()
    cpu = meter.read()
    start = time.monotonic()
    late = 0.0
    mid: tuple[int, int, int] | None = None
    for i in range(count):
        delay = start + i * 60.0 / rate - time.monotonic()
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
    finished = jobs.finished(prefix)
    cpu = meter.per_item(cpu, meter.read(), count)
    return {"rate": rate, "submitted": count, "done_in_window": done_in_window,
            "per_min": done_in_window / count * rate, "backlog_mid": backlog_mid, "backlog_end": backlog_end,
            "done": done, "failed": failed, "all_done_s": (max(finished) - start) if finished else float("inf"),
            "sustained": done == count and not failed and backlog_end <= backlog_mid + 2,
            "submit_late_s": late, "jobs_added_in_window": added, "load1": load, "cpu": cpu}


def start_operator(bench: BenchCluster, resync: float, tree: str = "") -> tuple[OperatorProcess, int]:
    """Start the operator (its code from source tree ``tree`` when given); return once it has started and its
    start-up work (one reconcile per AgentTask and Job already there) is over: its CPU use stays under 10 % for a
    second."""
    log = bench.data / "operator.log"
    offset = log.stat().st_size if log.exists() else 0
    code = {"PYTHONPATH": os.pathsep.join(str(Path(tree) / d) for d in ("core", "operator", "client", "hack"))}
    operator = OperatorProcess(bench.kubeconfig, bench.redis_url, bench.namespace, log,
                               UNICORE_RESYNC_SECONDS=f"{resync:g}", **(code if tree else {})).start()
    assert operator.proc is not None
    pid = operator.proc.pid
    wait_for(lambda: "operator started" in log.read_text(errors="replace")[offset:], timeout=60,
             interval=0.2, what="the operator to start")
    last = (time.monotonic(), cpu_seconds(pid))

    def settled() -> bool:
        nonlocal last
        now, cpu = time.monotonic(), cpu_seconds(pid)
        if now - last[0] < 1.0:
            return False
        quiet = (cpu - last[1]) / (now - last[0]) < 0.1
        last = (now, cpu)
        return quiet

    wait_for(settled, timeout=120, interval=0.25, what="the operator's start-up work to end")
    return operator, pid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="120,135,150,165", help="turns per minute, comma-separated")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of submission per rate")
    parser.add_argument("--grace", type=float, default=20.0, help="seconds after the window to finish")
    parser.add_argument("--resync", type=float, default=30.0, help="the operator's UNICORE_RESYNC_SECONDS")
    parser.add_argument("--skip-anchor", action="store_true")
    parser.add_argument("--operator", action="append", default=[], metavar="NAME=TREE",
                        help="measure the operator code of source tree TREE (e.g. an earlier commit's) as NAME; "
                             "repeat to compare several in one run (default: the installed code, as 'operator')")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    operators = [tuple(o.split("=", 1)) for o in args.operator] or [("operator", "")]
    results: list[tuple[str, dict[str, Any]]] = []
    with BenchCluster("throughput") as bench:
        namespace, store, tasks = bench.namespace, bench.store, bench.tasks
        jobs = JobTimes(tasks.batch, namespace)
        meter = CpuMeter(bench)
        settings = load_settings(OperatorProcess(bench.kubeconfig, bench.redis_url, namespace, Path("-")).env)

        def anchor_submit(name: str) -> None:
            store.create_task(TaskSpec(id=f"{namespace}/{name}", prompt="go", model="scripted", script=SCRIPT))
            task = {"metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
                    "spec": {"prompt": "go", "gpus": 0, "script": SCRIPT}}
            job = build_turn_job_spec(task, 1, settings)
            job["metadata"].pop("ownerReferences", None)
            for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
                meta.setdefault("labels", {})["bench"] = "anchor"
            tasks.batch.create_namespaced_job(namespace, job)

        def operator_submit(name: str) -> None:
            tasks.create(name, {"prompt": "go", "gpus": 0, "script": SCRIPT})

        def remove_anchor(prefix: str) -> None:
            tasks.batch.delete_collection_namespaced_job(namespace, label_selector=ANCHOR_LABEL,
                                                         propagation_policy="Background")
            wait_for(lambda: not tasks.batch.list_namespaced_job(namespace, label_selector=ANCHOR_LABEL).items
                     and not tasks.core.list_namespaced_pod(namespace, label_selector=ANCHOR_LABEL).items,
                     timeout=120, interval=1.0, what="the anchor's Jobs and pods to go")
            for name in jobs.names(prefix):
                store.delete_task(f"{namespace}/{name.rsplit('-t', 1)[0]}")

        for rate in rates:
            if not args.skip_anchor:
                r = run_step("a", rate, args.window, args.grace, jobs, anchor_submit, meter)
                print(f"anchor   {rate}/min: {r}", flush=True)
                results.append(("anchor", r))
                remove_anchor(f"ar{rate}-")
            turn = rates.index(rate) % len(operators)  # the variants take turns in going first
            for number, (who, tree) in sorted(enumerate(operators), key=lambda o: (o[0] - turn) % len(operators)):
                operator, meter.operator_pid = start_operator(bench, args.resync, tree)
                try:
                    r = run_step(f"o{number}", rate, args.window, args.grace, jobs, operator_submit, meter)
                finally:
                    operator.stop()
                    meter.operator_pid = None
                print(f"{who} {rate}/min: {r}", flush=True)
                results.append((who, r))
    report(results, args)
    return 0


def report(results: list[tuple[str, dict[str, Any]]], args: argparse.Namespace) -> None:
    print(f"\nwindow {args.window:g} s, grace {args.grace:g} s, operator resync {args.resync:g} s")
    print(f"{'who':<12} {'rate/min':>8} {'items':>5} {'done/min in window':>18} {'backlog mid':>11} "
          f"{'backlog end':>11} {'all done after s':>16} {'failed':>6} {'sustained':>9} {'load1':>5}")
    for who, r in results:
        print(f"{who:<12} {r['rate']:>8} {r['submitted']:>5} {r['per_min']:>18.1f} {r['backlog_mid']:>11} "
              f"{r['backlog_end']:>11} {r['all_done_s']:>16.1f} {r['failed']:>6} {str(r['sustained']):>9} "
              f"{r['load1']:>5.1f}")
    parts = sorted({name for _, r in results for name in r["cpu"]} - {"machine"}) + ["machine"]
    print("\nCPU ms per item over the step (submission start to the end of the grace wait); machine = everyone's")
    print(f"{'who':<12} {'rate/min':>8} " + " ".join(f"{name[:12]:>12}" for name in parts)
          + f" {'sum of parts':>12}")
    for who, r in results:
        cpu = r["cpu"]
        own = sum(value for name, value in cpu.items() if name != "machine")
        print(f"{who:<12} {r['rate']:>8} " + " ".join(f"{cpu.get(name, 0.0):>12.0f}" for name in parts)
              + f" {own:>12.0f}")

    def ceiling(who: str) -> int:
        return max([r["rate"] for w, r in results if w == who and r["sustained"]], default=0)

    def per_min(who: str, rate: int) -> float | None:
        return next((r["per_min"] for w, r in results if w == who and r["rate"] == rate), None)

    raw_ceiling = ceiling("anchor")
    for who in dict.fromkeys(w for w, _ in results if w != "anchor"):
        op_ceiling = ceiling(who)
        print(f"sustained ceiling: {who} {op_ceiling}/min, anchor {raw_ceiling}/min"
              + (f", ratio {op_ceiling / raw_ceiling:.2f} (target >= 0.90)" if raw_ceiling else ""))
        for rate in sorted({r["rate"] for _, r in results}):
            op, raw = per_min(who, rate), per_min("anchor", rate)
            if op is not None and raw:
                print(f"  at {rate}/min: done/min in window {who}/anchor = {op / raw:.2f}")

if __name__ == "__main__":
    raise SystemExit(main())
