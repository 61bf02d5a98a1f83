"""The operator makes its API calls without the generated API classes (``unicore_operator.core_calls``): in
kubernetes-client 37 building ``CoreV1Api`` costs about 21 MiB of resident memory, ``BatchV1Api`` and
``CustomObjectsApi`` about 9 MiB."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

PROBE = """
import sys
from kubernetes import client
from unicore_operator.composition import compose
from unicore_operator.kube import KubeClients
compose()
kube = KubeClients(client.ApiClient())
print(sorted(m for m in sys.modules if m.startswith("kubernetes.client.api.")))
"""


def test_the_composed_operator_loads_no_generated_api_class() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_core_calls_build_the_core_v1_urls() -> None:
    from kubernetes import client
    from unicore_operator.core_calls import CoreCalls

    api = client.ApiClient(client.Configuration(host="https://example.invalid:6443"))
    sent: list[tuple[str, str]] = []
    api.call_api = lambda method, url, *rest, **kw: sent.append((method, url))  # type: ignore[method-assign,assignment]
    calls = CoreCalls(api)
    for call in (lambda: calls.read_pod("ns-a", "pod/x"), lambda: calls.create_event("ns-a", {"kind": "Event"})):
        try:
            call()
        except AttributeError:  # the stand-in returns no response: only the request it was given matters here
            pass
    assert sent == [("GET", "https://example.invalid:6443/api/v1/namespaces/ns-a/pods/pod%2Fx"),
                    ("POST", "https://example.invalid:6443/api/v1/namespaces/ns-a/events")]


def test_kube_clients_build_the_job_and_agenttask_requests() -> None:
    import urllib3
    from kubernetes import client
    from kubernetes.client.rest import RESTResponse
    from unicore_operator.kube import KubeClients

    api = client.ApiClient(client.Configuration(host="https://example.invalid:6443"))
    sent: list[tuple[str, str, str, object]] = []

    def record(method: str, url: str, headers: dict[str, str], body: object, *rest: object, **kw: object) -> Any:
        sent.append((method, url, headers.get("Content-Type", ""), body))
        # the client's own response type around what the API server answers: 201 and a body
        return RESTResponse(urllib3.HTTPResponse(body=b'{"kind": "Job"}', status=201, preload_content=True))

    api.call_api = record  # type: ignore[method-assign,assignment]
    kube = KubeClients(api)
    job = {"metadata": {"name": "t-t1", "namespace": "ns-a"}}
    assert kube.create_job(job) is True
    assert kube.get_job("ns-a", "t-t1") == {"kind": "Job"}
    assert kube.delete_job("ns-a", "t-t1") is True
    assert kube.get_agenttask("ns-a", "t") == {"kind": "Job"}
    kube.patch_status("ns-a", "t", {"phase": "Idle"})
    base = "https://example.invalid:6443"
    assert [(m, u, c) for m, u, c, _ in sent] == [
        ("POST", f"{base}/apis/batch/v1/namespaces/ns-a/jobs", "application/json"),
        ("GET", f"{base}/apis/batch/v1/namespaces/ns-a/jobs/t-t1", ""),
        ("DELETE", f"{base}/apis/batch/v1/namespaces/ns-a/jobs/t-t1", "application/json"),
        ("GET", f"{base}/apis/unicore.dev/v1alpha1/namespaces/ns-a/agenttasks/t", ""),
        ("PATCH", f"{base}/apis/unicore.dev/v1alpha1/namespaces/ns-a/agenttasks/t/status",
         "application/merge-patch+json"),
    ]
    assert sent[0][3] == job and sent[4][3] == {"status": {"phase": "Idle"}}
    assert sent[2][3] == {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}


def test_no_operator_module_builds_a_generated_api_class() -> None:
    """Also the parts the probe above does not start (the watchdog's reaper is built by its start-up hook)."""
    import re
    from pathlib import Path

    import unicore_operator

    package = Path(unicore_operator.__file__).parent
    built = re.compile(r"\b[A-Z][A-Za-z0-9]*V\d\w*Api\(|\bCustomObjectsApi\(")
    found = [f"{path.relative_to(package)}:{number}"
             for path in sorted(package.rglob("*.py")) if "kubectl_plugin" not in path.parts
             for number, line in enumerate(path.read_text().splitlines(), 1) if built.search(line)]
    assert found == []
