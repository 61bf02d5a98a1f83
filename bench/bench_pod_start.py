"""Turn pod start-up on the real node, next to a raw busybox Job on the same node in the same run.

A turn Job as the operator builds it (``job_builder.build_turn_job_spec``: the agent image, restricted security
context, resources, one GPU, the ServiceAccount token) for a task whose model is ``openai:bench``, served by an HTTP
endpoint on the node IP that notes when the first request arrives. For each turn: Job created (the create call
returned) -> pod created (its ADDED watch event) -> pod Running (watched) -> turn process started (its turn header's
``started_at``, written when it drains its inbox) -> first model request (arrival at the endpoint). Interleaved with
a busybox Job (``true``) on the same node: Job created -> pod created -> pod Running -> Succeeded, and a turn Job
whose task may use run_command (its pod has the workbench: the exec server's install init container and the sidecar,
issue 28). One Job at a time;
each is deleted before the next. Images are imported, never pulled (the anchor: Kubernetes' pod start-up SLO, p99 of
pod created -> running, observed by a watch, <= 5 s without image pulls).

Usage: .venv/bin/python bench/bench_pod_start.py [--turns 50]
Needs a host that can run the real node (root, cgroup v1, ...) and no other kubelet; else it says why and exits 0.
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
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes import client, watch  # noqa: E402
from unicore.api.schema import TaskSpec  # noqa: E402
from unicore.store.tasks import TaskStore, connect  # noqa: E402
from unicore_devcluster import node_host  # noqa: E402
from unicore_devcluster.cluster import DevCluster  # noqa: E402
from unicore_devcluster.node_images import build_images, load_images  # noqa: E402
from unicore_operator.job_builder import build_turn_job_spec  # noqa: E402
from unicore_operator.settings import OperatorSettings  # noqa: E402

from tests.cluster.real_node import NodeRedis  # noqa: E402

NAMESPACE = "bench"
ANSWER = {
    "id": "c", "object": "chat.completion", "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class FirstRequestClock:
    """An OpenAI-compatible endpoint on ``host`` that notes the wall-clock time of the first request of each turn
    (recognised by its prompt, unique per turn) and answers with a final text."""

    def __init__(self, host: str) -> None:
        self.arrivals: dict[str, float] = {}
        clock = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                now = time.time()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                text = json.dumps(body.get("messages", []))
                for key in list(clock.expected):
                    if key in text:
                        clock.arrivals.setdefault(key, now)
                answer = json.dumps(ANSWER).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.expected: set[str] = set()
        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class PodClock:
    """Watches the namespace's pods and notes, per Job, when its pod was first seen, seen Running, seen ended."""

    def __init__(self, api: Any) -> None:
        self.core = client.CoreV1Api(api)
        self.seen: dict[str, dict[str, float]] = {}
        self.lock = threading.Lock()
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # noqa: BLE001 - the stream ends with the cluster; a real failure shows as a timeout
            return

    def _watch(self) -> None:
        for event in self.watch.stream(self.core.list_namespaced_pod, NAMESPACE, timeout_seconds=0):
            now = time.time()
            pod = event["object"]
            job = (pod.metadata.labels or {}).get("job-name")
            if not job:
                continue
            with self.lock:
                marks = self.seen.setdefault(job, {})
                marks.setdefault("pod", now)
                if pod.status.phase == "Running":
                    marks.setdefault("running", now)
                if pod.status.phase in ("Succeeded", "Failed"):
                    marks.setdefault("running", now)  # a container so short it was never seen Running
                    marks.setdefault("ended", now)
                    marks.setdefault("failed" if pod.status.phase == "Failed" else "succeeded", now)

    def marks(self, job: str) -> dict[str, float]:
        with self.lock:
            return dict(self.seen.get(job, {}))

    def stop(self) -> None:
        self.watch.stop()


def settings_sa() -> str:
    return str(OperatorSettings.model_fields["agent_service_account"].default)


def wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_busybox(batch: Any, pods: PodClock, image: str, n: int) -> dict[str, float]:
    name = f"busybox-{n}"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never",
               "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never", "command": ["true"]}]}}}}
    batch.create_namespaced_job(NAMESPACE, job)
    created = time.time()
    marks = wait(lambda: (m := pods.marks(name)) and "ended" in m and m, 120, f"Job {name} to end")
    if "failed" in marks:
        raise RuntimeError(f"busybox Job {name} failed")
    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")
    return {"created": created, **marks}


