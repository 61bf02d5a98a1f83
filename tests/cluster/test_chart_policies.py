"""The chart's admission control (ValidatingAdmissionPolicy, the operator's webhook and its certificate) and its
NetworkPolicies, rendered with `helm template` and checked as parsed objects.

The local test bed's CNI (the pod runner's host processes, the real node's bridge plugin) enforces no NetworkPolicy,
so the policies are checked by what they select: their pod selectors are evaluated against the labels of the pods
they are meant for (the chart's Deployment and StatefulSet, a turn Job built by the operator's own Job builder), and
their peers and ports against the values. The admission objects are applied to a real API server in
tests/cluster/test_admission.py.
"""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.cluster.test_chart_render import CHART, KUBE_VERSION, env_of, find, helm, one, render

pytestmark = pytest.mark.cluster

NS = "agents"


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Does the LabelSelector ``selector`` match ``labels`` (Kubernetes semantics)?"""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pod_labels(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, str]:
    return dict(one(objs, kind, name)["spec"]["template"]["metadata"]["labels"])


def turn_pod_labels(objs: list[dict[str, Any]], namespace: str = NS) -> dict[str, str]:
    """The labels of a turn pod, as the operator's Job builder makes them with the chart's settings."""
    from unicore_operator.job_builder import build_turn_job_spec
    from unicore_operator.settings import load_settings

    env = env_of(one(objs, "Deployment", "unicore-operator"))
    settings = load_settings({**{k: v for k, v in env.items() if isinstance(v, str)}, "REDIS_URL": "redis://x:6379/0"})
    task = {"metadata": {"name": "t", "namespace": namespace, "uid": "u"}, "spec": {"prompt": "hi"}}
    return dict(build_turn_job_spec(task, 1, settings)["spec"]["template"]["metadata"]["labels"])


def ports_of(rule: dict[str, Any]) -> set[tuple[Any, str]]:
    return {(p["port"], p.get("protocol", "TCP")) for p in rule.get("ports") or ()}


# ------------------------------------------------------------------------------------------ admission
def test_the_admission_policy_and_its_binding() -> None:
    objs = render(namespace=NS)
    policy = one(objs, "ValidatingAdmissionPolicy", f"unicore-agenttasks-{NS}")
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [{
        "apiGroups": ["unicore.dev"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
        "resources": ["agenttasks"]}]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert variables["agent"] == "'system:serviceaccount:' + request.namespace + ':unicore-agent'"
    rules = " ".join(v["expression"] for v in spec["validations"])
    assert "object.spec.parentRef.namespace == request.namespace" in rules
    assert "request.userInfo.username != variables.agent" in rules
    assert "oldObject.spec.limits" in rules and "oldObject.spec.tools" in rules
    assert all(v["reason"] == "Forbidden" and (v.get("message") or v.get("messageExpression"))
               for v in spec["validations"])
    binding = one(objs, "ValidatingAdmissionPolicyBinding", f"unicore-agenttasks-{NS}")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NS]}]}
    wide = render("--set", "rbac.clusterWide=true", namespace=NS)
    assert one(wide, "ValidatingAdmissionPolicyBinding")["spec"]["matchResources"]["namespaceSelector"] == {}
    assert one(wide, "ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"] == {}


def verify_signed_by(cert: x509.Certificate, ca: x509.Certificate) -> None:
    public_key = ca.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    public_key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
    assert cert.issuer == ca.subject


def test_the_webhook_reaches_the_operator_with_a_certificate_its_ca_bundle_verifies() -> None:
    from unicore_operator.admission import PATH
    from unicore_operator.settings import load_settings

    objs = render(namespace=NS)
    config = one(objs, "ValidatingWebhookConfiguration", f"unicore-operator-{NS}")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["rules"] == [{"apiGroups": ["unicore.dev"], "apiVersions": ["*"], "operations": ["CREATE"],
                              "resources": ["agenttasks"], "scope": "Namespaced"}]
    assert hook["matchConditions"] == [{"name": "children-and-agent-tasks",
                                        "expression": "has(object.spec.parentRef) || has(object.spec.agentRef)"}]
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [NS]
    service_ref = hook["clientConfig"]["service"]
    assert service_ref == {"name": "unicore-operator", "namespace": NS, "port": 443, "path": PATH}
    # Service port 443 -> the container's port `webhook` -> the operator's UNICORE_WEBHOOK_PORT
    service = one(objs, "Service", service_ref["name"], NS)
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == service_ref["port"]]
    deployment = one(objs, "Deployment", "unicore-operator")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    (target,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(objs, "Deployment", "unicore-operator"))
    env = env_of(deployment)
    settings = load_settings({**{k: v for k, v in env.items() if isinstance(v, str)}, "REDIS_URL": "redis://x:6379/0"})
    assert settings.webhook_port == target["containerPort"] == 8443
    # the certificate Secret is mounted where the operator reads it
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == settings.webhook_cert_dir]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = one(objs, "Secret", volume["secret"]["secretName"], NS)
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
    assert data["ca.crt"] == base64.b64decode(hook["clientConfig"]["caBundle"])
    verify_signed_by(cert, ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"unicore-operator.{NS}.svc" in names  # the name the API server checks for a service reference
    assert cert.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3000)
    assert b"PRIVATE KEY" in data["tls.key"]


def test_the_webhook_with_a_certificate_of_your_own() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    objs = render("--set", "admission.webhook.existingSecret=my-cert", "--set", f"admission.webhook.caBundle={pem}",
                  namespace=NS)
    assert not find(objs, "Secret", "unicore-operator-webhook")
    hook = one(objs, "ValidatingWebhookConfiguration")["webhooks"][0]
    assert base64.b64decode(hook["clientConfig"]["caBundle"]).decode() == pem
    pod = one(objs, "Deployment", "unicore-operator")["spec"]["template"]["spec"]
    assert {"name": "webhook-cert", "secret": {"secretName": "my-cert"}} in pod["volumes"]
    # the task API serves the same certificate: its APIService trusts the same CA
    assert base64.b64decode(one(objs, "APIService")["spec"]["caBundle"]).decode() == pem
    # cert-manager fills the bundle in
    injected = render("--set", "admission.webhook.existingSecret=my-cert", "--set-json",
                      'admission.webhook.annotations={"cert-manager.io/inject-ca-from":"agents/webhook"}',
                      namespace=NS)
    config = one(injected, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "agents/webhook"}
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    apiservice = one(injected, "APIService")  # the same injection, unless taskApi.annotations names its own
    assert apiservice["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "agents/webhook"}
    assert "caBundle" not in apiservice["spec"]
    proc = helm("template", "uc", str(CHART), "--kube-version", KUBE_VERSION,
                "--set", "admission.webhook.existingSecret=my-cert", check=False)
    assert proc.returncode != 0 and "needs admission.webhook.caBundle" in proc.stderr, proc.stderr


def test_admission_can_be_turned_off() -> None:
    objs = render("--set", "admission.webhook.enabled=false", namespace=NS)
    assert not find(objs, "ValidatingWebhookConfiguration")
    assert one(objs, "Secret", "unicore-operator-webhook")  # still the task API's serving certificate
    assert env_of(one(objs, "Deployment", "unicore-operator"))["UNICORE_WEBHOOK_PORT"] == "0"
    assert one(objs, "ValidatingAdmissionPolicy")  # the policy needs no webhook
    operator_policy = one(objs, "NetworkPolicy", "unicore-operator")
    assert {frozenset(ports_of(rule)) for rule in operator_policy["spec"]["ingress"]} == {
        frozenset({(8080, "TCP")}), frozenset({(9443, "TCP")})}
    neither = render("--set", "admission.webhook.enabled=false", "--set", "taskApi.enabled=false", namespace=NS)
    assert not find(neither, "Secret", "unicore-operator-webhook")
    assert not [v for v in one(neither, "Deployment", "unicore-operator")["spec"]["template"]["spec"]["volumes"]
                if v["name"] == "webhook-cert"]
    objs = render("--set", "admission.policy.enabled=false", namespace=NS)
    assert not find(objs, "ValidatingAdmissionPolicy") and not find(objs, "ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize("bad", [["--set", "admission.webhook.timeoutSeconds=31"],
                                 ["--set", "admission.webhook.enable=true"],
                                 ["--set", "networkPolicy.operatorFrom=x"],
                                 ["--set-json", 'networkPolicy.agent.dns.ports=[{"port":53,"protocol":"ICMP"}]']])
def test_the_schema_rejects_bad_admission_and_network_policy_values(bad: list[str]) -> None:
    proc = helm("template", "uc", str(CHART), "--kube-version", KUBE_VERSION, *bad, check=False)
    assert proc.returncode != 0 and "values don't meet the specifications" in proc.stderr, proc.stderr


# ---------------------------------------------------------------------------------------- NetworkPolicies
def test_the_operator_accepts_only_the_api_server_and_prometheus() -> None:
    objs = render(namespace=NS)
    policy = one(objs, "NetworkPolicy", "unicore-operator", NS)
    spec = policy["spec"]
    assert selects(spec["podSelector"], pod_labels(objs, "Deployment", "unicore-operator"))
    assert not selects(spec["podSelector"], pod_labels(objs, "StatefulSet", "unicore-redis"))
    assert spec["policyTypes"] == ["Ingress"]
    by_port = {frozenset(ports_of(rule)): rule["from"] for rule in spec["ingress"]}
    anywhere = [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]
    prometheus = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    # the plain port serves no task data: only Prometheus reaches it; the API server reaches the task API and webhook
    assert by_port == {frozenset({(8080, "TCP")}): [prometheus], frozenset({(8443, "TCP")}): anywhere,
                       frozenset({(9443, "TCP")}): anywhere}
    # every rule names its sources: no rule admits every source on a port
    assert all(rule.get("from") for rule in spec["ingress"])

    narrowed = render(*["--set-json", 'networkPolicy.apiServerFrom=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]',
                        "--set-json", 'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"t":"obs"}}}]'],
                      namespace=NS)
    rules = {frozenset(ports_of(r)): r["from"] for r in one(narrowed, "NetworkPolicy", "unicore-operator")["spec"]
             ["ingress"]}
    control_plane = {"ipBlock": {"cidr": "10.0.0.0/24"}}
    assert rules == {frozenset({(8080, "TCP")}): [{"namespaceSelector": {"matchLabels": {"t": "obs"}}}],
                     frozenset({(8443, "TCP")}): [control_plane], frozenset({(9443, "TCP")}): [control_plane]}
    # no sources at all: nothing is admitted (an empty `from` would admit everyone)
    closed = render("--set-json", "networkPolicy.apiServerFrom=[]", "--set-json", "networkPolicy.metricsFrom=[]",
                    namespace=NS)
    assert not one(closed, "NetworkPolicy", "unicore-operator")["spec"].get("ingress")


def egress_by_port(policy: dict[str, Any]) -> dict[frozenset[tuple[Any, str]], list[dict[str, Any]] | None]:
    return {frozenset(ports_of(rule)): rule.get("to") for rule in policy["spec"]["egress"]}


def test_turn_pods_reach_only_dns_redis_the_api_server_and_the_model_endpoints() -> None:
    objs = render(namespace=NS)
    policy = one(objs, "NetworkPolicy", "unicore-agent", NS)
    spec = policy["spec"]
    turn = turn_pod_labels(objs)
    assert selects(spec["podSelector"], turn)
    for kind, name in (("Deployment", "unicore-operator"), ("StatefulSet", "unicore-redis")):
        assert not selects(spec["podSelector"], pod_labels(objs, kind, name)), name
    # nothing reaches a turn pod
    assert spec["policyTypes"] == ["Ingress", "Egress"] and not spec.get("ingress")
    egress = egress_by_port(policy)
    anywhere = [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]
    dns = egress[frozenset({(53, "UDP"), (53, "TCP")})]
    assert dns == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    (redis_peer,) = egress[frozenset({(6379, "TCP")})] or []
    assert selects(redis_peer["podSelector"], pod_labels(objs, "StatefulSet", "unicore-redis"))
    assert selects(redis_peer["namespaceSelector"], {"kubernetes.io/metadata.name": NS})
    assert egress[frozenset({(443, "TCP"), (6443, "TCP")})] == anywhere  # the API server
    assert egress[frozenset({(443, "TCP")})] is None  # the model endpoints: HTTPS anywhere
    assert len(spec["egress"]) == 4
    # the bundled Redis admits turn pods and the operator, nothing else
    redis = one(objs, "NetworkPolicy", "unicore-redis", NS)["spec"]
    assert selects(redis["podSelector"], pod_labels(objs, "StatefulSet", "unicore-redis"))
    (rule,) = redis["ingress"]
    assert ports_of(rule) == {(6379, "TCP")}
    for labels in (turn, pod_labels(objs, "Deployment", "unicore-operator")):
        assert any(selects(peer["podSelector"], labels) for peer in rule["from"])
    assert not any(selects(peer["podSelector"], {"app.kubernetes.io/managed-by": "unicore-operator"})
                   for peer in rule["from"])  # a pod with the label alone is no turn pod


def test_turn_pod_egress_follows_the_values() -> None:
    objs = render("--set", "redis.enabled=false", "--set", "redis.external.url=redis://r.example:6380/0",
                  "--set-json", 'networkPolicy.agent.externalRedis={"to":[{"ipBlock":{"cidr":"10.9.0.0/16"}}],'
                                '"ports":[{"port":6380,"protocol":"TCP"}]}',
                  "--set", "provider.openai.baseUrl=http://vllm.models.svc:8000/v1",
                  "--set-json", 'networkPolicy.agent.extraEgress=[{"ports":[{"port":9418,"protocol":"TCP"}]}]',
                  "--set", "rbac.clusterWide=true", "--set", "agent.extraNamespaces={team-a}", namespace=NS)
    assert not find(objs, "NetworkPolicy", "unicore-redis")
    for ns in (NS, "team-a"):
        policy = one(objs, "NetworkPolicy", "unicore-agent", ns)
        assert selects(policy["spec"]["podSelector"], turn_pod_labels(objs, ns))
        egress = egress_by_port(policy)
        assert egress[frozenset({(6380, "TCP")})] == [{"ipBlock": {"cidr": "10.9.0.0/16"}}]
        assert frozenset({(6379, "TCP")}) not in egress
        assert egress[frozenset({(8000, "TCP")})] is None  # provider.openai.baseUrl's port
        assert egress[frozenset({(9418, "TCP")})] is None  # extraEgress
    https = render("--set", "provider.openai.baseUrl=https://api.example.com/v1", namespace=NS)
    assert frozenset({(443, "TCP")}) in egress_by_port(one(https, "NetworkPolicy", "unicore-agent"))


def test_the_values_file_documents_the_new_keys() -> None:
    text = (CHART / "values.yaml").read_text()
    for key in ("admission:", "apiServerFrom:", "metricsFrom:", "modelEndpoints:", "extraEgress:",
                "externalRedis:", "existingSecret:", "caBundle:"):
        assert key in text
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert {"admission", "networkPolicy"} <= set(schema["properties"])
