"""The chart installed on the real node, as the real-node chart tests share it: ``installed_release`` (helm install
into a fresh namespace enforcing Pod Security "restricted", with the images built here; uninstalled after) and small
helpers (``kubectl``, the operator's and Redis' pod). Each test module makes its own module-scoped ``release`` fixture
of it: one release per module."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.cluster.operator_harness import Tasks, install_crd
from tests.cluster.test_chart_render import CHART, helm
from tests.waiting import wait_for

RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
OPERATOR = "app.kubernetes.io/component=operator"
REDIS = "app.kubernetes.io/component=redis"
# cluster-scoped roles with fixed names: one release per cluster
USER_ROLES_OFF = ("--set", "rbac.userRoles=false")


def kubectl(cluster: Any, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(cluster.bin_dir / "kubectl"), *args], env={**os.environ, **cluster.env()},
                          capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc


@contextmanager
def installed_release(real_node_session: Any, tmp_path_factory: pytest.TempPathFactory,
                      *values: str) -> Iterator[dict[str, Any]]:
    """The chart installed into a fresh namespace enforcing "restricted" (helm --wait: operator and Redis Ready),
    with the images built here, ``rbac.userRoles=false`` and ``values`` (more helm arguments). Yields cluster, api,
    namespace, the helm env, the install's output, the images, the release's objects and ``values`` (every value
    argument the install was given, for an upgrade to start from)."""
    from unicore_devcluster.node_images import chart_values

    cluster = real_node_session.cluster()
    install_crd(cluster.kubeconfig)  # helm does not upgrade a CRD it finds; the tests install the current one
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    namespace = f"chart-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels=RESTRICTED)))
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), timeout=30, what="default SA")
    tmp = tmp_path_factory.mktemp("helm")
    env = {"KUBECONFIG": str(cluster.kubeconfig), "HELM_CACHE_HOME": str(tmp / "cache"),
           "HELM_CONFIG_HOME": str(tmp / "config"), "HELM_DATA_HOME": str(tmp / "data")}
    all_values = [*chart_values(real_node_session.images), *USER_ROLES_OFF, *values]
    install = helm("install", "unicore", str(CHART), "--namespace", namespace, *all_values,
                   "--wait", "--timeout", "300s", env=env)
    manifest = helm("get", "manifest", "unicore", "--namespace", namespace, env=env).stdout
    try:
        yield {"cluster": cluster, "api": api, "namespace": namespace, "env": env, "install": install,
               "images": real_node_session.images, "objects": [doc for doc in yaml.safe_load_all(manifest) if doc],
               "values": all_values}
    finally:
        helm("uninstall", "unicore", "--namespace", namespace, "--wait", "--timeout", "120s", env=env, check=False)
        for task in Tasks(api, namespace).all():  # the operator is gone: nobody else removes its finalizer
            Tasks(api, namespace).custom.patch_namespaced_custom_object(
                "unicore.dev", "v1alpha1", namespace, "agenttasks", task["metadata"]["name"],
                {"metadata": {"finalizers": None}})
        core.delete_namespace(namespace)
        api.close()


def pod_of(core: Any, namespace: str, selector: str) -> Any:
    [pod] = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
             if not p.metadata.deletion_timestamp]
    return pod


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
