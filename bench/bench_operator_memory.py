"""Operator resident memory with N AgentTasks and N turn Jobs vs a no-op Kopf operator (bench/noop_operator.py)
watching the same objects, on the same control plane, in the same run.

Set-up: N root AgentTasks with a prompt, created from 8 API clients, and for each the Job build_turn_job_spec makes
for its turn 1, created with ``suspend: true`` (held, as a queue such as Kueue holds a Job: no pod ever runs); then
a first operator initialises them (Redis record, prompt queued; the create of its turn-1 Job answers 409 and the
held Job is taken for the turn) and, once every task reads Pending, is stopped. Then, one at a time, a fresh
``unicore-operator`` and a fresh no-op operator are started; each is measured once it has listed everything and gone
quiet (the no-op operator logs counts; both: CPU time of the process grows by less than 0.05 s over 3 s, after at
least 10 s); VmRSS and VmHWM from /proc/<pid>/status. Each pair is measured ``--repeat`` times, alternating
(resident memory after the same start-up varies by several MiB from run to run), and the table shows the means. The
same measurements with no objects at all come first.

``--operator NAME=TREE`` (repeatable) measures the operator code of a source tree instead (its ``core``,
``operator`` and ``hack`` first on the operator's PYTHONPATH; e.g. a ``git worktree`` of an earlier commit): each
variant in each round, next to the same no-op runs, so before and after a change are measured in one run.

    KUBEBUILDER_ASSETS=... .venv/bin/python bench/bench_operator_memory.py [--tasks 1000[,5000]] [--repeat 2]
        [--operator before=/tmp/old --operator after=.]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unicore_devcluster.cluster import DevCluster  # noqa: E402
from unicore_operator.job_builder import build_turn_job_spec  # noqa: E402
from unicore_operator.settings import load_settings  # noqa: E402

from bench.bench_cluster import BenchCluster  # noqa: E402
from tests.cluster.operator_harness import VENV_BIN, OperatorProcess, Tasks  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

HERE = Path(__file__).resolve().parent


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_quiet(pid: int, minimum: float = 10.0, timeout: float = 300.0) -> float:
    """Seconds until the process has run ``minimum`` s and then used < 0.05 s CPU in 3 s."""
    began = time.monotonic()
    time.sleep(minimum)
    while time.monotonic() - began < timeout:
        before = cpu_seconds(pid)
        time.sleep(3)
        if cpu_seconds(pid) - before < 0.05:
            return time.monotonic() - began
    raise TimeoutError(f"pid {pid} never went quiet")


def measure(proc: subprocess.Popen[bytes], ready: Any = None) -> tuple[int, int, float]:
    if ready is not None:
        wait_for(ready, timeout=300, interval=0.5, what="listing done")
    took = wait_quiet(proc.pid)
    return status_kib(proc.pid, "VmRSS"), status_kib(proc.pid, "VmHWM"), took


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def parallel(fn: Any, items: list[Any], cluster: DevCluster, namespace: str, workers: int = 8) -> list[Any]:
    local = threading.local()

    def one(item: Any) -> Any:
        if not hasattr(local, "tasks"):
            local.tasks = Tasks(cluster.api_client(), namespace)
        return fn(local.tasks, item)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, items))


def _all_in(phases: dict[str, str | None], names_: list[str], phase: str) -> bool:
    return all(phases.get(name) == phase for name in names_)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", default="1000", help="comma-separated totals, ascending (e.g. 1000,5000)")
    parser.add_argument("--repeat", type=int, default=2,
                        help="operator/no-op pairs measured per total, alternating (RSS varies run to run)")
    parser.add_argument("--operator", action="append", default=[], metavar="NAME=TREE",
                        help="measure the operator code of source tree TREE (e.g. an earlier commit's) as NAME; "
                             "repeat to compare several in one run (default: the installed code, as 'operator')")
    parser.add_argument("--resync", type=float, default=300.0,
                        help="the operators' UNICORE_RESYNC_SECONDS (default 300: a resync of 5,000 tasks every 30 s "
                             "keeps the process busy, and it never reads as quiet; the first resync runs 2 s after "
                             "start-up either way)")
    args = parser.parse_args()
    totals = [int(t) for t in args.tasks.split(",")]
    variants = [tuple(o.split("=", 1)) for o in args.operator] or [("operator", "")]
    with BenchCluster("memory") as bench:
        rows = run(bench, totals, args.repeat, variants, args.resync)
    print(f"\n{'AgentTasks+Jobs':>15} {'operator':>10} {'RSS MiB':>8} {'no-op RSS MiB':>13} {'ratio':>6} "
          f"{'HWM MiB':>8} {'no-op HWM MiB':>13} {'ratio':>6}")
    for n, who, op_rss, op_hwm, noop_rss, noop_hwm in rows:
        print(f"{n:>15} {who:>10} {op_rss / 1024:>8.1f} {noop_rss / 1024:>13.1f} {op_rss / noop_rss:>6.2f} "
              f"{op_hwm / 1024:>8.1f} {noop_hwm / 1024:>13.1f} {op_hwm / noop_hwm:>6.2f}")
    return 0


def run(bench: BenchCluster, totals: list[int], repeat: int, variants: list[tuple[str, ...]],
        resync: float) -> list[tuple[int, str, int, int, int, int]]:
    """(N, variant, operator RSS, operator HWM, no-op RSS, no-op HWM) in KiB, each the mean of ``repeat`` runs (the
    no-op's over all of them)."""
    namespace, tasks, data = bench.namespace, bench.tasks, bench.data
    spec = {"prompt": "hi", "gpus": 0, "script": {"default": "ok"}}
    op_env = OperatorProcess(bench.kubeconfig, bench.redis_url, namespace, data / "x.log",
                             UNICORE_RESYNC_SECONDS=str(resync)).env
    settings = load_settings(op_env)
    running: list[subprocess.Popen[bytes]] = []

    def start(kind: str, tag: str, tree: str = "") -> tuple[subprocess.Popen[bytes], Path]:
        log_path = data / f"{kind}-{tag}.log"
        argv = ([str(VENV_BIN / "unicore-operator")] if kind == "operator"
                else [sys.executable, str(HERE / "noop_operator.py")])
        env = dict(op_env)
        if tree:
            env["PYTHONPATH"] = os.pathsep.join(str(Path(tree) / d) for d in ("core", "operator", "client", "hack"))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        running.append(proc)
        return proc, log_path

    def noop_ready(log_path: Path, n: int) -> Any:
        want = f"seen tasks={n} jobs={n} "
        return lambda: want in log_path.read_text(errors="replace")

    rows: list[tuple[int, str, int, int, int, int]] = []

    def measure_pairs(n: int) -> None:
        noops: list[tuple[int, int]] = []
        ops: dict[str, list[tuple[int, int]]] = {who: [] for who, _ in variants}
        for attempt in range(repeat):
            for who, tree in variants[attempt % len(variants):] + variants[:attempt % len(variants)]:
                op, _ = start("operator", f"{who}-{n}-{attempt}", tree)
                op_rss, op_hwm, op_t = measure(op)
                stop(op)
                ops[who].append((op_rss, op_hwm))
                print(f"{n} (run {attempt + 1}): {who} RSS {op_rss} KiB (HWM {op_hwm}, quiet after {op_t:.0f}s)",
                      flush=True)
            noop, log_path = start("noop", f"{n}-{attempt}")
            noop_rss, noop_hwm, noop_t = measure(noop, noop_ready(log_path, n) if n else None)
            stop(noop)
            noops.append((noop_rss, noop_hwm))
            print(f"{n} (run {attempt + 1}): no-op RSS {noop_rss} KiB (HWM {noop_hwm}, {noop_t:.0f}s)", flush=True)
        noop_rss, noop_hwm = (round(statistics.mean(column)) for column in zip(*noops, strict=True))
        for who, samples in ops.items():
            op_rss, op_hwm = (round(statistics.mean(column)) for column in zip(*samples, strict=True))
            rows.append((n, who, op_rss, op_hwm, noop_rss, noop_hwm))

    try:
        measure_pairs(0)
        existing = 0
        for total in totals:
            names_ = [f"s{i:05d}" for i in range(existing, total)]
            began = time.monotonic()
            objs = {o["metadata"]["name"]: o for o in parallel(lambda t, n: t.create(n, spec), names_, bench.cluster,
                                                               namespace)}
            made_tasks = time.monotonic() - began

            def make_job(t: Tasks, name: str) -> None:
                job = build_turn_job_spec(objs[name], 1, settings)  # noqa: B023 (used before the loop moves on)
                job["spec"]["suspend"] = True  # held, as a queue (Kueue) holds a Job: no pod
                t.batch.create_namespaced_job(namespace, job)

            began = time.monotonic()
            parallel(make_job, names_, bench.cluster, namespace)
            made_jobs = time.monotonic() - began
            began = time.monotonic()
            init, _ = start("operator", f"init-{total}", variants[0][1])  # the first variant sets up
            # Initialised (Redis record, prompt queued), their turn-1 Job found (its create answered 409) and held:
            # Pending. Else the first operator measured would do that catching up and the no-op nothing of the kind.
            wait_for(lambda: _all_in(tasks.all_phases(), names_, "Pending"),  # noqa: B023
                     timeout=1800, interval=2.0, what=f"{len(names_)} new tasks Pending (Job held)")
            initialised = time.monotonic() - began
            stop(init)
            existing = total
            print(f"{total}: {len(names_)} AgentTasks created in {made_tasks:.0f}s, their Jobs in {made_jobs:.0f}s, "
                  f"initialised (Pending) in {initialised:.0f}s", flush=True)
            measure_pairs(total)
    finally:
        for proc in running:
            stop(proc)
    return rows

if __name__ == "__main__":
    raise SystemExit(main())
