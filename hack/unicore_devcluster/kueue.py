"""Kueue's manager as a HOST process against a running DevCluster (the real node's control plane), with its webhooks
behind the API server and its own internal certificate management, and the test cluster's GPU queues.

    kueue = KueueManager(cluster, find_kueue_dir())    # hack/build-kueue.sh's folder: kueue, crds/, webhook/
    kueue.start(); kueue.wait_ready()
    kueue.ensure_queues("team-a", gpus=2)              # LocalQueue gpu-queue in team-a -> ClusterQueue of 2 GPUs
    ...                                                # Jobs labelled kueue.x-k8s.io/queue-name=gpu-queue
    kueue.stop()

``start()`` installs, as Kueue's release manifests do (config/default, kustomize's ``kueue-`` prefix and namespace):

- the CRDs (server-side apply: they are too large for a client-side apply's annotation), with the conversion
  webhook the release patches into five of them (``CONVERTED``: Kueue serves v1beta1 and v1beta2 of those, and its
  cert rotator refuses to report ready until it has injected its CA into each one's conversion webhook), the
  namespace ``kueue-system`` and the empty Secret ``kueue-webhook-server-cert`` (the rotator only updates it);
- the webhook Service ``kueue-webhook-service``: selector-less, with an Endpoints object naming this host's
  non-loopback IP and the manager's webhook port (and a never-scheduled placeholder Pod as its targetRef), as
  operator_endpoint.py does for the host operator: the API server, run with ``--enable-aggregator-routing``, calls a
  webhook Service at its endpoints, not at a cluster IP (nothing routes cluster IPs to a host process);
- ``kueue-mutating-webhook-configuration`` and ``kueue-validating-webhook-configuration``: the module's
  config/components/webhook/manifests.yaml, renamed as the release renames them, with only the webhooks of what runs
  here (batch/v1 Jobs and Kueue's own kinds), an empty caBundle (the rotator patches it, finding them by these
  names), the Job webhooks scoped to the namespaces ``ensure_queues`` labels (``unicore.dev/kueue: enabled``);
- the manager's Configuration (internal cert management on, for that Service and Secret; the ``batch/job``
  integration only; Jobs without a queue name left alone; Jobs only in the labelled namespaces
  (``managedJobsNamespaceSelector``, which Kueue's reconciler honours for queue-named Jobs too: feature
  ManagedJobsNamespaceSelectorAlwaysRespected, on by default); no leader election; metrics and health probes on
  free loopback ports; the visibility API server off: it would bind port 8082 and needs an APIService), and starts
  ``kueue --config`` with the cluster's admin kubeconfig (so no RBAC), its log in
  ``<cluster data dir>/kueue/kueue.log``.

In a cluster the kubelet mounts that Secret into the manager's pod at its cert dir; here a thread of this process
does the kubelet's part: it copies the Secret's ``tls.crt``, ``tls.key`` and ``ca.crt`` into ``<data dir>/kueue/certs``
whenever the rotator writes them (the manager waits for ``tls.crt`` there before it serves or reports ready).

``stop()`` ends the process and deletes the two webhook configurations (they fail closed: with the manager gone,
every Job create in a labelled namespace would be refused); the CRDs, the namespace, the queues and any Workloads
are left to the cluster's tear-down (or to the next ``start()``, which applies everything again).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from unicore.api import contract

from unicore_devcluster.launcher import free_port
from unicore_devcluster.log import logger
from unicore_devcluster.procs import Child, spawn
from unicore_devcluster.wait import wait_until

VERSION = "v0.17.0"
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "build-kueue.sh"
REQUIRED = ("kueue", "crds", "webhook/manifests.yaml")

NAMESPACE = "kueue-system"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"  # noqa: S105 - a Secret's name
MUTATING = "kueue-mutating-webhook-configuration"
VALIDATING = "kueue-validating-webhook-configuration"
PLACEHOLDER = "kueue-controller-manager-host"
HOST_PROCESS_GATE = contract.HOST_PROCESS_GATE  # as the operator's placeholder

GROUP = "kueue.x-k8s.io"
API_VERSION = "v1beta2"
QUEUE_LABEL = f"{GROUP}/queue-name"
MANAGED_LABEL = contract.KUEUE_MANAGED_LABEL  # namespaces whose Jobs this Kueue manages (ensure_queues sets it)
MANAGED_VALUE = "enabled"
GPU = "nvidia.com/gpu"
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "gpu-cluster-queue"
LOCAL_QUEUE = "gpu-queue"
# the webhooks kept from manifests.yaml: the API groups of what runs here (batch/job; Kueue's own kinds)
SERVED_GROUPS = {"batch", GROUP}
# the CRDs whose conversion webhook the release adds (config/components/crd/kustomization.yaml, patches/webhook_in_*)
# and whose caBundle Kueue's rotator injects (pkg/util/cert/cert.go)
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
SECRET_FILES = ("ca.crt", "tls.key", "tls.crt")  # tls.crt last: the manager waits for it
LABELS = {contract.NAME_LABEL: "kueue", contract.COMPONENT_LABEL: "unicore-devcluster-host-process"}


class KueueError(RuntimeError):
    """Kueue could not be built, started, or did not become ready."""


def find_kueue_dir(build: bool = True) -> Path:
    """The folder of ``hack/build-kueue.sh`` (the manager, its CRDs and webhook manifests).

    Order: ``$UNICORE_KUEUE_DIR``, then the script (builds what is missing, prints the folder) when ``build``."""
    value = os.environ.get("UNICORE_KUEUE_DIR")
    if value and all((Path(value) / name).exists() for name in REQUIRED):
        return Path(value)
    if build and BUILD_SCRIPT.is_file():
        logger.info("building/locating Kueue with %s", BUILD_SCRIPT)
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], check=False, stdout=subprocess.PIPE, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode == 0 and lines and all((Path(lines[-1]) / n).exists() for n in REQUIRED):
            return Path(lines[-1])
        raise KueueError(f"{BUILD_SCRIPT} failed (exit {proc.returncode})")
    raise KueueError("Kueue not found: set UNICORE_KUEUE_DIR or run hack/build-kueue.sh")


# ---------------------------------------------------------------------------------------------- manifests
def webhook_configurations(manifests: str, selector_label: str = MANAGED_LABEL,
                           selector_value: str = MANAGED_VALUE) -> list[dict[str, Any]]:
    """The module's webhook manifests as the release names them (``kueue-`` prefix, Service
    ``kueue-system/kueue-webhook-service``), keeping only the webhooks for ``SERVED_GROUPS``, scoped to the
    namespaces labelled ``selector_label=selector_value`` (cluster-scoped kinds are not filtered by it)."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        kind = doc["kind"]
        if kind not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        body = copy.deepcopy(doc)
        body["metadata"] = {"name": MUTATING if kind.startswith("Mutating") else VALIDATING, "labels": LABELS}
        hooks = []
        for hook in body.get("webhooks") or []:
            groups = {g for rule in hook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if not groups or not groups <= SERVED_GROUPS:
                continue
            service = hook["clientConfig"]["service"]
            service["name"], service["namespace"] = WEBHOOK_SERVICE, NAMESPACE
            hook["clientConfig"].pop("caBundle", None)
            if "batch" in groups:
                hook["namespaceSelector"] = {"matchLabels": {selector_label: selector_value}}
            hooks.append(hook)
        body["webhooks"] = hooks
        out.append(body)
    kinds = sorted(b["kind"] for b in out)
    if kinds != ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]:
        raise KueueError(f"webhook manifests: expected one mutating and one validating configuration, got {kinds}")
    return out


