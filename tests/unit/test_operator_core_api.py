"""The operator makes its core/v1 calls without the generated ``CoreV1Api`` (``unicore_operator.core_calls``): in
kubernetes-client 37 importing that class costs about 21 MiB of resident memory."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from kubernetes import client
from unicore_operator.composition import compose
from unicore_operator.kube import KubeClients
compose()
kube = KubeClients(client.ApiClient())
print("kubernetes.client.api.core_v1_api" in sys.modules)
"""


def test_the_composed_operator_never_loads_core_v1_api() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_core_calls_build_the_core_v1_urls() -> None:
    from kubernetes import client
    from unicore_operator.core_calls import CoreCalls

    api = client.ApiClient(client.Configuration(host="https://example.invalid:6443"))
    sent: list[tuple[str, str]] = []
    api.call_api = lambda method, url, *rest, **kw: sent.append((method, url))  # type: ignore[method-assign]
    calls = CoreCalls(api)
    for call in (lambda: calls.read_pod("ns-a", "pod/x"), lambda: calls.create_event("ns-a", {"kind": "Event"})):
        try:
            call()
        except AttributeError:  # the stand-in returns no response: only the request it was given matters here
            pass
    assert sent == [("GET", "https://example.invalid:6443/api/v1/namespaces/ns-a/pods/pod%2Fx"),
                    ("POST", "https://example.invalid:6443/api/v1/namespaces/ns-a/events")]
