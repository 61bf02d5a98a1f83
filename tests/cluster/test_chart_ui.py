"""The chart's in-cluster web UI (`ui.enabled`, single-tenant) on the real local control plane: the rendered
ServiceAccount, RoleBindings and Deployment applied as they are; the devcluster's pod runner starts the Deployment's
pod as a local process (its command, a TokenRequest token of the chart's ServiceAccount), which is `kubectl agenttask
ui` serving on 127.0.0.1 (where `kubectl port-forward` would reach it in a real pod). It shows and acts in the team's
namespace with the ServiceAccount's rights, and gets the API server's 403 in any other namespace."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from kubernetes import client

from tests.cluster.operator_harness import Tasks, install_crd, kubectl, turn_pod_logs
from tests.cluster.task_api_harness import free_port
from tests.cluster.test_chart_render import find, one, render
from tests.ui.conftest import UI
from tests.ui.test_ui_http import cookie, csrf, request
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster
URL = re.compile(r"UniCore UI: (http://127\.0\.0\.1:\d+/\?token=\S+)")


def test_the_chart_deploys_the_ui_for_one_namespace_with_its_service_account_rights(control_plane: Any) -> None:
    install_crd(control_plane.kubeconfig)
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    release, team, other = f"uc-{suffix}", f"team-{suffix}", f"other-{suffix}"
    for namespace in (release, team, other):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        wait_for(lambda ns=namespace: core.read_namespaced_service_account("default", ns), timeout=30,
                 what="default SA")
    port = free_port()
    chart = render("--set", "ui.enabled=true", "--set", f"ui.namespace={team}", "--set", f"ui.port={port}",
                   namespace=release)
    role = one(chart, "ClusterRole", "unicore-agenttask-editor")
    objects = [o for o in chart if (o.get("metadata") or {}).get("labels", {}).get("app.kubernetes.io/component")
               == "ui"]
    assert sorted((o["kind"], o["metadata"]["namespace"]) for o in objects) == sorted([
        ("ServiceAccount", release), ("RoleBinding", team), ("Role", team), ("RoleBinding", team),
        ("Deployment", release), ("NetworkPolicy", release)])
    assert not find(chart, "ClusterRoleBinding", "unicore-ui")  # rights in the team's namespace only
    container = one(chart, "Deployment", "unicore-ui")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["kubectl-agenttask", "ui", "-n", team, "--port", str(port)]
    assert "ports" not in container  # nothing listens on the pod's network
    client.RbacAuthorizationV1Api(api).create_cluster_role(role)
    try:
        applied = kubectl(control_plane.kubeconfig, "apply", "-f", "-", input_text=yaml.safe_dump_all(objects),
                          check=False)
        assert applied.returncode == 0, applied.stderr
        Tasks(api, team).create("ours", {"prompt": "x", "model": "scripted", "gpus": 0, "suspend": True})
        Tasks(api, other).create("theirs", {"prompt": "x", "model": "scripted", "gpus": 0, "suspend": True})

        def printed_url() -> str | None:
            for log in turn_pod_logs(control_plane, release):
                found = URL.search(log.read_text(errors="replace"))
                if found:
                    return found.group(1)
            return None

        url = wait_for(printed_url, timeout=120, interval=0.5, what="the UI pod's URL in its log")
        ui = UI(url=url, process=None)  # type: ignore[arg-type]  # the pod runner's process
        assert ui.port == port
        jar = cookie(ui)
        tree = request(ui, "GET", "/api/tree", headers={"Cookie": jar})
        ids = {node["id"] for node in yaml.safe_load(tree.read())["nodes"]}
        assert ids == {f"{team}/ours"}

        headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar)}
        assert request(ui, "POST", f"/api/tasks/{quote(f'{team}/ours', safe='')}/resume", headers=headers,
                       body={}).status == 200  # the editor role, as the ServiceAccount
        assert (Tasks(api, team).get("ours") or {})["spec"]["suspend"] is False

        denied = request(ui, "GET", f"/api/tasks/{quote(f'{other}/theirs', safe='')}", headers={"Cookie": jar})
        assert denied.status == 403
        message = yaml.safe_load(denied.read())["error"]
        assert f'User "system:serviceaccount:{release}:unicore-ui" cannot get resource "agenttasks"' in message
        refused = request(ui, "POST", f"/api/tasks/{quote(f'{other}/theirs', safe='')}/resume", headers=headers,
                          body={})
        assert refused.status == 403 and (Tasks(api, other).get("theirs") or {})["spec"]["suspend"] is True
    finally:
        kubectl(control_plane.kubeconfig, "delete", "--ignore-not-found", "--wait=false", "-f", "-",
                input_text=yaml.safe_dump_all(objects), check=False)
        client.RbacAuthorizationV1Api(api).delete_cluster_role("unicore-agenttask-editor")
        for namespace in (release, team, other):
            core.delete_namespace(namespace)
        api.close()