def crds(folder: Path) -> list[dict[str, Any]]:
    """The module's CRDs, with the release's conversion webhook on ``CONVERTED`` (at Service
    ``kueue-system/kueue-webhook-service``, path /convert; the rotator fills in the caBundle)."""
    out = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc["metadata"]["name"] in {f"{plural}.{GROUP}" for plural in CONVERTED}:
                doc["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"service": {"namespace": NAMESPACE, "name": WEBHOOK_SERVICE, "path": "/convert"}},
                    "conversionReviewVersions": ["v1"]}}
            out.append(doc)
    return out


def configuration(*, webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path) -> dict[str, Any]:
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2, which Kueue decodes strictly)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "certDir": str(cert_dir)},  # every address: the API server calls the node IP
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                   "webhookSecretName": WEBHOOK_SECRET},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_LABEL: MANAGED_VALUE}},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }


def endpoint_objects(ip: str, port: int) -> dict[str, dict[str, Any]]:
    """Service, placeholder Pod (its status), Endpoints: the webhook Service at ``ip:port`` (operator_endpoint.py's
    pattern)."""
    meta = {"namespace": NAMESPACE, "labels": LABELS}
    return {
        "service": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": WEBHOOK_SERVICE, **meta},
                    "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}]}},
        "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": PLACEHOLDER, **meta},
                "spec": {"schedulingGates": [{"name": HOST_PROCESS_GATE}], "automountServiceAccountToken": False,
                         "containers": [{"name": "manager", "image": "host-process/kueue"}]}},
        "pod_status": {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}},
        "endpoints": {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": WEBHOOK_SERVICE, **meta},
                      "subsets": [{"addresses": [{"ip": ip, "targetRef": {"kind": "Pod", "name": PLACEHOLDER,
                                                                          "namespace": NAMESPACE}}],
                                   "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]},
    }


def queue_objects(namespace: str, gpus: int, *, node_labels: dict[str, str] | None = None,
                  cluster_queue: str = CLUSTER_QUEUE) -> list[dict[str, Any]]:
    """ResourceFlavor ``default-flavor`` (``node_labels``: Kueue adds them to an admitted Job's nodeSelector),
    ClusterQueue ``cluster_queue`` (every namespace; ``gpus`` nvidia.com/gpu, cpu and memory without a practical
    limit) and LocalQueue ``gpu-queue`` in ``namespace``."""
    api = f"{GROUP}/{API_VERSION}"
    flavor: dict[str, Any] = {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}, "spec": {}}
    if node_labels:
        flavor["spec"]["nodeLabels"] = dict(node_labels)
    return [
        flavor,
        {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
         "spec": {"namespaceSelector": {},
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU],
                                      "flavors": [{"name": FLAVOR, "resources": [
                                          {"name": "cpu", "nominalQuota": "1000"},
                                          {"name": "memory", "nominalQuota": "4Ti"},
                                          {"name": GPU, "nominalQuota": str(gpus)}]}]}]}},
        {"apiVersion": api, "kind": "LocalQueue", "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
         "spec": {"clusterQueue": cluster_queue}},
    ]


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    """The status condition ``kind`` of a Kueue object ({} when it has none)."""
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


