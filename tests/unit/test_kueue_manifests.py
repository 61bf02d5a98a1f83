"""What unicore_devcluster.kueue installs besides the manager (pure): the webhook configurations made from the module's
manifests, the CRDs' conversion webhook, the manager's Configuration and the GPU queues. The real manager runs with
them in tests/cluster/test_kueue_real_node.py."""

from __future__ import annotations

from pathlib import Path

import yaml
from unicore_devcluster import kueue as kq

# The shape of Kueue v0.17.0's config/components/webhook/manifests.yaml (kustomize's input: unprefixed names,
# Service "system/webhook-service"), cut down to one webhook of each kind that matters here.
MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  failurePolicy: Fail
  name: mjob.kb.io
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  failurePolicy: Fail
  name: mpod.kb.io
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}}
  failurePolicy: Fail
  name: mjobset.kb.io
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE], resources: [jobsets]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-workload}}
  failurePolicy: Fail
  name: mworkload.kb.io
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [workloads]}]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-batch-v1-job}}
  failurePolicy: Fail
  name: vjob.kb.io
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [jobs]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-apps-v1-deployment}}
  failurePolicy: Fail
  name: vdeployment.kb.io
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}]
  sideEffects: None
"""


def test_webhook_configurations_are_named_and_routed_as_the_release_and_scoped_to_managed_namespaces() -> None:
    mutating, validating = kq.webhook_configurations(MANIFESTS)
    assert (mutating["kind"], mutating["metadata"]["name"]) == (
        "MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration")
    assert (validating["kind"], validating["metadata"]["name"]) == (
        "ValidatingWebhookConfiguration", "kueue-validating-webhook-configuration")
    # only what runs here: batch/v1 Jobs and Kueue's own kinds (no pods, deployments, jobsets)
    assert [h["name"] for h in mutating["webhooks"]] == ["mjob.kb.io", "mworkload.kb.io"]
    assert [h["name"] for h in validating["webhooks"]] == ["vjob.kb.io"]
    for hook in [*mutating["webhooks"], *validating["webhooks"]]:
        assert hook["clientConfig"] == {"service": {"name": "kueue-webhook-service", "namespace": "kueue-system",
                                                    "path": hook["clientConfig"]["service"]["path"]}}
        assert hook["failurePolicy"] == "Fail"
    scoped = {"matchLabels": {"unicore.dev/kueue": "enabled"}}
    assert mutating["webhooks"][0]["namespaceSelector"] == scoped and validating["webhooks"][0][
        "namespaceSelector"] == scoped
    assert "namespaceSelector" not in mutating["webhooks"][1]  # a Workload is Kueue's wherever it is


def test_the_conversion_webhook_goes_on_the_crds_the_rotator_injects_and_only_those(tmp_path: Path) -> None:
    for plural in ("workloads", "resourceflavors"):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.kueue.x-k8s.io"}, "spec": {"group": "kueue.x-k8s.io"}}
        (tmp_path / f"kueue.x-k8s.io_{plural}.yaml").write_text("---\n" + yaml.safe_dump(crd))
    resourceflavors, workloads = kq.crds(tmp_path)
    assert resourceflavors["metadata"]["name"] == "resourceflavors.kueue.x-k8s.io"
    assert "conversion" not in resourceflavors["spec"]
    assert workloads["spec"]["conversion"] == {"strategy": "Webhook", "webhook": {
        "clientConfig": {"service": {"namespace": "kueue-system", "name": "kueue-webhook-service",
                                     "path": "/convert"}},
        "conversionReviewVersions": ["v1"]}}
    assert set(kq.CONVERTED) == {"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}


def test_the_configuration_turns_on_internal_certificates_for_the_service_and_scopes_jobs(tmp_path: Path) -> None:
    config = kq.configuration(webhook_port=19443, health_port=18081, metrics_port=18443, cert_dir=tmp_path)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and config["namespace"] == "kueue-system"
    assert config["internalCertManagement"] == {"enable": True, "webhookServiceName": "kueue-webhook-service",
                                                "webhookSecretName": "kueue-webhook-server-cert"}
    assert config["webhook"] == {"port": 19443, "certDir": str(tmp_path)}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:18081"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:18443"}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["manageJobsWithoutQueueName"] is False
    assert config["managedJobsNamespaceSelector"] == {"matchLabels": {"unicore.dev/kueue": "enabled"}}
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["featureGates"] == {"VisibilityOnDemand": False}


def test_the_queues_give_the_cluster_queue_the_gpus_and_the_namespace_its_local_queue() -> None:
    flavor, cq, lq = kq.queue_objects("team-a", 3, node_labels={"nvidia.com/gpu.present": "true"})
    assert flavor["metadata"]["name"] == "default-flavor"
    assert flavor["spec"] == {"nodeLabels": {"nvidia.com/gpu.present": "true"}}
    [group] = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    [quotas] = group["flavors"]
    assert quotas["name"] == "default-flavor"
    assert {r["name"]: r["nominalQuota"] for r in quotas["resources"]}["nvidia.com/gpu"] == "3"
    assert (lq["metadata"], lq["spec"]) == ({"name": "gpu-queue", "namespace": "team-a"},
                                            {"clusterQueue": "gpu-cluster-queue"})
    assert kq.queue_objects("team-b", 2)[0]["spec"] == {}  # no node labels: any node
