"""What the cluster tests on the real node share: a Redis that both host processes and pods reach, and small readers
of the node (a pod's containerd container, its logs) and helpers acting on it from outside (kill a container)."""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import redis

from tests.waiting import wait_for


class NodeRedis:
    """A private redis-server on the node IP (so turn pods reach it as the host operator does), with a password
    (the address is on the machine's network). With ``appendfsync`` it keeps an AOF (``everysec``, ``always``), and
    ``crash`` then ``start`` bring it back from that AOF alone on the same address."""

    def __init__(self, host: str, *, appendfsync: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH; run hack/bootstrap.sh (it installs Debian's package)")
        self.dir = Path(tempfile.mkdtemp(prefix="unicore-node-redis-"))
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        password = secrets.token_hex(16)
        persistence = ["--appendonly", "yes", "--appendfsync", appendfsync] if appendfsync else ["--appendonly", "no"]
        self.argv = [binary, "--bind", host, "--port", str(port), "--requirepass", password, "--dir", str(self.dir),
                     "--save", "", *persistence]
        self.url = f"redis://:{password}@{host}:{port}/0"
        self.proc: subprocess.Popen[bytes]
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._ping, timeout=20, what=f"redis-server at {self.argv[2]}:{self.argv[4]} to answer PING")

    def crash(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def _ping(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
        with redis.Redis.from_url(self.url, socket_timeout=2) as probe:
            return bool(probe.ping())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def container_id(pod: Any) -> str:
    """The containerd id of the pod's (first) container, once it has one; "" before."""
    statuses = pod.status.container_statuses or []
    full = str(statuses[0].container_id or "") if statuses else ""
    return full.removeprefix("containerd://")


def kill_container(cluster: Any, cid: str, signal: str = "SIGKILL") -> None:
    """Kill a container's process from outside Kubernetes, with ``ctr tasks kill`` on the node's containerd."""
    node = cluster.real_node
    assert node is not None and node.runtime is not None
    node.runtime.ctr("tasks", "kill", "--signal", signal, cid)


def kill_pod_container(cluster: Any, core: Any, namespace: str, pod_name: str, signal: str = "SIGKILL") -> str:
    """Kill the (first) container of pod ``pod_name`` from outside Kubernetes (``kill_container``), once the kubelet
    reported its containerd id; returns that id. For a lease holder ``<pod name>:<pid>``: its pid is the container's
    own (1), not the host's, so the pod name is what finds the process."""
    cid = str(wait_for(lambda: container_id(core.read_namespaced_pod(pod_name, namespace)), timeout=30,
                       interval=0.1, what=f"pod {pod_name}'s container id"))
    kill_container(cluster, cid, signal)
    return cid
