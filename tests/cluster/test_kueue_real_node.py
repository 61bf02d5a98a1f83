"""Kueue v0.17 for real (issue 29 #4): its manager, built from its module (hack/build-kueue.sh), runs as a host process
against the real node's control plane (hack/unicore_devcluster/kueue.py) with its own webhooks and internal
certificate management; a LocalQueue ``gpu-queue`` feeds the ClusterQueue ``gpu-cluster-queue`` of 2 GPUs.

- a plain batch/v1 Job with the queue label comes back from create suspended (Kueue's mutating webhook, called by
  the API server through the Service in front of the host process), then Kueue admits its Workload on the flavor
  (adding the flavor's node label to the pod template) and the Job runs to completion as a real container;
- three Jobs of 1 GPU each against the 2 GPUs: a watch of the Jobs never sees more than 2 unsuspended and unfinished
  at once (and sees 2), the third's Workload waits with QuotaReserved False, reason Pending, for lack of GPU quota;
  once the running ones finish (they wait for a file the test writes), the third is admitted and all complete.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from unicore_devcluster import kueue as kq

from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

GPU_LABEL = {"nvidia.com/gpu.present": "true"}  # the real node's GPU label (realnode.default_labels)


def gpu_job(cluster: Any, name: str, script: str, **volumes: Any) -> dict[str, Any]:
    """A batch/v1 Job asking 1 GPU in LocalQueue gpu-queue, running ``script`` in the node's busybox image."""
    container: dict[str, Any] = {
        "name": "main", "image": cluster.real_node.busybox_image, "imagePullPolicy": "Never",
        "command": ["sh", "-c", script], "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if volumes:
        container["volumeMounts"] = [{"name": n, "mountPath": v["mountPath"]} for n, v in volumes.items()]
        spec["volumes"] = [{"name": n, "hostPath": {"path": v["hostPath"], "type": "Directory"}}
                           for n, v in volumes.items()]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {kq.QUEUE_LABEL: kq.LOCAL_QUEUE}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 300, "template": {"spec": spec}},
    }


def workload_of(custom: Any, namespace: str, job: Any) -> dict[str, Any] | None:
    """The Workload Kueue made for ``job`` (its owner), None before."""
    items = custom.list_namespaced_custom_object(kq.GROUP, kq.API_VERSION, namespace, "workloads")["items"]
    return next((w for w in items if any(ref.get("uid") == job.metadata.uid
                                         for ref in w["metadata"].get("ownerReferences") or [])), None)


def finished(job: Any) -> bool:
    return any(c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or [])


def completed(job: Any) -> bool:
    return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])


@pytest.fixture
def apis(cluster: Any) -> Iterator[tuple[Any, Any, Any]]:
    api = cluster.api_client()
    yield client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
    api.close()


def test_a_queued_job_is_suspended_at_create_then_admitted_by_kueue_and_runs(
    kueue: kq.KueueManager, cluster: Any, k8s_namespace: str, apis: tuple[Any, Any, Any],
) -> None:
    batch, core, custom = apis
    kueue.ensure_queues(k8s_namespace, gpus=2, node_labels=GPU_LABEL)
    created = batch.create_namespaced_job(k8s_namespace, gpu_job(cluster, "one", "echo ran-under-kueue"))
    assert created.spec.suspend is True  # set by Kueue's webhook: the Job asked for nothing of the kind

    def admitted() -> dict[str, Any] | None:
        wl = workload_of(custom, k8s_namespace, created)
        return wl if kq.condition(wl, "Admitted").get("status") == "True" else None

    wl = wait_for(admitted, timeout=60, interval=0.2, what="Kueue to admit the Job's Workload")
    assert wl["spec"]["queueName"] == kq.LOCAL_QUEUE
    admission = wl["status"]["admission"]
    assert admission["clusterQueue"] == kq.CLUSTER_QUEUE
    [podset] = admission["podSetAssignments"]
    assert podset["flavors"]["nvidia.com/gpu"] == kq.FLAVOR and podset["resourceUsage"]["nvidia.com/gpu"] == "1"

    done = wait_for(lambda: (j := batch.read_namespaced_job("one", k8s_namespace)) and finished(j) and j,
                    timeout=120, interval=0.2, what="the admitted Job to finish")
    assert completed(done) and done.spec.suspend is False and done.status.succeeded == 1, done.status
    [pod] = core.list_namespaced_pod(k8s_namespace, label_selector="job-name=one").items
    assert pod.spec.node_selector == GPU_LABEL  # the flavor's nodeLabels: Kueue put them in the Job's pod template
    assert pod.spec.node_name == cluster.real_node.name
    assert core.read_namespaced_pod_log(pod.metadata.name, k8s_namespace).strip() == "ran-under-kueue"
    wait_for(lambda: kq.condition(workload_of(custom, k8s_namespace, created), "Finished").get("status") == "True",
             timeout=30, interval=0.2, what="the Workload Finished")


