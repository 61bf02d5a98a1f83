"""Benchmark: warm start of the local control plane (binaries cached) and the latency of a GPU Job.

    python bench/bench_control_plane.py [--runs 3]

For each run: start a DevCluster in a fresh folder (etcd, kube-apiserver, kube-controller-manager, kube-
scheduler, GPU + CPU nodes, pod runner) until ready; create a Job asking for one GPU and time it to Complete;
stop everything. Prints a table and the median warm start.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client
from unicore_devcluster import DevCluster
from unicore_devcluster.binaries import find_bin_dir
from unicore_devcluster.wait import wait_until

TARGET_SECONDS = 15.0


def gpu_job_seconds(cluster: DevCluster) -> float:
    api = cluster.api_client()
    try:
        batch = client.BatchV1Api(api)
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "bench"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "tolerations": [
                            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                        ],
                        "containers": [
                            {
                                "name": "main",
                                "image": "bench",
                                "command": ["true"],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    }
                },
            },
        }
        begin = time.monotonic()
        batch.create_namespaced_job("default", job)

        def complete() -> bool:
            conditions = batch.read_namespaced_job_status("bench", "default").status.conditions or []
            return any(c.type == "Complete" and c.status == "True" for c in conditions)

        wait_until(complete, timeout=60, what="bench Job Complete", interval=0.02, max_interval=0.05)
        return time.monotonic() - begin
    finally:
        api.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    bin_dir = find_bin_dir()  # builds once if needed: not part of the measurement
    rows = []
    for run in range(1, args.runs + 1):
        data_dir = Path(tempfile.mkdtemp(prefix="unicore-bench-cp-"))
        cluster = DevCluster(data_dir, bin_dir)
        begin = time.monotonic()
        try:
            cluster.start()
            ready = time.monotonic() - begin
            api_ready = cluster.control_plane.ready_seconds or 0.0
            job = gpu_job_seconds(cluster)
        finally:
            stop_begin = time.monotonic()
            cluster.stop()
            stop = time.monotonic() - stop_begin
            shutil.rmtree(data_dir, ignore_errors=True)
        rows.append((run, api_ready, ready, job, stop))

    print("Control plane (unicore_devcluster, Kubernetes v1.36.3, binaries cached)")
    print(
        f"{'run':>3}  {'control plane ready s':>21}  {'+nodes schedulable s':>20}  "
        f"{'GPU Job Complete s':>18}  "
        f"{'stop s':>6}"
    )
    for run, api_ready, ready, job, stop in rows:
        print(f"{run:>3}  {api_ready:>21.2f}  {ready:>20.2f}  {job:>18.2f}  {stop:>6.2f}")
    median = statistics.median(r[2] for r in rows)
    print(f"warm start to ready (median of {len(rows)}): {median:.2f} s (target <= {TARGET_SECONDS:.0f} s)")
    return 0 if median <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
