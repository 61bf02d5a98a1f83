"""`python -m unicore_devcluster.operator_endpoint` (what `make demo` runs on the pod runner) on the real local control
plane: it issues the host operator's serving certificate from the devcluster's CA (once), and creates the Service with
ports `http` and `task-api`, the Endpoints with a targetRef to the placeholder Pod, and the APIService trusting that
CA. The API server's use of them is tests/cluster/test_kubectl.py's and test_task_api_tenancy.py's."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kubernetes import client
from unicore_devcluster import operator_endpoint

pytestmark = pytest.mark.cluster


def test_the_cli_publishes_the_task_api_of_a_host_operator(control_plane: Any, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    namespace = f"op-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    pki = control_plane.control_plane.data_dir / "pki"
    certs = tmp_path / "certs"
    args = ["--namespace", namespace, "--port", "18080", "--task-api-port", "18443", "--cert-dir", str(certs),
            "--pki-dir", str(pki), "--kubeconfig", str(control_plane.kubeconfig), "--ip", "192.0.2.10"]
    try:
        assert operator_endpoint.main(args) == 0
        printed = capsys.readouterr().out
        assert f"apiservice v1alpha1.tasks.unicore.dev -> service {namespace}/unicore-operator:task-api" in printed
        cert = x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes())
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes()))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert f"unicore-operator.{namespace}.svc" in names.get_values_for_type(x509.DNSName)
        service = core.read_namespaced_service("unicore-operator", namespace)
        assert {(p.name, p.port, p.target_port) for p in service.spec.ports} == {("http", 8080, 18080),
                                                                                  ("task-api", 9443, 18443)}
        (subset,) = core.read_namespaced_endpoints("unicore-operator", namespace).subsets
        assert [a.ip for a in subset.addresses] == ["192.0.2.10"]
        assert {(p.name, p.port) for p in subset.ports} == {("http", 18080), ("task-api", 18443)}
        found: Any = client.CustomObjectsApi(api).get_cluster_custom_object(
            "apiregistration.k8s.io", "v1", "apiservices", "v1alpha1.tasks.unicore.dev")
        assert found["spec"]["service"] == {"name": "unicore-operator", "namespace": namespace, "port": 9443}
        assert base64.b64decode(found["spec"]["caBundle"]) == (pki / "ca.crt").read_bytes()
        # again (make demo re-run): the certificate is kept, the objects are updated in place
        assert operator_endpoint.main(args) == 0
        assert x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes()) == cert
    finally:
        operator_endpoint.unregister_task_api(api)
        core.delete_namespace(namespace)
        api.close()
