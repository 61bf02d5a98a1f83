"""Start a private, real 3-master Redis Cluster (``redis-server`` in cluster mode + ``redis-cli --cluster create``).

The binaries are the ones ``tests.redis_server`` uses (hack/bootstrap.sh installs Debian's ``redis-server``
package, which ships ``redis-cli`` too). Each node listens on 127.0.0.1 on a free port and keeps its cluster
config file in a private temporary directory; nothing is persisted.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import redis

from tests.waiting import wait_for

MASTERS = 3


def _free_port() -> int:
    # The cluster bus listens on port + 10000, so the data port must leave room for it (<= 55535).
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + 10000 <= 65535 and _is_free(port + 10000):
            return port


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class RedisClusterServer:
    """Three cluster-mode masters, slots split by ``redis-cli --cluster create``; ``url`` names the cluster in
    UniCore's ``REDIS_URL`` form (``redis+cluster://host:port``), ``seed_url`` is the plain URL of the first node."""

    def __init__(self, directory: Path | None = None) -> None:
        binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if binary is None or cli is None:
            raise RuntimeError("redis-server / redis-cli not on PATH; run hack/bootstrap.sh (it installs them)")
        self.dir = directory or Path(tempfile.mkdtemp(prefix="unicore-redis-cluster-"))
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for i in range(MASTERS):
                port = _free_port()
                while port in self.ports:
                    port = _free_port()
                node_dir = self.dir / f"node-{i}"
                node_dir.mkdir(parents=True, exist_ok=True)
                self.ports.append(port)
                self.procs.append(subprocess.Popen(
                    [binary, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                     "--cluster-config-file", str(node_dir / "nodes.conf"), "--cluster-node-timeout", "5000",
                     "--dir", str(node_dir), "--save", "", "--appendonly", "no"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))
            for port in self.ports:
                wait_for(lambda port=port: self._ping(port), timeout=20, what=f"cluster node :{port} to answer PING")
            created = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports), "--cluster-replicas", "0",
                 "--cluster-yes"],
                capture_output=True, text=True, timeout=60,
            )
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout}\n{created.stderr}")
            wait_for(self._all_ok, timeout=30, what="cluster_state:ok on every node")
        except BaseException:
            self.stop()
            raise
        self.host = "127.0.0.1"
        self.url = f"redis+cluster://127.0.0.1:{self.ports[0]}"
        self.seed_url = f"redis://127.0.0.1:{self.ports[0]}"

    def _node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, decode_responses=True)

    def _ping(self, port: int) -> bool:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a cluster redis-server exited with {proc.returncode}")
        with self._node(port) as node:
            return bool(node.ping())

    def _all_ok(self) -> bool:
        for port in self.ports:
            with self._node(port) as node:
                info = node.execute_command("CLUSTER INFO")  # redis-py parses the reply into a dict
                state = info.get("cluster_state") if isinstance(info, dict) else None
                if state != "ok":
                    return False
        return True

    def flush(self) -> None:
        """FLUSHALL on every master (a test starts from an empty cluster)."""
        for port in self.ports:
            with self._node(port) as node:
                node.flushall()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
