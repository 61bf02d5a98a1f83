"""pytest plugin: ``control_plane`` and ``real_node_session`` (session) and ``k8s_namespace`` (per test) fixtures,
``cluster`` marker.

Enable with ``pytest_plugins = ["unicore_devcluster.pytest_plugin"]``. The session fixture starts a DevCluster
in a temporary folder once and stops it at the end of the session (every process, even when tests fail). With
``UNICORE_DEVCLUSTER_ATTACH=1`` it uses the cluster that ``unicore-devcluster up`` runs instead (``make
cluster-up``).

``real_node_session`` is the session's one real node (one per host): ``.cluster()`` starts a control plane with only
the real node on first use (the project's images built or reused and imported into its containerd) and returns it
while it runs; ``.stop()`` stops it (a test of the tear-down), and the next ``.cluster()`` starts a new one. Where the
host cannot run a real node, ``.cluster()`` fails the test with the reason, or skips it with UNICORE_NO_CONTAINERS=1.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from unicore_devcluster import node_host
from unicore_devcluster.cluster import DevCluster, attach
from unicore_devcluster.image_inputs import BuiltImage
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


class RealNodeSession:
    """The test session's real node (see the module doc). ``images``: the project's images imported into it, by key
    (agent, operator, redis; ``.ref`` as containerd stores it)."""

    def __init__(self) -> None:
        self._cluster: DevCluster | None = None
        self.images: dict[str, BuiltImage] = {}
        self.data_dir: Path | None = None
        self.netns_before: set[str] = set()

    @property
    def running(self) -> DevCluster | None:
        return self._cluster

    def cluster(self) -> DevCluster:
        if self._cluster is not None:
            return self._cluster
        reason = node_host.unavailable_reason()
        if reason:  # as tests/node: fail with the reason, unless the run says this host runs no containers
            if os.environ.get("UNICORE_NO_CONTAINERS") == "1":
                pytest.skip(f"UNICORE_NO_CONTAINERS=1; this host cannot run a real node: {reason}")
            pytest.fail(f"this host cannot run a real node: {reason} (UNICORE_NO_CONTAINERS=1 skips these tests)")
        from unicore_devcluster.node_images import build_images, load_images

        folder = build_images()  # under a second when nothing changed (make test built them already)
        self.data_dir = Path(tempfile.mkdtemp(prefix="unicore-realnode-"))
        self.netns_before = node_host.netns_names()
        cluster = DevCluster(self.data_dir, nodes=(), real_node=True)
        cluster.start(timeout=180)
        try:
            assert cluster.real_node is not None
            self.images = load_images(cluster.real_node.runtime, folder)
        except BaseException:
            cluster.stop()
            raise
        self._cluster = cluster
        return cluster

    def stop(self) -> dict[str, int]:
        """Stop the real node and its control plane; the pids they had (for a check that none is left)."""
        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return {}
        pids = cluster.pids()
        try:
            cluster.stop()
        finally:
            if self.data_dir is not None:
                shutil.rmtree(self.data_dir / "etcd", ignore_errors=True)  # logs and pod output stay
        return pids


@pytest.fixture(scope="session")
def real_node_session() -> Iterator[RealNodeSession]:
    """The session's one real node, started on first ``.cluster()``; stopped at the end (nothing may be left)."""
    session = RealNodeSession()
    try:
        yield session
    finally:
        pids = session.stop()
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        assert not left, f"real-node processes left behind: {left}"