def run_turn(batch: Any, pods: PodClock, store: TaskStore, endpoint: FirstRequestClock,
             settings: OperatorSettings, n: int, workbench: bool = False) -> dict[str, float]:
    name = f"turn-{n}" + ("-wb" if workbench else "")
    tid = f"{NAMESPACE}/{name}"
    key = f"bench prompt {uuid.uuid4().hex}"
    endpoint.expected.add(key)
    tools = ["read_file", "run_command"] if workbench else None  # run_command: the pod gets a workbench (issue 28)
    store.create_task(TaskSpec(id=tid, prompt=key, model="openai:bench", tools=tools))
    task = {"metadata": {"name": name, "namespace": NAMESPACE, "uid": str(uuid.uuid4())},
            "spec": {"prompt": key, "model": "openai:bench", **({"tools": tools} if tools else {})}}
    job = build_turn_job_spec(task, 1, settings)
    job["metadata"].pop("ownerReferences")  # no AgentTask here: the garbage collector would delete the Job
    batch.create_namespaced_job(NAMESPACE, job)
    created = time.time()
    job_name = job["metadata"]["name"]
    marks = wait(lambda: (m := pods.marks(job_name)) and "ended" in m and m, 180, f"Job {job_name} to end")
    if "failed" in marks or key not in endpoint.arrivals:
        raise RuntimeError(f"turn Job {job_name} failed or made no model request")
    turns = store.load_history(tid)
    batch.delete_namespaced_job(job_name, NAMESPACE, propagation_policy="Background")
    return {"created": created, **marks, "started": turns[0].started_at, "request": endpoint.arrivals[key]}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def row(label: str, values: list[float]) -> str:
    return (f"| {label} | {statistics.median(values):.2f} | {quantile(values, 0.99):.2f} | {min(values):.2f} | "
            f"{max(values):.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=50, help="turn Jobs (and as many busybox Jobs), default 50")
    args = parser.parse_args()
    if not 1 <= args.turns <= 1000:
        print("bench_pod_start: --turns takes 1-1000", file=sys.stderr)
        return 2
    reason = node_host.unavailable_reason()
    if reason:
        print(f"bench_pod_start: skipped, this host cannot run a real node: {reason}")
        return 0
    folder = build_images()
    host = node_host.node_ip()
    assert host is not None
    data_dir = Path(tempfile.mkdtemp(prefix="unicore-bench-podstart-"))
    cluster = DevCluster(data_dir, nodes=(), real_node=True)
    redis_server = NodeRedis(host)
    pods: PodClock | None = None
    try:
        cluster.start(timeout=180)
        assert cluster.real_node is not None
        images = load_images(cluster.real_node.runtime, folder, keys=("agent",))
        api = cluster.api_client()
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        wait(lambda: core.list_namespaced_service_account(NAMESPACE).items, 30, "the default ServiceAccount")
        # the turn pods' ServiceAccount (they spawn no children here: no Role needed)
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": settings_sa()}})
        endpoint = FirstRequestClock(host)
        settings = OperatorSettings(
            redis_url=redis_server.url, agent_image=images["agent"].ref, agent_image_pull_policy="Never",
            default_gpus=1, job_ttl_seconds=60,
            agent_extra_env={"OPENAI_BASE_URL": endpoint.url, "OPENAI_API_KEY": "x", "UNICORE_SUMMARIZE_TURNS": "0"},
        )
        store = TaskStore(connect(redis_server.url))
        pods = PodClock(api)
        busybox_image = cluster.real_node.busybox_image
        run_busybox(batch, pods, busybox_image, -1)  # warm-up of both: page cache, first container of an image
        run_turn(batch, pods, store, endpoint, settings, -1)
        run_turn(batch, pods, store, endpoint, settings, -1, workbench=True)
        boxes, turns, benches = [], [], []
        for n in range(args.turns):  # interleaved, so machine load hits all alike
            boxes.append(run_busybox(batch, pods, busybox_image, n))
            turns.append(run_turn(batch, pods, store, endpoint, settings, n))
            benches.append(run_turn(batch, pods, store, endpoint, settings, n, workbench=True))
    finally:
        if pods is not None:
            pods.stop()
        cluster.stop()
        redis_server.stop()

    def span(runs: list[dict[str, float]], start: str, end: str) -> list[float]:
        return [r[end] - r[start] for r in runs]

    print(f"{args.turns} turn Jobs and {args.turns} busybox Jobs, one at a time, on the real node (images imported)\n")
    print("| measure | p50 (s) | p99 (s) | min (s) | max (s) |")
    print("|---|---|---|---|---|")
    print(row("busybox Job: pod created -> Running (the SLO's measure)", span(boxes, "pod", "running")))
    print(row("busybox Job: Job created -> pod Running", span(boxes, "created", "running")))
    print(row("busybox Job: Job created -> Succeeded", span(boxes, "created", "succeeded")))
    print(row("turn Job: pod created -> Running (the SLO's measure)", span(turns, "pod", "running")))
    print(row("turn Job: Job created -> pod Running", span(turns, "created", "running")))
    print(row("turn Job: Job created -> turn process started (inbox drained)", span(turns, "created", "started")))
    print(row("turn Job: Job created -> first model request", span(turns, "created", "request")))
    print(row("turn Job: pod Running -> first model request", span(turns, "running", "request")))
    print(row("turn Job with a workbench: Job created -> pod Running", span(benches, "created", "running")))
    print(row("turn Job with a workbench: Job created -> first model request", span(benches, "created", "request")))
    added = (statistics.median(span(benches, "created", "request"))
             - statistics.median(span(turns, "created", "request")))
    print(f"\nThe workbench (exec server install + sidecar, issue 28) adds {added:.2f} s to a turn's start at p50 "
          "(Job created -> first model request; target: at most 1 s).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
