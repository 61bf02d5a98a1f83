"""ControlPlane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler as local processes."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from unicore_devcluster import pki as pki_mod
from unicore_devcluster.binaries import find_bin_dir
from unicore_devcluster.kubeconfig import write_kubeconfig
from unicore_devcluster.log import logger
from unicore_devcluster.procs import Child, spawn
from unicore_devcluster.wait import WaitTimeout, wait_until

SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
STOP_GRACE = {"kube-scheduler": 5.0, "kube-controller-manager": 5.0, "kube-apiserver": 15.0, "etcd": 10.0}


class ControlPlaneError(RuntimeError):
    """A control-plane process failed to start or to become ready."""


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_ports = random.SystemRandom()  # never a seeded sequence that another test process would repeat
NODE_PORTS = 30000  # Kubernetes' NodePort range starts here (kube-proxy of a real node)


def free_port() -> int:
    """A TCP port that nothing is bound to right now (on any address), below the kernel's ephemeral range.

    A component binds its port seconds after it was picked (the scheduler only once the API server is ready): a
    port of the ephemeral range (what binding port 0 gives) may meanwhile become the local port of any outgoing
    connection on this busy host, and the component then fails with "address already in use". Below that range
    only another server's explicit pick can take it. Below the NodePort range (30000-32767) too."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = _ports.randint(10000, max(10001, min(low, NODE_PORTS) - 1))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))  # noqa: S104 - a probe, closed at once
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no luck below the range: any free port
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ControlPlane:
    """A real Kubernetes control plane (no nodes, no runner: see DevCluster for those).

    >>> cp = ControlPlane(Path("/tmp/cp")); cp.start(); cp.api_client(); cp.stop()
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        bin_dir: str | os.PathLike[str] | None = None,
        *,
        advertise_address: str | None = None,
    ) -> None:
        """``advertise_address``: a non-loopback address of this host. Then the API server also listens there
        (``--bind-address=0.0.0.0``), advertises it and keeps the ``kubernetes`` Service's endpoints on it (the
        lease reconciler), so pods on a real node reach it at ``kubernetes.default.svc``. Without it the API
        server listens on 127.0.0.1 only and has no endpoints (the pod runner's pods are host processes)."""
        self.data_dir = Path(data_dir).resolve()
        self.advertise_address = advertise_address
        self.bin_dir = Path(bin_dir) if bin_dir else find_bin_dir()
        self.log_dir = self.data_dir / "logs"
        self.pki_dir = self.data_dir / "pki"
        self.kubeconfig = self.data_dir / "admin.kubeconfig"
        self.children: dict[str, Child] = {}
        self.ports: dict[str, int] = {}
        self.pki: pki_mod.Pki | None = None
        self.ready_seconds: float | None = None

    # ------------------------------------------------------------------ public API
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` authenticated as the cluster admin (system:masters)."""
        from unicore.kube_config import load_api_client

        return load_api_client(str(self.kubeconfig))

    def pids(self) -> dict[str, int]:
        return {name: child.pid for name, child in self.children.items()}

    def start(self, timeout: float = 60.0) -> None:
        """Start every process and wait until the control plane serves and its controllers work."""
        begin = time.monotonic()
        deadline = begin + timeout
        try:
            self._prepare()
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            self._start_controllers()
            self._wait_controllers(deadline)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - begin
        logger.info("control plane ready at %s in %.1fs", self.server, self.ready_seconds)

    def stop(self) -> None:
        """Stop the processes in reverse start order (SIGTERM, then SIGKILL after a grace period)."""
        for name in reversed(list(self.children)):
            child = self.children[name]
            code = child.stop(STOP_GRACE.get(name, 10.0))
            logger.debug("%s exited with %s", name, code)
        self.children.clear()

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_dir / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ------------------------------------------------------------------ steps
    def _prepare(self) -> None:
        for sub in ("etcd", "pki", "logs"):
            shutil.rmtree(self.data_dir / sub, ignore_errors=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        extra_ips = (self.advertise_address,) if self.advertise_address else ()
        self.pki = pki_mod.generate(self.pki_dir, extra_ips=extra_ips)
        for name in ("etcd", "etcd_peer", "apiserver", "controller_manager", "scheduler", "kubelet"):
            self.ports[name] = free_port()
        pki = self.pki
        write_kubeconfig(
            self.kubeconfig,
            server=self.server,
            ca_file=pki.ca.cert,
            user="unicore-admin",
            cert_file=pki.admin.cert,
            key_file=pki.admin.key,
        )
        for stem, pair, user in (
            ("controller-manager", pki.controller_manager, "system:kube-controller-manager"),
            ("scheduler", pki.scheduler, "system:kube-scheduler"),
        ):
            write_kubeconfig(
                self.data_dir / f"{stem}.kubeconfig",
                server=self.server,
                ca_file=pki.ca.cert,
                user=user,
                cert_file=pair.cert,
                key_file=pair.key,
            )

    def _spawn(self, name: str, args: list[str]) -> Child:
        child = spawn(name, [str(self.bin_dir / name), *args], log_path=self.log_dir / f"{name}.log")
        self.children[name] = child
        logger.debug("started %s (pid %d)", name, child.pid)
        return child

    def _check_alive(self, name: str) -> None:
        child = self.children[name]
        if not child.running():
            raise ControlPlaneError(
                f"{name} exited with {child.popen.returncode}; last log lines:\n{self.log_tail(name)}"
            )

    def _wait(self, name: str, probe: Any, deadline: float, what: str) -> None:
        def check() -> bool:
            self._check_alive(name)
            return bool(probe())

        try:
            wait_until(
                check,
                timeout=max(0.1, deadline - time.monotonic()),
                what=what,
                interval=0.05,
                max_interval=0.2,
            )
        except WaitTimeout as exc:
            raise ControlPlaneError(f"{exc}; last {name} log lines:\n{self.log_tail(name)}") from exc

    def _start_etcd(self, deadline: float) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd_peer']}"
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.data_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client}/health", timeout=1) as resp:  # noqa: S310 - loopback
                return json.load(resp).get("health") == "true"

        self._wait("etcd", healthy, deadline, "etcd /health")

    def _admission_config(self) -> Path:
        """The API server's admission configuration: it presents the front-proxy client certificate to every
        admission webhook, which the operator's webhook checks as the task API checks its callers (same CA, same
        allowed name: kube-system/extension-apiserver-authentication). JSON, which the API server reads as YAML."""
        assert self.pki is not None
        kubeconfig = self.data_dir / "admission-webhooks.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            # '*': the default for every webhook (a Service's DNS name, or a URL's host:port, would name just one)
            "users": [{"name": "*", "user": {"client-certificate": str(self.pki.front_proxy_client.cert),
                                             "client-key": str(self.pki.front_proxy_client.key)}}],
        }, indent=2))
        webhooks = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
                    "kubeConfigFile": str(kubeconfig)}
        config = self.data_dir / "admission-config.yaml"
        config.write_text(json.dumps({
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{"name": "ValidatingAdmissionWebhook", "configuration": webhooks},
                        {"name": "MutatingAdmissionWebhook", "configuration": webhooks}],
        }, indent=2))
        return config

    def _start_apiserver(self, deadline: float) -> None:
        assert self.pki is not None
        pki = self.pki
        admission_config = self._admission_config()
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                f"--bind-address={'0.0.0.0' if self.advertise_address else '127.0.0.1'}",  # noqa: S104
                f"--advertise-address={self.advertise_address or '127.0.0.1'}",
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={self.data_dir / 'apiserver'}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",  # PodSecurity and the defaults stay on
                f"--admission-control-config-file={admission_config}",  # a client certificate for webhooks
                "--allow-privileged=true",  # PodSecurity, not this flag, decides per namespace
                f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
                f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca.cert}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--endpoint-reconciler-type={'lease' if self.advertise_address else 'none'}",
                # The aggregation layer (APIServices such as the operator's tasks.unicore.dev): the API server
                # authenticates the user, then proxies with its front-proxy client certificate and the user in these
                # headers, which the aggregated API trusts only from that certificate (both published in
                # kube-system/extension-apiserver-authentication). Routing to the Service's endpoints, not its
                # cluster IP: nothing routes cluster IPs to a host-process operator.
                f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
                f"--requestheader-allowed-names={pki_mod.FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-uid-headers=X-Remote-Uid",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                "--enable-aggregator-routing=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
        ctx.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2) as resp:  # noqa: S310
                    return resp.status == 200
            except urllib.error.HTTPError:
                return False

        self._wait("kube-apiserver", ready, deadline, "kube-apiserver /readyz")

    def _start_controllers(self) -> None:
        assert self.pki is not None
        pki = self.pki
        kcm_kubeconfig = self.data_dir / "controller-manager.kubeconfig"
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['controller_manager']}",
                f"--cert-dir={self.data_dir / 'controller-manager'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--root-ca-file={pki.ca.cert}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                "--profiling=false",
                "--v=1",
            ],
        )
        sched_kubeconfig = self.data_dir / "scheduler.kubeconfig"
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={sched_kubeconfig}",
                f"--authentication-kubeconfig={sched_kubeconfig}",
                f"--authorization-kubeconfig={sched_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
                f"--cert-dir={self.data_dir / 'scheduler'}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )

    def _wait_controllers(self, deadline: float) -> None:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        for name, port in (
            ("kube-controller-manager", self.ports["controller_manager"]),
            ("kube-scheduler", self.ports["scheduler"]),
        ):

            def healthy(port: int = port) -> bool:
                try:
                    url = f"https://127.0.0.1:{port}/healthz"
                    with urllib.request.urlopen(url, context=insecure, timeout=2) as resp:  # noqa: S310
                        return resp.status == 200
                except (urllib.error.URLError, OSError):
                    return False

            self._wait(name, healthy, deadline, f"{name} /healthz")

        # the service-account controller works: a new namespace gets its "default" ServiceAccount
        from kubernetes import client

        api = self.api_client()
        try:
            core = client.CoreV1Api(api)
            ns = f"unicore-readyz-{uuid.uuid4().hex[:6]}"
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
            self._wait(
                "kube-controller-manager",
                lambda: core.read_namespaced_service_account("default", ns),
                deadline,
                "the default ServiceAccount in a new namespace",
            )
            core.delete_namespace(ns)
        finally:
            api.close()
