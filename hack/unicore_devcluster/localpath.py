"""A local-path volume provisioner for the real node: PVCs of StorageClass ``local-path`` become hostPath PVs.

What rancher's local-path-provisioner does, in the few lines this one-node cluster needs (its Go module is not
needed and no image has to run): a claim of the class that is waiting for a volume (``WaitForFirstConsumer``:
once the scheduler has written ``volume.kubernetes.io/selected-node``) gets a PersistentVolume

- ``pvc-<claim uid>``, hostPath ``<volumes>/<namespace>_<claim>_<uid8>`` (``DirectoryOrCreate``, mode 0777 so
  non-root pods may write), the claim's size and access modes, ``claimRef`` set (the PV controller binds it),
  node affinity to the node, annotated ``pv.kubernetes.io/provisioned-by: unicore.dev/local-path``;
- when such a PV is ``Released`` (its claim deleted) and its reclaim policy is ``Delete``, its folder is removed
  and the PV deleted (the PV controller leaves volumes of external provisioners to them).

Two watch threads (claims, volumes): a list, then watches from its resourceVersion (re-listed after an error),
so nothing is missed.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from unicore_devcluster.log import logger
from unicore_devcluster.node_config import LOCAL_PATH_CLASS, LOCAL_PATH_PROVISIONER

SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
WATCH_SECONDS = 5


def volume_name(claim_uid: str) -> str:
    return f"pvc-{claim_uid}"


def volume_folder(root: Path, namespace: str, claim: str, uid: str) -> Path:
    return root / f"{namespace}_{claim}_{uid[:8]}"


def build_volume(claim: Any, node_name: str, folder: Path, storage_class: Any) -> dict[str, Any]:
    """The PersistentVolume for ``claim`` (a V1PersistentVolumeClaim) at ``folder`` on ``node_name``."""
    meta = claim.metadata
    size = ((claim.spec.resources and claim.spec.resources.requests) or {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(meta.uid), "annotations": {PROVISIONED_BY: LOCAL_PATH_PROVISIONER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(claim.spec.access_modes or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": (storage_class.reclaim_policy if storage_class else None) or "Delete",
            "storageClassName": claim.spec.storage_class_name,
            "volumeMode": claim.spec.volume_mode or "Filesystem",
            "hostPath": {"path": str(folder), "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta.namespace,
                "name": meta.name,
                "uid": meta.uid,
            },
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                }
            },
        },
    }


class LocalPathProvisioner:
    """Provisions and deletes ``local-path`` volumes under ``root`` for the node ``node_name``."""

    def __init__(self, api_client: Any, node_name: str, root: Path, class_name: str = LOCAL_PATH_CLASS) -> None:
        self.core: Any = client.CoreV1Api(api_client)
        self.storage: Any = client.StorageV1Api(api_client)
        self.node_name = node_name
        self.root = root
        self.class_name = class_name
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- one object
    def _storage_class(self) -> Any:
        try:
            return self.storage.read_storage_class(self.class_name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def reconcile_claim(self, claim: Any) -> None:
        spec, meta = claim.spec, claim.metadata
        if spec.storage_class_name != self.class_name or spec.volume_name or meta.deletion_timestamp:
            return
        if (claim.status and claim.status.phase) not in (None, "Pending"):
            return
        storage_class = self._storage_class()
        if storage_class is None or storage_class.provisioner != LOCAL_PATH_PROVISIONER:
            return
        selected = (meta.annotations or {}).get(SELECTED_NODE)
        if storage_class.volume_binding_mode == "WaitForFirstConsumer" and selected != self.node_name:
            return  # not scheduled yet, or to another node (whose volumes are not ours)
        folder = volume_folder(self.root, meta.namespace, meta.name, meta.uid)
        with self._lock:
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o777)
            try:
                self.core.create_persistent_volume(build_volume(claim, self.node_name, folder, storage_class))
            except ApiException as exc:
                if exc.status != 409:
                    raise
                return
        logger.info(
            "local-path: provisioned %s for %s/%s at %s", volume_name(meta.uid), meta.namespace, meta.name, folder
        )

    def reconcile_volume(self, volume: Any) -> None:
        annotations = volume.metadata.annotations or {}
        if annotations.get(PROVISIONED_BY) != LOCAL_PATH_PROVISIONER:
            return
        phase = volume.status.phase if volume.status else None
        if phase not in ("Released", "Failed") or volume.spec.persistent_volume_reclaim_policy != "Delete":
            return
        folder = Path(volume.spec.host_path.path) if volume.spec.host_path else None
        if folder is not None and self.root in folder.parents:
            shutil.rmtree(folder, ignore_errors=True)
        try:
            self.core.delete_persistent_volume(volume.metadata.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        logger.info("local-path: deleted %s (%s)", volume.metadata.name, folder)

    # ---------------------------------------------------------------- watches
    def _watch(self, list_call: Any, handle: Any, what: str) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:  # (re)list: every object once, then watch from there
                    listing = list_call()
                    for item in listing.items:
                        handle(item)
                    version = listing.metadata.resource_version
                stream = watch.Watch()
                # short server-side timeouts, so stop() returns within WATCH_SECONDS
                for event in stream.stream(list_call, resource_version=version, timeout_seconds=WATCH_SECONDS):
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        version = ""  # e.g. 410 Gone: re-list
                        break
                    version = obj.metadata.resource_version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handle(obj)
                    if self._stop.is_set():
                        break
            except Exception as exc:  # noqa: BLE001 - a broken watch is re-listed after a short pause
                if self._stop.is_set():
                    return
                logger.warning("local-path: %s watch failed: %s", what, exc)
                version = ""
                self._stop.wait(1.0)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for what, call, handle in (
            ("claims", self.core.list_persistent_volume_claim_for_all_namespaces, self.reconcile_claim),
            ("volumes", self.core.list_persistent_volume, self.reconcile_volume),
        ):
            thread = threading.Thread(
                target=self._watch, args=(call, handle, what), name=f"local-path-{what}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop watching; returns once both watches ended (within WATCH_SECONDS), so no request stays open."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=WATCH_SECONDS + 5)
        self._threads.clear()