class JobWatch:
    """Watches the namespace's Jobs (its own connection) and keeps the most that were ever unsuspended and unfinished
    at once. A watch the server ends (its timeout, a dropped connection) resumes from the last resourceVersion seen,
    so no event is missed; one the server cannot resume (410 Gone) is an error."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        self.api = cluster.api_client()
        self.batch = client.BatchV1Api(self.api)
        self.namespace = namespace
        self.state: dict[str, tuple[bool, bool]] = {}  # name -> (unsuspended, finished)
        self.most = 0
        self.running_sets: list[set[str]] = []
        self.resumed = 0
        self.version = self.batch.list_namespaced_job(namespace).metadata.resource_version
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(self.batch.list_namespaced_job, self.namespace,
                                           resource_version=self.version, timeout_seconds=5):
                    job = event["object"]
                    self.version = job.metadata.resource_version
                    self.state[job.metadata.name] = (job.spec.suspend is False, finished(job))
                    now = {name for name, (unsuspended, done) in self.state.items() if unsuspended and not done}
                    if now and (not self.running_sets or now != self.running_sets[-1]):
                        self.running_sets.append(now)
                    self.most = max(self.most, len(now))
            except client.ApiException as exc:  # 410 Gone: events were lost
                self.error = exc
                return
            except Exception:  # noqa: BLE001 - a dropped connection: resume from self.version
                self.resumed += 1

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)
        self.api.close()
        assert not self._thread.is_alive() and self.error is None, self.error


def test_three_one_gpu_jobs_share_two_gpus_one_waits_pending_and_all_complete(
    kueue: kq.KueueManager, cluster: Any, k8s_namespace: str, apis: tuple[Any, Any, Any], tmp_path: Path,
) -> None:
    batch, core, custom = apis
    kueue.ensure_queues(k8s_namespace, gpus=2)
    gate = tmp_path / "gate"
    gate.mkdir()
    jobs = JobWatch(cluster, k8s_namespace)
    # each Job holds its GPU until the test writes /gate/open: which two run first is Kueue's choice
    script = "echo started; until [ -e /gate/open ]; do sleep 0.2; done; echo done"
    names = ["gpu-a", "gpu-b", "gpu-c"]
    created = {n: batch.create_namespaced_job(
        k8s_namespace, gpu_job(cluster, n, script, gate={"mountPath": "/gate", "hostPath": str(gate)}))
        for n in names}
    assert all(job.spec.suspend is True for job in created.values())

    def two_running_one_pending() -> tuple[list[str], dict[str, Any]] | None:
        pods = core.list_namespaced_pod(k8s_namespace).items
        running = sorted(p.metadata.labels["job-name"] for p in pods if p.status.phase == "Running")
        waiting = [n for n in names if n not in running]
        if len(running) != 2 or len(waiting) != 1:
            return None
        quota = kq.condition(workload_of(custom, k8s_namespace, created[waiting[0]]), "QuotaReserved")
        return (running, quota) if quota.get("status") == "False" else None

    running, quota = wait_for(two_running_one_pending, timeout=90, interval=0.2,
                              what="two Jobs running and the third's Workload without quota")
    [third] = [n for n in names if n not in running]
    assert quota["reason"] == "Pending", quota
    assert "insufficient unused quota for nvidia.com/gpu" in quota["message"], quota
    assert batch.read_namespaced_job(third, k8s_namespace).spec.suspend is True
    assert not core.list_namespaced_pod(k8s_namespace, label_selector=f"job-name={third}").items

    (gate / "open").touch()
    wait_for(lambda: all(completed(batch.read_namespaced_job(n, k8s_namespace)) for n in names), timeout=180,
             interval=0.2, what="all three Jobs to complete")
    jobs.stop()
    print(f"Jobs running at once, as watched ({jobs.resumed} watch resumptions): {jobs.running_sets}")
    assert jobs.most == 2, jobs.running_sets  # never 3 at once, and the quota's 2 were used
    assert any(third in s for s in jobs.running_sets), jobs.running_sets  # the third ran after one of the others

    def all_finished() -> list[dict[str, Any]] | None:
        conds = [kq.condition(workload_of(custom, k8s_namespace, created[n]), "Finished") for n in names]
        return conds if all(c.get("status") == "True" for c in conds) else None

    finished_conditions = wait_for(all_finished, timeout=30, interval=0.2, what="the three Workloads Finished")
    assert [c["reason"] for c in finished_conditions] == ["Succeeded"] * 3, finished_conditions
