"""The set-up the operator benchmarks share: a local control plane, a Redis server, the ``bench`` namespace with the
CRD and the agents' RBAC, and the clients to drive them. Everything is torn down on exit.

    with BenchCluster("activation") as bench:
        bench.tasks.create(...); OperatorProcess(bench.kubeconfig, bench.redis_url, bench.namespace, ...)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client  # noqa: E402
from unicore.store.tasks import TaskStore, connect  # noqa: E402
from unicore_devcluster.cluster import DevCluster  # noqa: E402

from tests.cluster.operator_harness import Tasks, install_agent_rbac, install_crd  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

NAMESPACE = "bench"


class BenchCluster:
    """A fresh control plane + Redis for one benchmark run (``name`` prefixes its temporary folder)."""

    def __init__(self, name: str, namespace: str = NAMESPACE) -> None:
        self.data = Path(tempfile.mkdtemp(prefix=f"unicore-bench-{name}-"))
        self.namespace = namespace
        self.cluster: DevCluster | None = None
        self.redis_server: RedisServer | None = None
        self.api: Any = None  # the ApiClient, once started

    def __enter__(self) -> BenchCluster:
        try:
            self.cluster = DevCluster(self.data / "cluster").start()
            (self.data / "redis").mkdir()
            self.redis_server = RedisServer(self.data / "redis")
            install_crd(self.cluster.kubeconfig)
            self.api = self.cluster.api_client()
            core = client.CoreV1Api(self.api)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
            wait_for(lambda: core.read_namespaced_service_account("default", self.namespace), timeout=30)
            install_agent_rbac(self.cluster.kubeconfig, self.namespace)
        except BaseException:
            self.close()
            raise
        self.store = TaskStore(connect(self.redis_url))
        self.tasks = Tasks(self.api, self.namespace)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.redis_server is not None:
            self.redis_server.stop()

    @property
    def kubeconfig(self) -> Path:
        assert self.cluster is not None
        return Path(self.cluster.kubeconfig)

    @property
    def redis_url(self) -> str:
        assert self.redis_server is not None
        return str(self.redis_server.url)
