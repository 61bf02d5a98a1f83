"""Fixtures shared by the operator's cluster tests: the cluster a test runs on, the CRD installed once per cluster, a
fresh namespace, Redis, a real operator process per test.

A test (or module) marked ``real_node`` runs on the session's real node (containerd + kubelet: turn pods are real
containers of the project's images) instead of the pod runner: ``cluster``, ``crd`` and ``k8s_namespace`` are then
the real node's, and ``redis_url`` is a Redis on the node IP that the host operator and the turn pods both reach.
Tests marked ``stops_real_node`` (they stop the host's one real node to check its tear-down) run last.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from tests.cluster.kueue_fixture import kueue, kueue_session  # noqa: F401 - fixtures: Kueue on the real node
from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, install_crd
from tests.cluster.real_node import NodeRedis
from tests.waiting import wait_for

REAL_NODE = "real_node"
STOPS_REAL_NODE = "stops_real_node"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{REAL_NODE}: runs on the session's real node (containerd + kubelet) instead of the pod runner"
    )
    config.addinivalue_line(
        "markers", f"{STOPS_REAL_NODE}: stops the host's one real node (runs after every other test)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    last = [item for item in items if item.get_closest_marker(STOPS_REAL_NODE)]
    if last:
        items[:] = [item for item in items if not item.get_closest_marker(STOPS_REAL_NODE)] + last


def on_real_node(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(REAL_NODE) is not None


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Any:
    """The DevCluster this test runs on: the real node's (marker ``real_node``) or the pod runner's."""
    if on_real_node(request):
        return request.getfixturevalue("real_node_session").cluster()
    return request.getfixturevalue("control_plane")


_crd_installed: set[str] = set()


@pytest.fixture
def crd(cluster: Any) -> Any:
    """The cluster, with the AgentTask CRD installed (once per cluster)."""
    if str(cluster.kubeconfig) not in _crd_installed:
        install_crd(cluster.kubeconfig)
        _crd_installed.add(str(cluster.kubeconfig))
    return cluster


@pytest.fixture
def k8s_namespace(cluster: Any) -> Iterator[str]:
    """A fresh namespace of the test's cluster (deleted after the test, without waiting for its finalization)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # pods are admitted only once the namespace's "default" ServiceAccount exists
    wait_for(lambda: core.read_namespaced_service_account("default", name), timeout=30, what="default SA")
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        finally:
            api.close()


@pytest.fixture(scope="session")
def node_redis() -> Iterator[NodeRedis]:
    from unicore_devcluster.node_host import node_ip

    host = node_ip()
    if host is None:
        pytest.fail("no non-loopback IPv4 address for a Redis the real node's pods reach")
    server = NodeRedis(host)
    yield server
    server.stop()


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_server: Any) -> str:
    """A flushed Redis: on the node IP with a password for ``real_node`` tests, else the session's unix socket."""
    url = request.getfixturevalue("node_redis").url if on_real_node(request) else redis_server.url
    with redis.Redis.from_url(url) as flush:
        flush.flushall()
    return str(url)


@pytest.fixture
def operator(crd: Any, k8s_namespace: str, redis_url: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    install_agent_rbac(crd.kubeconfig, k8s_namespace)
    proc = OperatorProcess(crd.kubeconfig, redis_url, k8s_namespace, tmp_path / "operator.log").start()
    yield proc
    proc.stop()
    print(f"--- operator log ({proc.log_path}):\n{proc.log()}")


@pytest.fixture
def tasks(crd: Any, k8s_namespace: str) -> Iterator[Tasks]:
    api = crd.api_client()
    yield Tasks(api, k8s_namespace)
    api.close()
