"""Fixtures shared by the operator's cluster tests: the CRD installed once, a real operator process per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_harness import OperatorProcess, Tasks, install_agent_rbac, install_crd


@pytest.fixture(scope="session")
def crd(control_plane: Any) -> Any:
    install_crd(control_plane.kubeconfig)
    return control_plane


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
