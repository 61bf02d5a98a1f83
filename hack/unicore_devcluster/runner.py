"""PodRunner: the kubelet's part. Runs pods bound to the fake nodes as local processes.

For each pod bound to one of its nodes it runs the first container's command and args as a local process (in
its own process group) with the pod's env and a kubeconfig holding a TokenRequest token for the pod's
ServiceAccount, reports Running then Succeeded/Failed with the exit code through pods/status, keeps the output
in a log file, and on deletion sends SIGTERM, waits the grace period, sends SIGKILL and force-deletes the pod.
Beside it: what it knows of a pod (``pod_process``), the status bodies (``pod_status``), the kubeconfig
(``pod_kubeconfig``)."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from unicore_devcluster.log import logger
from unicore_devcluster.pod_kubeconfig import pod_kubeconfig
from unicore_devcluster.pod_process import Key, PodProcess, container_exit_code, now
from unicore_devcluster.pod_status import (
    running_status,
    setup_failure_status,
    terminated_status,
    waiting_status,
)
from unicore_devcluster.podenv import PodSetupError, build_plan
from unicore_devcluster.procs import Child, signal_group, spawn

WATCH_SECONDS = 30
STOP_GRACE = 5.0


def default_path() -> str:
    """PATH for pod processes: the current interpreter's bin dir (the project venv) first."""
    parts = [str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")]
    return os.pathsep.join(parts)


class PodRunner:
    """Runs the pods bound to ``node_names`` (see module doc). Start with ``start()``, stop with
    ``stop()``."""

    def __init__(
        self,
        api_client: Any,
        node_names: set[str],
        data_dir: Path,
        *,
        server: str,
        ca_file: Path,
        path: str | None = None,
    ) -> None:
        self.api = api_client
        self.core: Any = client.CoreV1Api(api_client)
        self.node_names = set(node_names)
        self.data_dir = Path(data_dir)
        self.server = server
        self.ca_file = ca_file
        self.path = path or default_path()
        self._queue: queue.Queue[Key | None] = queue.Queue()
        self._lock = threading.Lock()
        self._pods: dict[Key, PodProcess] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch: watch.Watch | None = None

    # ------------------------------------------------------------------ public API
    def start(self) -> None:
        for target, name in (
            (self._work, "devcluster-runner"),
            (self._watch_loop, "devcluster-runner-watch"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop watching and terminate every pod process (SIGTERM, SIGKILL after a short grace)."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._queue.put(None)
        for thread in self._threads:
            if thread.name == "devcluster-runner":
                thread.join(timeout=30)
        with self._lock:
            pods = list(self._pods.values())
        stoppers = [
            threading.Thread(target=self._kill, args=(pod, STOP_GRACE), daemon=True)
            for pod in pods
            if pod.child
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(timeout=STOP_GRACE + 10)

    def pids(self) -> dict[Key, int]:
        """The pids of the pod processes that are running now."""
        with self._lock:
            return {key: pod.pid for key, pod in self._pods.items() if pod.pid is not None and pod.running()}

    def pid_of(self, namespace: str, name: str) -> int | None:
        with self._lock:
            pod = self._pods.get((namespace, name))
            return pod.pid if pod else None

    def log_path(self, namespace: str, name: str, container: str | None = None) -> Path | None:
        """The log file of the pod's container (the newest pod of that name), None if it never ran."""
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is not None and (container is None or container == pod.container):
                return pod.log_path
        candidates = sorted(
            (self.data_dir / "pods").glob(f"{namespace}_{name}_*/{container or '*'}.log"),
            key=lambda p: p.stat().st_mtime,
        )
        return candidates[-1] if candidates else None

    def read_log(self, namespace: str, name: str, container: str | None = None) -> str:
        path = self.log_path(namespace, name, container)
        return path.read_text(errors="replace") if path and path.exists() else ""

    # ------------------------------------------------------------------ watching
    def _on_our_node(self, pod: Any) -> bool:
        return bool(pod.spec and pod.spec.node_name in self.node_names)

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.core.list_pod_for_all_namespaces()
                for pod in listing.items:
                    if self._on_our_node(pod):
                        self._enqueue((pod.metadata.namespace, pod.metadata.name))
                with self._lock:
                    for key in self._pods:
                        self._enqueue(key)
                self._watch = watch.Watch()
                for event in self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    if self._stop.is_set():
                        break
                    pod = event["object"]
                    key = (pod.metadata.namespace, pod.metadata.name)
                    if self._on_our_node(pod) or key in self._pods:
                        self._enqueue(key)
            except Exception as exc:  # noqa: BLE001 - relist after any watch failure
                if self._stop.is_set():
                    return
                logger.debug("pod watch restarting after %r", exc)
                self._stop.wait(0.5)

    def _enqueue(self, key: Key) -> None:
        self._queue.put(key)

    # ------------------------------------------------------------------ reconciling
    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                key = self._queue.get(timeout=1.0)
            except queue.Empty:
                self._due_restarts()
                continue
            if key is None:
                return
            try:
                self._reconcile(key)
            except Exception:  # noqa: BLE001 - one pod must not stop the runner
                logger.exception("reconciling pod %s/%s failed; retrying", *key)
                retry = threading.Timer(1.0, self._enqueue, args=(key,))
                retry.daemon = True
                retry.start()
            self._due_restarts()

    def _due_restarts(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [
                pod.key
                for pod in self._pods.values()
                if pod.restart_due is not None and pod.restart_due <= now
            ]
        for key in due:
            self._enqueue(key)

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            resp = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(resp.data)

    def _reconcile(self, key: Key) -> None:
        namespace, name = key
        pod = self._read(namespace, name)
        with self._lock:
            tracked = self._pods.get(key)
        if pod is None or (tracked is not None and pod["metadata"]["uid"] != tracked.uid):
            if tracked is not None:  # gone (or replaced by a new pod of the same name) behind our back
                self._untrack(tracked, grace=0.0)
            if pod is None:
                return
            tracked = None
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        if spec.get("nodeName") not in self.node_names:
            return
        if meta.get("deletionTimestamp"):
            self._handle_deletion(pod, tracked)
            return
        if tracked is None:
            if status.get("phase") in ("Succeeded", "Failed"):
                return
            if status.get("phase") == "Running":  # a pod an earlier runner started: its process is gone
                self._report_lost(pod)
                return
            self._launch(pod, None)
            return
        if tracked.running() or tracked.terminating:
            return
        if tracked.child is not None and not tracked.reported_exit:
            self._report_exit(pod, tracked)
        if tracked.restart_due is not None and time.monotonic() >= tracked.restart_due:
            tracked.restart_due = None
            tracked.restart_count += 1
            self._launch(pod, tracked)

    def _untrack(self, tracked: PodProcess, grace: float) -> None:
        with self._lock:
            self._pods.pop(tracked.key, None)
        if tracked.child is not None and tracked.running():
            threading.Thread(target=self._kill, args=(tracked, grace), daemon=True).start()

    # ------------------------------------------------------------------ start
    def _launch(self, pod: dict[str, Any], previous: PodProcess | None) -> None:
        meta, spec = pod["metadata"], pod.get("spec", {})
        container = (spec.get("containers") or [{}])[0]
        pod_dir = self.data_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        tracked = previous or PodProcess(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            container=container.get("name", "main"),
            image=container.get("image", ""),
            restart_policy=spec.get("restartPolicy", "Always"),
            pod_dir=pod_dir,
            log_path=pod_dir / f"{container.get('name', 'main')}.log",
        )
        with self._lock:
            self._pods[tracked.key] = tracked
        try:
            kubeconfig = pod_kubeconfig(self.core, pod, pod_dir, server=self.server, ca_file=self.ca_file)
            plan = build_plan(pod, self.core, pod_dir, path=self.path, kubeconfig=kubeconfig)
        except PodSetupError as exc:
            logger.warning("pod %s/%s cannot start: %s", tracked.namespace, tracked.name, exc)
            tracked.failed_setup = True
            tracked.reported_exit = True
            tracked.exit_code = 128
            self._patch_status(tracked, setup_failure_status(tracked, exc))
            return
        except Exception:
            # a transient API error: forget a new pod (the retry starts afresh), retry a restart later
            with self._lock:
                if previous is None:
                    self._pods.pop(tracked.key, None)
                else:
                    tracked.restart_due = time.monotonic() + 1.0
            raise
        tracked.started_at = now()
        tracked.exit_code = None
        tracked.reported_exit = False
        tracked.child = spawn(
            f"pod {tracked.namespace}/{tracked.name}",
            plan.argv,
            log_path=tracked.log_path,
            env=plan.env,
            cwd=plan.cwd,
        )
        logger.info(
            "pod %s/%s: started %s (pid %d)", tracked.namespace, tracked.name, plan.argv[0], tracked.child.pid
        )
        threading.Thread(target=self._await_exit, args=(tracked, tracked.child), daemon=True).start()
        self._patch_status(tracked, running_status(tracked))

    def _await_exit(self, tracked: PodProcess, child: Child) -> None:
        code = child.popen.wait()
        # members of its process group that outlived it go with it
        signal_group(child.pid, signal.SIGKILL)
        tracked.exit_code = container_exit_code(code)
        tracked.finished_at = now()
        logger.info("pod %s/%s: process exited with %d", tracked.namespace, tracked.name, tracked.exit_code)
        self._enqueue(tracked.key)

    # ------------------------------------------------------------------ exit, deletion
    def _needs_restart(self, tracked: PodProcess) -> bool:
        if tracked.restart_policy == "Always":
            return True
        return tracked.restart_policy == "OnFailure" and tracked.exit_code != 0

    def _report_exit(self, pod: dict[str, Any], tracked: PodProcess) -> None:
        tracked.reported_exit = True
        tracked.history.append(tracked.exit_code or 0)
        if self._needs_restart(tracked) and not pod["metadata"].get("deletionTimestamp"):
            backoff = min(30.0, 1.0 * (2 ** min(tracked.restart_count, 5)))
            tracked.restart_due = time.monotonic() + backoff
            self._patch_status(tracked, waiting_status(tracked))
            return
        self._patch_status(tracked, terminated_status(tracked))

    def _report_lost(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        container = (pod.get("spec", {}).get("containers") or [{}])[0]
        lost = PodProcess(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            container=container.get("name", "main"),
            image=container.get("image", ""),
            restart_policy="Never",
            pod_dir=self.data_dir,
            log_path=self.data_dir,
            exit_code=137,
            finished_at=now(),
            started_at=now(),
        )
        self._patch_status(lost, terminated_status(lost, reason="RunnerRestarted"))

    def _handle_deletion(self, pod: dict[str, Any], tracked: PodProcess | None) -> None:
        if tracked is not None and tracked.running():
            if not tracked.terminating:
                tracked.terminating = True
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                if grace is None:
                    grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
                logger.info("pod %s/%s deleted: SIGTERM, grace %ss", tracked.namespace, tracked.name, grace)
                threading.Thread(
                    target=self._kill_then_requeue, args=(tracked, float(grace)), daemon=True
                ).start()
            return
        if tracked is not None and tracked.child is not None and not tracked.reported_exit:
            tracked.reported_exit = True
            self._patch_status(tracked, terminated_status(tracked))
        self._force_delete(pod)
        with self._lock:
            if tracked is not None:
                self._pods.pop(tracked.key, None)

    def _kill(self, tracked: PodProcess, grace: float) -> None:
        if tracked.child is not None:
            tracked.child.stop(grace)

    def _kill_then_requeue(self, tracked: PodProcess, grace: float) -> None:
        self._kill(tracked, grace)
        # wait until _await_exit recorded the exit code, then let the worker finish the deletion
        deadline = time.monotonic() + 5
        while tracked.exit_code is None and time.monotonic() < deadline:
            time.sleep(0.02)
        tracked.terminating = False
        self._enqueue(tracked.key)

    def _force_delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                ),
            )
            logger.info("pod %s/%s removed", meta["namespace"], meta["name"])
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    # ------------------------------------------------------------------ status
    def _patch_status(self, tracked: PodProcess, status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(tracked.name, tracked.namespace, {"status": status})
        except ApiException as exc:
            if exc.status != 404:
                raise


def remove_pod_dirs(data_dir: Path) -> None:
    shutil.rmtree(Path(data_dir) / "pods", ignore_errors=True)