# ---------------------------------------------------------------------------------------------- the manager
class KueueManager:
    """Kueue's manager for one running DevCluster (see the module doc)."""

    def __init__(self, cluster: Any, bin_dir: str | os.PathLike[str] | None = None) -> None:
        self.cluster = cluster
        self.bin_dir = Path(bin_dir) if bin_dir is not None else find_kueue_dir()
        self.dir = Path(cluster.data_dir) / "kueue"
        self.log_path = self.dir / "kueue.log"
        self.config_path = self.dir / "config.yaml"
        self.cert_dir = self.dir / "certs"
        self.child: Child | None = None
        self._stop_sync = threading.Event()
        self._sync_thread: threading.Thread | None = None
        self.sync_error: BaseException | None = None
        self.webhook_port = 0
        self.health_port = 0
        self.metrics_port = 0
        self.ip = ""

    # ------------------------------------------------------------------ helpers
    def kubectl(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        kubectl = Path(self.cluster.bin_dir) / "kubectl"
        result = subprocess.run(  # noqa: S603 - argv built here
            [str(kubectl), f"--kubeconfig={self.cluster.kubeconfig}", *args], input=input_text,
            capture_output=True, text=True, timeout=120, check=False)
        if result.returncode:
            raise KueueError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Server-side apply (field manager ``unicore-devcluster``), taking over conflicting fields."""
        manifest = {"apiVersion": "v1", "kind": "List", "items": objects}
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=unicore-devcluster", "-f", "-",
                     input_text=json.dumps(manifest))

    def running(self) -> bool:
        return self.child is not None and self.child.running()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KueueManager:
        """Install what Kueue needs (module doc) and start the manager; ``wait_ready()`` waits for it to serve."""
        from unicore_devcluster.operator_endpoint import host_ip

        if self.running():
            return self
        self.dir.mkdir(parents=True, exist_ok=True)
        begin = time.monotonic()
        definitions = crds(self.bin_dir / "crds")
        self.apply(definitions)
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                     *(f"crd/{d['metadata']['name']}" for d in definitions))
        # labelled as managed: wait_ready's probe Job is created (dry run) there
        self.apply([{"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": NAMESPACE, "labels": {MANAGED_LABEL: MANAGED_VALUE}}}])
        self._ensure_secret()
        self.ip = host_ip()
        self.webhook_port, self.health_port, self.metrics_port = free_port(), free_port(), free_port()
        self._expose()
        manifests = (self.bin_dir / "webhook" / "manifests.yaml").read_text()
        self._replace_webhook_configurations(webhook_configurations(manifests))
        self.config_path.write_text(yaml.safe_dump(configuration(
            webhook_port=self.webhook_port, health_port=self.health_port, metrics_port=self.metrics_port,
            cert_dir=self.cert_dir)))
        shutil.rmtree(self.cert_dir, ignore_errors=True)  # only the Secret of this cluster may end up there
        self.cert_dir.mkdir(parents=True)
        self._stop_sync.clear()
        self._sync_thread = threading.Thread(target=self._sync_certs, name="kueue-cert-sync", daemon=True)
        self._sync_thread.start()
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
        self.child = spawn("kueue", [str(self.bin_dir / "kueue"), f"--config={self.config_path}", "--zap-log-level=2"],
                           log_path=self.log_path, env=env)
        logger.info("kueue started (pid %d, webhook %s:%d, log %s) after %.1fs of set-up", self.child.pid, self.ip,
                    self.webhook_port, self.log_path, time.monotonic() - begin)
        return self

    def _ensure_secret(self) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = self.cluster.api_client()
        try:
            core: Any = client.CoreV1Api(api)
            core.create_namespaced_secret(NAMESPACE, {
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "labels": LABELS}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        finally:
            api.close()

    def _sync_certs(self) -> None:
        """The kubelet's part (module doc): the rotator's Secret into ``cert_dir``, file by file, each replaced
        atomically when it changed; until ``stop()``."""
        import base64

        from kubernetes import client

        api = self.cluster.api_client()
        core: Any = client.CoreV1Api(api)
        try:
            while not self._stop_sync.is_set():
                try:
                    data = core.read_namespaced_secret(WEBHOOK_SECRET, NAMESPACE).data or {}
                except Exception as exc:  # noqa: BLE001 - the API server may be restarting; try again
                    logger.debug("kueue cert sync: %s", exc)
                    data = {}
                written = False
                if all(data.get(name) for name in SECRET_FILES):
                    for name in SECRET_FILES:
                        content = base64.b64decode(data[name])
                        path = self.cert_dir / name
                        if not path.exists() or path.read_bytes() != content:
                            tmp = path.with_name(f".{name}.tmp")
                            tmp.write_bytes(content)
                            tmp.chmod(0o600)
                            os.replace(tmp, path)
                    written = True
                self._stop_sync.wait(2.0 if written else 0.1)
        except BaseException as exc:  # noqa: BLE001 - reported by wait_ready
            self.sync_error = exc
        finally:
            api.close()

    def _expose(self) -> None:
        from kubernetes import client

        objs = endpoint_objects(self.ip, self.webhook_port)
        self.apply([objs["service"], objs["pod"], objs["endpoints"]])
        api = self.cluster.api_client()
        try:
            client.CoreV1Api(api).patch_namespaced_pod_status(PLACEHOLDER, NAMESPACE, objs["pod_status"])
        finally:
            api.close()

    def _replace_webhook_configurations(self, bodies: list[dict[str, Any]]) -> None:
        """Delete and create (not apply): a stale caBundle of an earlier run must not survive into this one."""
        self._delete_webhook_configurations()
        for body in bodies:
            self.kubectl("create", "-f", "-", input_text=json.dumps(body))

    def _delete_webhook_configurations(self) -> None:
        self.kubectl("delete", "--ignore-not-found", "--wait=false", f"mutatingwebhookconfiguration/{MUTATING}",
                     f"validatingwebhookconfiguration/{VALIDATING}")

    def _readyz(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:  # noqa: S310
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _ca_bundles(self) -> bool:
        """Both webhook configurations carry the rotator's CA in every webhook."""
        from kubernetes import client

        api = self.cluster.api_client()
        try:
            reg: Any = client.AdmissionregistrationV1Api(api)
            hooks = [*reg.read_mutating_webhook_configuration(MUTATING).webhooks,
                     *reg.read_validating_webhook_configuration(VALIDATING).webhooks]
        finally:
            api.close()
        return bool(hooks) and all(h.client_config.ca_bundle for h in hooks)

    def _probe(self) -> bool:
        """A labelled Job created (dry run) in ``kueue-system`` through the API server comes back suspended by
        Kueue's webhook: the API server reaches the host process and trusts its certificate."""
        from kubernetes import client

        api = self.cluster.api_client()
        try:
            job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"generateName": "kueue-probe-", "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
                   "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                       {"name": "probe", "image": "host-process/probe", "command": ["true"]}]}}}}
            batch: Any = client.BatchV1Api(api)
            created = batch.create_namespaced_job(NAMESPACE, job, dry_run="All")
            return bool(created.spec.suspend)
        finally:
            api.close()

    def wait_ready(self, timeout: float = 120.0) -> KueueManager:
        """Until the manager is ready (its /readyz: certificates in place, webhook server started), the rotator has
        patched both webhook configurations' caBundle, and a dry-run Job through the API server comes back suspended
        by Kueue's webhook. Fails at once, with the log's tail, if the manager exits."""
        begin = time.monotonic()
        deadline = begin + timeout
        for check, what in ((self._readyz, "kueue /readyz"), (self._ca_bundles, "the webhooks' caBundle"),
                            (self._probe, "a dry-run Job suspended by Kueue's webhook")):
            last: Exception | None = None
            while True:
                if self.sync_error is not None:
                    raise KueueError(f"copying kueue's certificates failed: {self.sync_error!r}")
                if not self.running():
                    code = self.child.popen.returncode if self.child else None
                    raise KueueError(f"kueue exited ({code}); its log ({self.log_path}):\n{self.log_tail()}")
                try:
                    if check():
                        break
                except Exception as exc:  # noqa: BLE001 - not there yet; reported on timeout
                    last = exc
                if time.monotonic() > deadline:
                    raise KueueError(f"timed out after {timeout:.0f}s waiting for {what}"
                                     f"{f' (last error: {last!r})' if last else ''}; kueue's log "
                                     f"({self.log_path}):\n{self.log_tail()}")
                time.sleep(0.1)
        logger.info("kueue ready %.1fs after wait_ready began", time.monotonic() - begin)
        return self

    def stop(self) -> None:
        """End the manager and delete its webhook configurations (module doc: the rest stays with the cluster)."""
        child, self.child = self.child, None
        if child is not None:
            child.stop(grace=10.0)
        self._stop_sync.set()
        if self._sync_thread is not None:
            self._sync_thread.join(timeout=30)
            self._sync_thread = None
        try:
            self._delete_webhook_configurations()
        except (KueueError, subprocess.TimeoutExpired, OSError) as exc:  # the cluster may be gone already
            logger.warning("kueue: could not delete its webhook configurations: %s", exc)

    # ------------------------------------------------------------------ queues
    def ensure_queues(self, namespace: str, gpus: int = 2, *, node_labels: dict[str, str] | None = None,
                      cluster_queue: str = CLUSTER_QUEUE, timeout: float = 60.0) -> None:
        """Label ``namespace`` as managed by this Kueue, set ResourceFlavor ``default-flavor``'s ``node_labels`` (none:
        any node), and apply ClusterQueue ``cluster_queue`` (``gpus`` GPUs; applied again, its quota changes) and
        LocalQueue ``gpu-queue`` there; returns once both queues are Active. The flavor and the ClusterQueue are the
        cluster's, shared by every namespace that has a LocalQueue of it."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        self.apply([{"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": namespace, "labels": {MANAGED_LABEL: MANAGED_VALUE}}}])
        flavor, *queues = queue_objects(namespace, gpus, node_labels=node_labels, cluster_queue=cluster_queue)
        api = self.cluster.api_client()
        custom: Any = client.CustomObjectsApi(api)
        try:
            # created, else patched (merge): a server-side apply that drops the labels leaves a null spec, refused
            try:
                custom.create_cluster_custom_object(GROUP, API_VERSION, "resourceflavors", flavor)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                custom.patch_cluster_custom_object(GROUP, API_VERSION, "resourceflavors", FLAVOR,
                                                   {"spec": {"nodeLabels": dict(node_labels) if node_labels else None}})
            self.apply(queues)

            def active() -> bool:
                cq = custom.get_cluster_custom_object(GROUP, API_VERSION, "clusterqueues", cluster_queue)
                lq = custom.get_namespaced_custom_object(GROUP, API_VERSION, namespace, "localqueues", LOCAL_QUEUE)
                quota = [r["nominalQuota"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
                         for r in f["resources"] if r["name"] == GPU]
                return (condition(cq, "Active").get("status") == "True"
                        and condition(lq, "Active").get("status") == "True" and quota == [str(gpus)])

            wait_until(active, timeout=timeout, what=f"ClusterQueue {cluster_queue} and LocalQueue "
                       f"{namespace}/{LOCAL_QUEUE} Active")
        finally:
            api.close()
