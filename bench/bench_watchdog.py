"""Benchmark: the watchdog's full scan at 1,000 and 10,000 tasks (synthetic cache contents, real Redis).

    .venv/bin/python bench/bench_watchdog.py [--repeat 15]

For each size and load profile it times what the operator does every UNICORE_WATCHDOG_INTERVAL_SECONDS
(``Watchdog.scan_once`` without the thread hop), end to end and by part:
  snapshot  building the Snapshot from index-shaped mappings (what Kopf's indexes hold: views built per event);
  plan      which tasks' Redis state the scan needs, from the caches alone (``plan_redis_reads``);
  redis     the Redis read (``read_states``): stale entries of ``uc:heartbeats`` + a beat check of the tasks whose
            Running pod is older than the heartbeat timeout, then status/heartbeat/lease of the stale, missing and
            flagged tasks only (real redis-server on a unix socket);
  scan      the pure scan() over the snapshot and what was read.
Target: the full scan <= 100 ms at 10,000 tasks. Profiles: "20% active" (a fifth of the tasks have a live turn Job
and pod, started a minute ago), "all active" (every task has one) and "all active, long turns" (every pod started
10 minutes ago, so every running task is beat-checked). Every profile plants stuck work of each kind so the scan
finds and builds actions; the count is checked against what was planted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for extra in ("operator", "core"):
    sys.path.insert(0, str(ROOT / extra))

import redis  # noqa: E402
from unicore.store.keys import HEARTBEATS_INDEX, TaskKeys  # noqa: E402
from unicore_operator.watchdog.redis_state import read_states  # noqa: E402
from unicore_operator.watchdog.scan import Thresholds, plan_redis_reads, scan  # noqa: E402
from unicore_operator.watchdog.snapshot import build_snapshot, with_redis  # noqa: E402
from unicore_operator.watchdog.views import AgentTaskView, JobView, PodView, RedisTaskState  # noqa: E402

NOW = time.time()
THRESHOLDS = Thresholds()
NS = "bench"


def synthetic(n_tasks: int, active_every: int, turn_age: float = 60) -> tuple[dict, dict, dict, dict, int]:
    """Index-shaped caches + Redis states; returns them and the number of stuck items planted."""
    tasks: dict[str, list[AgentTaskView]] = {}
    jobs: dict[str, list[JobView]] = {}
    pods: dict[str, list[PodView]] = {}
    states: dict[str, RedisTaskState] = {}
    stuck = 0
    for i in range(n_tasks):
        name = f"task-{i}"
        view = AgentTaskView(namespace=NS, name=name, phase="Idle", root=f"root-{i // 50}")
        tid = view.task_id
        tasks[tid] = [view]
        states[tid] = RedisTaskState(status="idle", updated_at=NOW - 600)
        if i % active_every:
            continue
        tasks[tid] = [AgentTaskView(namespace=NS, name=name, phase="Running", root=view.root)]
        job = JobView(namespace=NS, name=f"{name}-t1", task_id=tid, uid=f"u{i}", created_at=NOW - turn_age,
                      start_time=NOW - turn_age, active_deadline_seconds=3600)
        jobs[job.key] = [job]
        kind = (i // active_every) % 100
        if kind == 1:  # pending too long, unschedulable
            pod = PodView(namespace=NS, name=f"{name}-t1-x", job_name=job.name, phase="Pending",
                          created_at=NOW - 400, unschedulable_reason="Unschedulable",
                          unschedulable_message="0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
            stuck += 1
        else:
            started = NOW - 600 if kind == 2 else NOW - turn_age + 1  # kind 2: a hung turn, silent for 500 s
            pod = PodView(namespace=NS, name=f"{name}-t1-x", job_name=job.name, phase="Running",
                          created_at=started - 1, start_time=started)
        pods[pod.key] = [pod]
        beat = NOW - 500 if kind == 2 else NOW - 3
        stuck += kind == 2
        states[tid] = RedisTaskState(status="running", updated_at=NOW - 59, heartbeat_at=beat,
                                     lease_holder=f"{pod.name}:1", lease_token="1",
                                     lease_acquired_at=NOW - turn_age + 1)
    # stuck work without a live Job: running status with no job, a lease whose holder is gone, orphan Jobs (the
    # caches still say Idle: only their stale heartbeat entries lead the watchdog to them)
    for i in range(1, n_tasks, 97):
        if f"{NS}/task-{i}" in jobs or i % active_every == 0:
            continue
        tid = f"{NS}/task-{i}"
        if i % 2:
            states[tid] = RedisTaskState(status="running", updated_at=NOW - 300, heartbeat_at=NOW - 290)
        else:
            states[tid] = RedisTaskState(status="running", updated_at=NOW - 300, heartbeat_at=NOW - 290,
                                         lease_holder="gone-pod:1", lease_token="9", lease_acquired_at=NOW - 300)
        stuck += 1
    for i in range(n_tasks // 500):
        orphan = JobView(namespace=NS, name=f"deleted-{i}-t1", task_id=f"{NS}/deleted-{i}", created_at=NOW - 600)
        jobs[orphan.key] = [orphan]
        stuck += 1
    return tasks, jobs, pods, states, stuck


def timed(fn, repeat: int) -> tuple[float, float, object]:  # type: ignore[no-untyped-def]
    samples, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), max(samples), result


def fill_redis(client: redis.Redis, states: dict[str, RedisTaskState]) -> None:
    """What the turns wrote: task records, heartbeats (the task's key and ``uc:heartbeats``), leases."""
    pipe = client.pipeline(transaction=False)
    for tid, st in states.items():
        keys = TaskKeys(tid)
        pipe.hset(keys.task, mapping={"status": st.status, "updated_at": repr(st.updated_at or 0)})
        if st.heartbeat_at:
            pipe.set(keys.heartbeat, repr(st.heartbeat_at))
            if st.status == "running":
                pipe.zadd(HEARTBEATS_INDEX, {tid: st.heartbeat_at})
        if st.lease_token:
            pipe.hset(keys.lease, mapping={"holder": st.lease_holder, "token": st.lease_token,
                                           "acquired_at": repr(st.lease_acquired_at)})
    pipe.execute()


def full_scan(client: redis.Redis, tasks: dict, jobs: dict, pods: dict, parts: dict[str, list[float]]) -> list:
    """``Watchdog.scan_once`` without the thread hop: snapshot, plan, Redis read, scan; each part's time in ms."""
    t0 = time.perf_counter()
    snapshot = build_snapshot(tasks, jobs, pods, {})
    t1 = time.perf_counter()
    plan = plan_redis_reads(snapshot, NOW, THRESHOLDS)
    t2 = time.perf_counter()
    read = read_states(client, plan, NOW, THRESHOLDS)
    t3 = time.perf_counter()
    actions = scan(with_redis(snapshot, read.states, read.beating), NOW, THRESHOLDS)
    t4 = time.perf_counter()
    for name, start, end in (("snapshot", t0, t1), ("plan", t1, t2), ("redis", t2, t3), ("scan", t3, t4),
                             ("total", t0, t4)):
        parts.setdefault(name, []).append((end - start) * 1000)
    parts.setdefault("read", []).append(read.read)
    return actions


def start_redis() -> tuple[subprocess.Popen[bytes], str, str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    tmp = tempfile.mkdtemp(prefix="bench-wd-redis-")
    sock = f"{tmp}/redis.sock"
    proc = subprocess.Popen([binary, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
                             "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"unix://{sock}"
    deadline = time.monotonic() + 20
    while True:
        try:
            if redis.Redis.from_url(url).ping():
                return proc, url, tmp
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # startup poll of a process we just started, bounded by the deadline


PROFILES = (("20% active", 5, 60.0), ("all active", 1, 60.0), ("all active, long turns", 1, 600.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args()
    server = start_redis()
    if server is None:
        print("redis-server is not installed: the full scan needs it", file=sys.stderr)
        return 2
    client = redis.Redis.from_url(server[1])
    rows = []
    worst_total = 0.0
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            for profile, every, turn_age in PROFILES:
                tasks, jobs, pods, states, planted = synthetic(n, every, turn_age)
                client.flushall()
                fill_redis(client, states)
                parts: dict[str, list[float]] = {}
                actions = full_scan(client, tasks, jobs, pods, {})  # warm-up (script loads)
                for _ in range(args.repeat):
                    actions = full_scan(client, tasks, jobs, pods, parts)
                assert len(actions) == planted, f"scan found {len(actions)} of {planted} planted stuck items"
                med = {name: statistics.median(values) for name, values in parts.items()}
                worst_total = max(worst_total, med["total"] if n <= 10_000 else 0)
                running = sum(st.status == "running" for st in states.values())
                rows.append((n, profile, sum(map(len, jobs.values())), running, med, max(parts["total"]),
                             int(med["read"]), len(actions)))
    finally:
        server[0].terminate()
        server[0].wait()
        shutil.rmtree(server[2], ignore_errors=True)
    header = ("tasks", "profile", "jobs", "running", "snapshot ms", "plan ms", "redis ms", "scan ms", "total ms",
              "total max", "states read", "actions")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for n, profile, njobs, running, med, tmax, nread, nact in rows:
        print(f"| {n:,} | {profile} | {njobs:,} | {running:,} | {med['snapshot']:.1f} | {med['plan']:.1f} | "
              f"{med['redis']:.1f} | {med['scan']:.1f} | {med['total']:.1f} | {tmax:.1f} | {nread:,} | {nact} |")
    print(f"\nmedian of {args.repeat} full scans; target total <= 100 ms at 10,000 tasks: "
          f"{'met' if worst_total <= 100 else 'MISSED'} (worst median {worst_total:.1f} ms)")
    return 0 if worst_total <= 100 else 1


if __name__ == "__main__":
    sys.exit(main())
