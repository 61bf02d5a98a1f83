"""DevCluster: control plane + GPU/CPU nodes + pod runner, and its state file for other processes."""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path
from typing import Any

from unicore_devcluster.launcher import ControlPlane
from unicore_devcluster.log import logger
from unicore_devcluster.logserver import KubeletLogServer
from unicore_devcluster.node_teardown import cleanup_leftovers
from unicore_devcluster.nodes import DEFAULT_NODES, NodeAgent, NodeSpec
from unicore_devcluster.procs import alive, start_time, terminate
from unicore_devcluster.realnode import RealNode
from unicore_devcluster.runner import PodRunner
from unicore_devcluster.wait import wait_until

STATE_FILE = "devcluster.json"


def default_data_dir() -> Path:
    """``$UNICORE_DEVCLUSTER_DIR``, else ``${UNICORE_CACHE:-~/.cache/unicore}/devcluster``."""
    explicit = os.environ.get("UNICORE_DEVCLUSTER_DIR")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("UNICORE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "unicore")
    return Path(cache) / "devcluster"


def read_state(data_dir: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The state a running DevCluster wrote into ``data_dir`` (None when none is there)."""
    path = Path(data_dir or default_data_dir()) / STATE_FILE
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def supervisor_alive(state: dict[str, Any]) -> bool:
    sup = state.get("supervisor", {})
    return bool(sup) and alive(int(sup["pid"]), sup.get("started"))


class DevCluster:
    """A real control plane plus a GPU node and a CPU node whose pods run as local processes, and/or a real node.

    ``real_node=True`` also starts a RealNode (containerd, kubelet, kube-proxy, CoreDNS, local-path volumes; see
    realnode.py), with the API server advertising this host's IP so its pods reach it; ``nodes=()`` leaves the
    fake nodes and the pod runner out, so every pod runs as a real container.

    Owned (``DevCluster(dir).start()``): this process runs everything and ``stop()`` ends it all.
    Attached (``attach(dir)``): uses a cluster another process started (``unicore-devcluster up``);
    ``stop()`` does
    nothing.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        nodes: tuple[NodeSpec, ...] = DEFAULT_NODES,
        *,
        real_node: bool = False,
        real_node_gpus: int = 4,
    ) -> None:
        self.data_dir = Path(data_dir or default_data_dir()).resolve()
        self.nodes = nodes
        self.node_ip: str | None = None
        if real_node:
            from unicore_devcluster.node_host import node_ip

            self.node_ip = node_ip()
            if self.node_ip is None:
                raise RuntimeError("a real node needs a non-loopback IPv4 address on this host")
        self.want_real_node = real_node
        self.real_node_gpus = real_node_gpus
        self.real_node: RealNode | None = None
        self.control_plane = ControlPlane(self.data_dir, bin_dir, advertise_address=self.node_ip)
        self.node_agent: NodeAgent | None = None
        self.runner: PodRunner | None = None
        self.log_server: KubeletLogServer | None = None
        self.owned = True
        self.ready_seconds: float | None = None
        self._api: Any = None
        self._attached_state: dict[str, Any] | None = None

    # ------------------------------------------------------------------ properties
    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    @property
    def bin_dir(self) -> Path:
        return self.control_plane.bin_dir

    @property
    def server(self) -> str:
        if self._attached_state:
            return str(self._attached_state["server"])
        return self.control_plane.server

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` for the cluster admin (close it when done)."""
        return self.control_plane.api_client()

    def env(self) -> dict[str, str]:
        """Environment for tools and subprocesses: KUBECONFIG and KUBEBUILDER_ASSETS (the binaries, helm
        too)."""
        return {"KUBECONFIG": str(self.kubeconfig), "KUBEBUILDER_ASSETS": str(self.bin_dir)}

    def pids(self) -> dict[str, int]:
        """The pids of the control-plane processes (and of pod processes, as ``pod:<ns>/<name>``)."""
        if self._attached_state:
            return {name: int(p["pid"]) for name, p in self._attached_state["processes"].items()}
        out = self.control_plane.pids()
        if self.runner is not None:
            out.update({f"pod:{ns}/{name}": pid for (ns, name), pid in self.runner.pids().items()})
        if self.real_node is not None:
            out.update({f"node:{name}": pid for name, pid in self.real_node.pids().items()})
        return out

    def log_path(self, namespace: str, pod: str, container: str | None = None) -> Path | None:
        """The log file of a pod's (first) container, None if it never ran here."""
        if self.runner is not None:
            return self.runner.log_path(namespace, pod, container)
        candidates = sorted(
            (self.data_dir / "pods").glob(f"{namespace}_{pod}_*/{container or '*'}.log"),
            key=lambda p: p.stat().st_mtime,
        )
        return candidates[-1] if candidates else None

    def read_log(self, namespace: str, pod: str, container: str | None = None) -> str:
        path = self.log_path(namespace, pod, container)
        return path.read_text(errors="replace") if path and path.exists() else ""

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 90.0) -> DevCluster:
        """Start everything and return once the nodes are schedulable (the calling thread must outlive the
        cluster: children get PR_SET_PDEATHSIG, so they die with the thread that started them)."""
        state = read_state(self.data_dir)
        if state is not None and supervisor_alive(state):
            raise RuntimeError(
                f"a devcluster already runs in {self.data_dir} (pid {state['supervisor']['pid']})"
            )
        begin = time.monotonic()
        atexit.register(self.stop)
        try:
            self.control_plane.start(timeout=timeout)
            cp = self.control_plane
            assert cp.pki is not None
            self._api = cp.api_client()
            if self.want_real_node:
                assert self.node_ip is not None
                self.real_node = RealNode(
                    cp, self.data_dir / "node", node_ip=self.node_ip, gpus=self.real_node_gpus
                )
                self.real_node.start(timeout=max(60.0, timeout - (time.monotonic() - begin)) + 60.0)
            if self.nodes:
                self._start_fake_nodes(begin, timeout)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - begin
        self._write_state(ready=True)
        logger.info("devcluster ready in %.1fs (KUBECONFIG=%s)", self.ready_seconds, self.kubeconfig)
        return self

    def _start_fake_nodes(self, begin: float, timeout: float) -> None:
        """The GPU and CPU nodes kept Ready by heartbeats, the pod runner and its kubelet log endpoint."""
        cp = self.control_plane
        assert cp.pki is not None
        self.runner = PodRunner(
            self._api,
            {n.name for n in self.nodes},
            self.data_dir,
            server=cp.server,
            ca_file=cp.pki.ca.cert,
        )
        self.runner.start()
        self.log_server = KubeletLogServer(
            cp.ports["kubelet"],
            cp.pki.kubelet_serving.cert,
            cp.pki.kubelet_serving.key,
            cp.pki.ca.cert,
            self.log_path,
            lambda ns, name: bool(
                self.runner
                and self.runner.pid_of(ns, name) is not None
                and (ns, name) in self.runner.pids()
            ),
        )
        self.log_server.start()
        self.node_agent = NodeAgent(self._api, self.nodes, kubelet_port=cp.ports["kubelet"])
        self.node_agent.start()
        self._wait_nodes_schedulable(max(5.0, timeout - (time.monotonic() - begin)))

    def _wait_nodes_schedulable(self, timeout: float) -> None:
        from kubernetes import client

        core: Any = client.CoreV1Api(self._api)
        names = {n.name for n in self.nodes}
        bad = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}

        def schedulable() -> bool:
            nodes = {n.metadata.name: n for n in core.list_node().items}
            for name in names:
                node = nodes.get(name)
                if node is None:
                    return False
                if any(t.key in bad for t in (node.spec.taints or [])):
                    return False
            return True

        wait_until(schedulable, timeout=timeout, what="nodes Ready without not-ready taints")

    def stop(self) -> None:
        """Stop pods, heartbeats and the control plane (reverse order); safe to call twice."""
        if not self.owned:
            return
        atexit.unregister(self.stop)
        if self.real_node is not None:
            self.real_node.stop()
            self.real_node = None
        if self.runner is not None:
            self.runner.stop()
            self.runner = None
        if self.node_agent is not None:
            self.node_agent.stop()
            self.node_agent = None
        if self.log_server is not None:
            self.log_server.stop()
            self.log_server = None
        if self._api is not None:
            self._api.close()
            self._api = None
        self.control_plane.stop()
        try:
            (self.data_dir / STATE_FILE).unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_state(self, ready: bool) -> None:
        pid = os.getpid()
        state = {
            "ready": ready,
            "ready_seconds": self.ready_seconds,
            "supervisor": {"pid": pid, "started": start_time(pid)},
            "processes": {
                name: {"pid": child.pid, "started": child.started}
                for name, child in self.control_plane.children.items()
            },
            "kubeconfig": str(self.kubeconfig),
            "server": self.control_plane.server,
            "bin_dir": str(self.bin_dir),
            "data_dir": str(self.data_dir),
            "nodes": [n.name for n in self.nodes],
            "real_node": (
                {
                    "name": self.real_node.name,
                    "node_ip": self.real_node.node_ip,
                    "state_dir": str(self.real_node.state_dir),
                    "bin_dir": str(self.real_node.bin_dir),
                    "processes": {
                        name: {"pid": pid, "started": start_time(pid)}
                        for name, pid in self.real_node.pids().items()
                    },
                }
                if self.real_node is not None
                else None
            ),
        }
        path = self.data_dir / STATE_FILE
        tmp = path.with_name(f".{STATE_FILE}.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, path)


def attach(data_dir: str | os.PathLike[str] | None = None) -> DevCluster:
    """A DevCluster handle on a cluster that another process runs (``unicore-devcluster up``)."""
    state = read_state(data_dir)
    if state is None or not supervisor_alive(state):
        raise RuntimeError(f"no running devcluster in {data_dir or default_data_dir()}")
    cluster = DevCluster.__new__(DevCluster)
    cluster.data_dir = Path(state["data_dir"])
    cluster.nodes = tuple(n for n in DEFAULT_NODES if n.name in state.get("nodes", []))
    cluster.node_ip = (state.get("real_node") or {}).get("node_ip")
    cluster.want_real_node = bool(state.get("real_node"))
    cluster.real_node_gpus = 0
    cluster.real_node = None
    cluster.control_plane = ControlPlane(cluster.data_dir, state["bin_dir"])
    cluster.control_plane.kubeconfig = Path(state["kubeconfig"])
    cluster.node_agent = None
    cluster.runner = None
    cluster.log_server = None
    cluster.owned = False
    cluster.ready_seconds = state.get("ready_seconds")
    cluster._api = None
    cluster._attached_state = state
    return cluster


def stop_running(data_dir: str | os.PathLike[str] | None = None, timeout: float = 60.0) -> bool:
    """Stop the cluster running in ``data_dir`` from any process; True if there was one."""
    path = Path(data_dir or default_data_dir())
    state = read_state(path)
    if state is None:
        return False
    sup = state.get("supervisor", {})
    if sup:
        # the supervisor stops its pods, heartbeats and control plane in order
        terminate(int(sup["pid"]), sup.get("started"), timeout)
    real = state.get("real_node") or {}
    procs = {**state.get("processes", {}), **{f"node:{k}": v for k, v in real.get("processes", {}).items()}}
    for name, proc in reversed(list(procs.items())):
        if alive(int(proc["pid"]), proc.get("started")):
            logger.warning("%s (pid %s) outlived the supervisor; stopping it", name, proc["pid"])
            terminate(int(proc["pid"]), proc.get("started"), 10.0)
    if real:
        # a supervisor that stopped in order left nothing; one that was killed left containers, rules, mounts
        cleanup_leftovers(real["state_dir"], real.get("bin_dir"))
    try:
        (path / STATE_FILE).unlink()
    except FileNotFoundError:
        pass
    return True
