"""RealNode: a real kubelet node for the local control plane (containerd, kubelet, kube-proxy, CoreDNS, local-path).

Given a started ControlPlane (one that advertises this host's IP, so pods reach the API server), ``start()``

1. writes the node's certificates (``system:node:<name>`` client and a serving certificate for the node IP, a
   ``system:kube-proxy`` client, a client for CoreDNS), kubeconfigs, the kubelet and kube-proxy configurations and
   the CNI network (bridge ``unicore0`` + host-local, POD_CIDR), all under one state folder;
2. adds the isolation chain (pods reach the node and each other, nothing beyond), makes the kubelet's cgroup root;
3. starts containerd (``ContainerdRuntime``) with that CNI config and imports the pause and busybox images;
4. starts the kubelet, waits for the Node, patches ``nvidia.com/gpu`` capacity into its status;
5. starts kube-proxy (iptables mode), then CoreDNS as a host process on ``<node IP>:<port>`` behind the
   ``kube-system/kube-dns`` Service at DNS_SERVICE_IP (a selector-less Service whose EndpointSlice names the host
   process, so kube-proxy carries 10.0.0.10:53 to it), and the local-path provisioner with its default
   StorageClass;
6. waits until the node is Ready without a not-ready taint.

``stop()`` removes every trace: the kubelet first, then every pod sandbox over CRI (containers, CNI DEL, netns),
kube-proxy and its rules, CoreDNS, containerd, leftover shims, the cgroups, mounts under the state folder, the
bridge, the iptables chains (KUBE-*, UNICORE-NODE), and ``ip_forward`` as it was. ``cleanup_leftovers`` does the
same from the state folder alone, after a supervisor that was killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from unicore_devcluster import node_host as host
from unicore_devcluster import pki as pki_mod
from unicore_devcluster.binaries import find_node_bin_dir
from unicore_devcluster.kubeconfig import write_kubeconfig
from unicore_devcluster.launcher import ControlPlane, free_port
from unicore_devcluster.localpath import LocalPathProvisioner
from unicore_devcluster.log import logger
from unicore_devcluster.node_config import (
    CGROUP_ROOT,
    RUNNING_MARKER,
    NodePaths,
    cni_conflist,
    corefile,
    isolation_rules,
    kube_proxy_config,
    kubelet_config,
    resolv_upstreams,
)
from unicore_devcluster.node_objects import (
    apply_coredns_rbac,
    apply_dns_service,
    delete_node_objects,
    ensure_storage_class,
)
from unicore_devcluster.node_teardown import cleanup_leftovers, pids_naming, remove_host_state
from unicore_devcluster.procs import Child, spawn
from unicore_devcluster.wait import WaitTimeout, wait_until

NODE_NAME = "unicore-node-0"
GPU_RESOURCE = "nvidia.com/gpu"
COREDNS_USER = "system:unicore-coredns"
STOP_GRACE = {"kubelet": 10.0, "kube-proxy": 5.0, "coredns": 5.0}


class RealNodeError(RuntimeError):
    """The real node could not start (the message says which part and shows its log)."""


def default_labels(gpus: int) -> dict[str, str]:
    if gpus <= 0:
        return {}
    return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(gpus)}


class RealNode:
    """One real node on this host, registered with ``control_plane``; see the module doc."""

    def __init__(
        self,
        control_plane: ControlPlane,
        state_dir: str | os.PathLike[str],
        *,
        node_ip: str,
        bin_dir: str | os.PathLike[str] | None = None,
        name: str = NODE_NAME,
        gpus: int = 4,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.control_plane = control_plane
        self.paths = NodePaths(Path(state_dir).resolve())
        self.node_ip = node_ip
        self.bin_dir = Path(bin_dir) if bin_dir else find_node_bin_dir()
        self.name = name
        self.gpus = gpus
        self.labels = default_labels(gpus) if labels is None else labels
        self.children: dict[str, Child] = {}
        self.runtime: Any = None
        self.provisioner: LocalPathProvisioner | None = None
        self.ports: dict[str, int] = {}
        self.images: dict[str, str] = {}
        self.ready_seconds: float | None = None
        self._api: Any = None
        self._ip_forward_before = ""
        self._started = False

    # ------------------------------------------------------------------ properties
    @property
    def state_dir(self) -> Path:
        return self.paths.state_dir

    @property
    def pause_image(self) -> str:
        return (self.bin_dir / "images" / "pause.name").read_text().strip()

    @property
    def busybox_image(self) -> str:
        return (self.bin_dir / "images" / "busybox.name").read_text().strip()

    @property
    def runtime_endpoint(self) -> str:
        return f"unix://{self.runtime.socket}" if self.runtime is not None else ""

    def pids(self) -> dict[str, int]:
        out = {name: child.pid for name, child in self.children.items()}
        if self.runtime is not None:
            for pid in pids_naming(str(self.runtime.socket.parent / "config.toml")):
                out["containerd"] = pid
        return out

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join((self.paths.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def cri(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``unicore-cri --endpoint <containerd> ARGS`` (pods, ps, stop ID [S], remove-all)."""
        return subprocess.run(  # noqa: S603 - our own tool
            [str(self.bin_dir / "unicore-cri"), "--endpoint", self.runtime_endpoint, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    # ------------------------------------------------------------------ start
    def start(self, timeout: float = 180.0) -> RealNode:
        begin = time.monotonic()
        deadline = begin + timeout
        reason = host.unavailable_reason()
        if reason:
            raise RealNodeError(f"this host cannot run a real node: {reason}")
        self._started = True
        try:
            cleanup_leftovers(self.state_dir, self.bin_dir)
            self._prepare()
            self._start_containerd(deadline)
            self._start_kubelet(deadline)
            self._start_kube_proxy(deadline)
            self._start_dns(deadline)
            self._start_local_path()
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - begin
        logger.info("real node %s ready in %.1fs (node IP %s)", self.name, self.ready_seconds, self.node_ip)
        return self

    def _left(self, deadline: float) -> float:
        return max(1.0, deadline - time.monotonic())

    def _prepare(self) -> None:
        cp = self.control_plane
        if cp.pki is None:
            raise RealNodeError("the control plane is not started")
        paths = self.paths
        for sub in (paths.config_dir, paths.logs, paths.cni_conf_dir, paths.cni_ipam_dir, paths.volumes):
            sub.mkdir(parents=True, exist_ok=True)
        certs = paths.config_dir / "pki"
        ca = cp.pki.ca
        node_client = pki_mod.issue(
            ca, certs, "kubelet-client", f"system:node:{self.name}", ("system:nodes",), client=True
        )
        self.serving = pki_mod.issue(
            ca,
            certs,
            "kubelet-serving",
            f"system:node:{self.name}",
            ("system:nodes",),
            server=True,
            dns=(self.name, "localhost"),
            ips=(self.node_ip, "127.0.0.1"),
        )
        proxy_client = pki_mod.issue(ca, certs, "kube-proxy", "system:kube-proxy", client=True)
        dns_client = pki_mod.issue(ca, certs, "coredns", COREDNS_USER, client=True)
        for stem, pair, user in (
            ("kubelet", node_client, f"system:node:{self.name}"),
            ("kube-proxy", proxy_client, "system:kube-proxy"),
            ("coredns", dns_client, COREDNS_USER),
        ):
            write_kubeconfig(
                paths.config_dir / f"{stem}.kubeconfig",
                server=cp.server,
                ca_file=ca.cert,
                user=user,
                cert_file=pair.cert,
                key_file=pair.key,
            )
        for name in ("kubelet", "kubelet_healthz", "proxy_healthz", "proxy_metrics", "dns", "dns_health", "dns_ready"):
            self.ports[name] = free_port()
        conf = paths.cni_conf_dir / "10-unicore-node.conflist"
        conf.write_text(json.dumps(cni_conflist(ipam_dir=paths.cni_ipam_dir), indent=2))
        (paths.config_dir / RUNNING_MARKER).write_text(str(os.getpid()))
        self._ip_forward_before = host.read_ip_forward()
        (paths.config_dir / "ip_forward.before").write_text(self._ip_forward_before)
        host.add_isolation(isolation_rules())
        host.make_cgroup_root(CGROUP_ROOT)
        self._api = cp.api_client()

    def _start_containerd(self, deadline: float) -> None:
        from unicore_devcluster.containerd import ContainerdRuntime

        self.runtime = ContainerdRuntime(
            self.state_dir / "containerd",
            root_dir=self.state_dir / "containerd-root",
            sandbox_image=self.pause_image,
            cni_conf_dir=self.paths.cni_conf_dir,
        )
        self.runtime.start(timeout=self._left(deadline))
        for archive in ("pause", "busybox"):
            self.runtime.import_image(self.bin_dir / "images" / f"{archive}.tar")
            self.images[archive] = (self.bin_dir / "images" / f"{archive}.name").read_text().strip()

    def _spawn(self, name: str, args: list[str]) -> Child:
        child = spawn(name, [str(self.bin_dir / name), *args], log_path=self.paths.logs / f"{name}.log")
        self.children[name] = child
        logger.debug("started %s (pid %d)", name, child.pid)
        return child

    def _wait(self, name: str, probe: Any, deadline: float, what: str) -> Any:
        def check() -> Any:
            child = self.children.get(name)
            if child is not None and not child.running():
                raise RealNodeError(f"{name} exited with {child.popen.returncode}; log:\n{self.log_tail(name)}")
            return probe()

        try:
            return wait_until(check, timeout=self._left(deadline), what=what, interval=0.1, max_interval=0.5)
        except WaitTimeout as exc:
            raise RealNodeError(f"{exc}; last {name} log lines:\n{self.log_tail(name)}") from exc

    def _healthz(self, url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _start_kubelet(self, deadline: float) -> None:
        from kubernetes import client

        cp, paths = self.control_plane, self.paths
        assert cp.pki is not None
        config = kubelet_config(
            node_ip=self.node_ip,
            port=self.ports["kubelet"],
            healthz_port=self.ports["kubelet_healthz"],
            ca_file=cp.pki.ca.cert,
            tls_cert=self.serving.cert,
            tls_key=self.serving.key,
            runtime_socket=Path(self.runtime.socket),
            pod_logs_dir=paths.pod_logs,
            cgroup_root=f"/{CGROUP_ROOT}",
        )
        config_file = paths.config_dir / "kubelet.yaml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        args = [
            f"--config={config_file}",
            f"--kubeconfig={paths.config_dir / 'kubelet.kubeconfig'}",
            f"--root-dir={paths.kubelet_root}",
            f"--node-ip={self.node_ip}",
            f"--hostname-override={self.name}",
            "--v=1",
        ]
        if self.labels:
            args.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(self.labels.items())))
        self._spawn("kubelet", args)
        core: Any = client.CoreV1Api(self._api)
        self._wait("kubelet", lambda: core.read_node(self.name), deadline, f"node {self.name} registered")
        if self.gpus > 0:
            self._wait(
                "kubelet",
                lambda: core.patch_node_status(
                    self.name,
                    [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(self.gpus)}],
                ),
                deadline,
                f"{GPU_RESOURCE} capacity patched",
            )

    def _start_kube_proxy(self, deadline: float) -> None:
        paths = self.paths
        config = kube_proxy_config(
            kubeconfig=paths.config_dir / "kube-proxy.kubeconfig",
            node_name=self.name,
            node_ip=self.node_ip,
            healthz_port=self.ports["proxy_healthz"],
            metrics_port=self.ports["proxy_metrics"],
        )
        config_file = paths.config_dir / "kube-proxy.yaml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn("kube-proxy", [f"--config={config_file}", "--v=1"])
        url = f"http://127.0.0.1:{self.ports['proxy_healthz']}/healthz"
        self._wait("kube-proxy", lambda: self._healthz(url), deadline, "kube-proxy /healthz (rules synced)")

    def _start_dns(self, deadline: float) -> None:
        paths = self.paths
        apply_coredns_rbac(self._api, COREDNS_USER)
        try:
            upstreams = resolv_upstreams(Path("/etc/resolv.conf").read_text())
        except OSError:
            upstreams = []
        conf = paths.config_dir / "Corefile"
        conf.write_text(
            corefile(
                node_ip=self.node_ip,
                port=self.ports["dns"],
                health_port=self.ports["dns_health"],
                ready_port=self.ports["dns_ready"],
                kubeconfig=paths.config_dir / "coredns.kubeconfig",
                upstreams=upstreams,
            )
        )
        self._spawn("coredns", ["-conf", str(conf)])
        apply_dns_service(self._api, self.node_ip, self.ports["dns"], self.name)
        url = f"http://127.0.0.1:{self.ports['dns_ready']}/ready"
        self._wait("coredns", lambda: self._healthz(url), deadline, "CoreDNS /ready (kubernetes plugin synced)")

    def _start_local_path(self) -> None:
        ensure_storage_class(self._api)
        self.provisioner = LocalPathProvisioner(self._api, self.name, self.paths.volumes)
        self.provisioner.start()

    def _wait_ready(self, deadline: float) -> None:
        from kubernetes import client

        core: Any = client.CoreV1Api(self._api)
        bad = {
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "node.kubernetes.io/network-unavailable",
        }

        def ready() -> bool:
            node = core.read_node(self.name)
            conditions = {c.type: c.status for c in node.status.conditions or []}
            if conditions.get("Ready") != "True":
                return False
            if any(t.key in bad for t in node.spec.taints or []):
                return False
            return self.gpus <= 0 or (node.status.allocatable or {}).get(GPU_RESOURCE) == str(self.gpus)

        self._wait("kubelet", ready, deadline, f"node {self.name} Ready, untainted, with {self.gpus} GPUs")

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Tear everything down (see the module doc); safe to call twice."""
        if not self._started:
            return
        self._started = False
        if self.provisioner is not None:
            self.provisioner.stop()
            self.provisioner = None
        kubelet = self.children.pop("kubelet", None)
        if kubelet is not None:
            kubelet.stop(STOP_GRACE["kubelet"])
        if self.runtime is not None:
            try:
                removed = self.cri("remove-all", timeout=120)
                if removed.returncode != 0:
                    logger.warning("removing the pod sandboxes: %s", removed.stderr.strip())
            except (OSError, subprocess.TimeoutExpired) as exc:
                logger.warning("removing the pod sandboxes: %s", exc)
        for name in reversed(list(self.children)):
            self.children[name].stop(STOP_GRACE.get(name, 5.0))
        self.children.clear()
        if self.runtime is not None:
            try:
                self.runtime.stop()
            except Exception as exc:  # noqa: BLE001 - the rest of the tear-down still runs
                logger.warning("stopping containerd: %s", exc)
            self.runtime = None
        self._delete_api_objects()
        remove_host_state(self.state_dir, self.bin_dir, self._ip_forward_before)
        (self.paths.config_dir / RUNNING_MARKER).unlink(missing_ok=True)

    def _delete_api_objects(self) -> None:
        if self._api is None:
            return
        delete_node_objects(self._api, self.name)
        self._api.close()
        self._api = None
