"""Warm vs cold turn start on the real node (issue 30): an AgentTask created -> its turn's first model request.

The operator runs as a host process against a control plane with the real node (containerd + kubelet, images
imported, never pulled). Two Agents of the same spec, one with ``warmPool: {size: 1}``: each sample creates a task of
the warm Agent (once its pool has a pod that says it waits) and then one of the cold Agent, interleaved, so load hits
both alike. The model is ``openai:bench``, an HTTP endpoint on the node IP that notes when the first request of each
task arrives (its prompt is unique) and answers at once. Measured per task, from the create call: the turn's Job
seen by a watch (cold: the Job ADDED; warm: the warm Job labelled with the task), and the first model request. The
first is the activation path (the create handler queues the prompt, the activation, the reconcile); the second adds
the pod start (cold) or the warm pod's wake-up (warm).

Usage: .venv/bin/python bench/bench_warm_start.py [--samples 20]
Needs a host that can run the real node (root, cgroup v1, ...) and no other kubelet; else it says why and exits 0.
Goal (issue 30): warm p50 at most 50 ms and p99 at most 150 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes import client, watch  # noqa: E402
from unicore.store import warm_pods  # noqa: E402
from unicore.store.tasks import connect  # noqa: E402
from unicore_devcluster import node_host  # noqa: E402
from unicore_devcluster.cluster import DevCluster  # noqa: E402
from unicore_devcluster.node_images import build_images, load_images  # noqa: E402

from bench.bench_pod_start import FirstRequestClock, quantile, wait  # noqa: E402
from tests.cluster.operator_harness import GROUP, VERSION, OperatorProcess, install_agent_rbac, install_crd  # noqa: E402
from tests.cluster.real_node import NodeRedis  # noqa: E402

NAMESPACE = "bench"
POOL_LABEL, TASK_LABEL = "unicore.dev/warm-pool", "unicore.dev/task"


class TurnJobClock:
    """When a watch first saw each task's turn Job: a Job carrying the task's label (a cold one at its creation, a
    warm one when the operator labelled it)."""

    def __init__(self, api: Any) -> None:
        self.seen: dict[str, float] = {}
        self.warm: set[str] = set()
        self.watch = watch.Watch()
        threading.Thread(target=self._run, args=(client.BatchV1Api(api),), daemon=True).start()

    def _run(self, batch: Any) -> None:
        try:
            for event in self.watch.stream(batch.list_namespaced_job, NAMESPACE, timeout_seconds=0):
                now, labels = time.time(), event["object"].metadata.labels or {}
                task = labels.get(TASK_LABEL)
                if task and task not in self.seen:
                    self.seen[task] = now
                    if labels.get(POOL_LABEL):
                        self.warm.add(task)
        except Exception:  # noqa: BLE001 - the stream ends with the cluster
            return


def agent(name: str, pool: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": "openai:bench", "tools": ["read_file"], "gpus": 0}
    if pool:
        spec["warmPool"] = {"size": pool}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Agent", "metadata": {"name": name}, "spec": spec}


def row(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"| {label} | {statistics.median(ms):.0f} | {quantile(ms, 0.99):.0f} | {min(ms):.0f} | {max(ms):.0f} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20, help="warm and cold tasks each, default 20")
    args = parser.parse_args()
    if not 1 <= args.samples <= 500:
        print("bench_warm_start: --samples takes 1-500", file=sys.stderr)
        return 2
    reason = node_host.unavailable_reason()
    if reason:
        print(f"bench_warm_start: skipped, this host cannot run a real node: {reason}")
        return 0
    folder = build_images()
    host = node_host.node_ip()
    assert host is not None
    data = Path(tempfile.mkdtemp(prefix="unicore-bench-warm-"))
    cluster = DevCluster(data / "cluster", nodes=(), real_node=True)
    redis_server = NodeRedis(host)
    operator: OperatorProcess | None = None
    runs: dict[str, dict[str, float]] = {}
    try:
        cluster.start(timeout=180)
        assert cluster.real_node is not None
        load_images(cluster.real_node.runtime, folder, keys=("agent",))
        install_crd(cluster.kubeconfig)
        api = cluster.api_client()
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        wait(lambda: core.list_namespaced_service_account(NAMESPACE).items, 30, "the default ServiceAccount")
        install_agent_rbac(cluster.kubeconfig, NAMESPACE)
        endpoint = FirstRequestClock(host)
        extra = {"OPENAI_BASE_URL": endpoint.url, "OPENAI_API_KEY": "x", "UNICORE_SUMMARIZE_TURNS": "0"}
        operator = OperatorProcess(cluster.kubeconfig, redis_server.url, NAMESPACE, data / "operator.log",
                                   UNICORE_DEFAULT_GPUS="0", UNICORE_AGENT_IMAGE_PULL_POLICY="Never",
                                   UNICORE_AGENT_EXTRA_ENV=json.dumps(extra), UNICORE_JOB_TTL_SECONDS="30").start()
        for spec in (agent("warm", 1), agent("cold", 0)):
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "agents", spec)
        redis = connect(redis_server.url)
        jobs = TurnJobClock(api)

        def waiting_pod() -> bool:
            pods = [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE, label_selector=f"{POOL_LABEL}=warm")
                    .items if p.status.phase == "Running" and not (p.metadata.labels or {}).get(TASK_LABEL)]
            return bool(warm_pods.waiting(redis, NAMESPACE, pods))

        def sample(name: str, agent_name: str) -> None:
            key = f"bench prompt {uuid.uuid4().hex}"
            endpoint.expected.add(key)
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentTask", "metadata": {"name": name},
                    "spec": {"prompt": key, "agentRef": {"name": agent_name}}}
            created = time.time()
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "agenttasks", body)
            wait(lambda: key in endpoint.arrivals and name in jobs.seen, 180, f"task {name}'s first model request")
            runs[name] = {"created": created, "job": jobs.seen[name], "request": endpoint.arrivals[key]}

        for n in range(-1, args.samples):  # -1: a warm-up of each (first containers of the image, page cache)
            wait(waiting_pod, 180, "a warm pod that waits")
            sample(f"w{n + 1}", "warm")
            sample(f"c{n + 1}", "cold")
        missed = sorted(name for name in runs if name.startswith("w") and name not in jobs.warm)
        wrong = sorted(name for name in runs if name.startswith("c") and name in jobs.warm)
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()
        redis_server.stop()
    if missed or wrong:
        print(f"bench_warm_start: warm tasks that went cold {missed}, cold ones that went warm {wrong}",
              file=sys.stderr)
        return 1

    def span(prefix: str, start: str, end: str) -> list[float]:
        return [r[end] - r[start] for name, r in runs.items() if name.startswith(prefix) and name[1:] != "0"]

    warm, cold = span("w", "created", "request"), span("c", "created", "request")
    activation = span("c", "created", "job") + span("w", "created", "job")
    print(f"{args.samples} warm and {args.samples} cold tasks, interleaved, on the real node (images imported)\n")
    print("| measure | p50 (ms) | p99 (ms) | min (ms) | max (ms) |")
    print("|---|---|---|---|---|")
    print(row("activation path: task created -> its turn Job seen (warm and cold)", activation))
    print(row("cold: task created -> first model request", cold))
    print(row("warm: task created -> first model request", warm))
    print(row("warm: turn Job seen -> first model request", span("w", "job", "request")))
    anchor = statistics.median(activation)
    warm_p50, cold_p50 = statistics.median(warm), statistics.median(cold)
    print(f"\nratio to the activation path's p50 ({anchor * 1000:.0f} ms): warm {warm_p50 / anchor:.2f}x, "
          f"cold {cold_p50 / anchor:.2f}x; warm p50 {warm_p50 * 1000:.0f} ms (goal 50), "
          f"p99 {quantile(warm, 0.99) * 1000:.0f} ms (goal 150)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
