"""The ``kueue`` fixture: Kueue v0.17's real manager (hack/build-kueue.sh, hack/unicore_devcluster/kueue.py) on the
session's real node, started once per real-node cluster and stopped at the end of the session.

Only tests marked ``real_node`` may use it (the real node is one per host: run them under
``flock /tmp/unicore-realnode.lock``). ``kueue.ensure_queues(namespace, gpus=2)`` gives a namespace its LocalQueue
``gpu-queue`` (ClusterQueue ``gpu-cluster-queue``, ResourceFlavor ``default-flavor``) and makes Kueue manage Jobs
there; Jobs in other namespaces are not Kueue's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from unicore_devcluster.kueue import KueueManager, find_kueue_dir


class KueueSession:
    """The session's Kueue: one manager for the real-node cluster it runs on (a new one if that cluster was
    restarted)."""

    def __init__(self) -> None:
        self.manager: KueueManager | None = None
        self._cluster: Any = None

    def on(self, cluster: Any) -> KueueManager:
        if self.manager is not None and self._cluster is cluster and self.manager.running():
            return self.manager
        self.stop()
        manager = KueueManager(cluster, find_kueue_dir())
        manager.start()
        try:
            manager.wait_ready()
        except BaseException:
            manager.stop()
            raise
        self.manager, self._cluster = manager, cluster
        return manager

    def stop(self) -> None:
        manager, self.manager, self._cluster = self.manager, None, None
        if manager is not None:
            manager.stop()


@pytest.fixture(scope="session")
def kueue_session(real_node_session: Any) -> Iterator[KueueSession]:
    """Depends on the real node's session so that it ends first (its webhooks go while the API server runs)."""
    session = KueueSession()
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def kueue(request: pytest.FixtureRequest, kueue_session: KueueSession, cluster: Any) -> KueueManager:
    """The running Kueue of this test's real-node cluster (started on first use)."""
    if request.node.get_closest_marker("real_node") is None:
        pytest.fail("the kueue fixture runs Kueue on the real node's cluster: mark the test real_node")
    return kueue_session.on(cluster)
