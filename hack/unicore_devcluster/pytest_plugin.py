"""pytest plugin: ``control_plane`` (session) and ``k8s_namespace`` (per test) fixtures, ``cluster`` marker.

Enable with ``pytest_plugins = ["unicore_devcluster.pytest_plugin"]``. The session fixture starts a DevCluster
in a temporary folder once and stops it at the end of the session (every process, even when tests fail). With
``UNICORE_DEVCLUSTER_ATTACH=1`` it uses the cluster that ``unicore-devcluster up`` runs instead (``make
cluster-up``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from unicore_devcluster.cluster import DevCluster, attach
from unicore_devcluster.procs import alive
from unicore_devcluster.wait import wait_until


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: needs the local Kubernetes control plane (unicore_devcluster)"
    )


@pytest.fixture(scope="session")
def control_plane() -> Iterator[DevCluster]:
    """A running DevCluster: ``.kubeconfig``, ``.api_client()``, ``.bin_dir``, ``.env()``, ``.read_log()``."""
    if os.environ.get("UNICORE_DEVCLUSTER_ATTACH") == "1":
        yield attach(os.environ.get("UNICORE_DEVCLUSTER_DIR"))
        return
    # a short path under /tmp (not pytest's tmp_path) keeps logs easy to find after a failed run
    data_dir = Path(tempfile.mkdtemp(prefix="unicore-devcluster-"))
    cluster = DevCluster(data_dir)
    cluster.start()
    try:
        yield cluster
    finally:
        pids = cluster.pids()  # control plane and running pod processes
        cluster.stop()
        shutil.rmtree(data_dir / "etcd", ignore_errors=True)  # 60+ MB of WAL; logs and pod output stay
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        assert not left, f"control-plane processes left behind: {left}"


@pytest.fixture
def k8s_namespace(control_plane: DevCluster) -> Iterator[str]:
    """A fresh namespace (deleted after the test, without waiting for its finalization)."""
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # pods are admitted only once the namespace's "default" ServiceAccount exists
    wait_until(lambda: core.read_namespaced_service_account("default", name), timeout=30, what="default SA")
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        finally:
            api.close()
