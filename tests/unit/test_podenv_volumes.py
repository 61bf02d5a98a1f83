"""The local pod runner's volumes: a persistentVolumeClaim is one host folder shared by the pods that mount it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from unicore_devcluster.podenv import PodSetupError, build_plan


def pod(name: str, sub_path: str | None, claim: str = "ws", namespace: str = "team-a") -> dict[str, Any]:
    mount: dict[str, Any] = {"name": "workspace", "mountPath": "/workspace"}
    if sub_path is not None:
        mount["subPath"] = sub_path
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "containers": [{
                "name": "turn", "command": ["true"],
                "env": [{"name": "UNICORE_WORKSPACE", "value": "/workspace"}],
                "volumeMounts": [mount, {"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [
                {"name": "workspace", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }


def plan_of(obj: dict[str, Any], data: Path) -> Any:
    pod_dir = data / "pods" / obj["metadata"]["name"]
    return build_plan(obj, None, pod_dir, path="/usr/bin:/bin", kubeconfig=None)


def test_two_pods_mounting_one_claim_share_the_subpath_folder(tmp_path: Path) -> None:
    first = plan_of(pod("t1", "tree-a"), tmp_path)
    folder = tmp_path / "claims" / "team-a" / "ws" / "tree-a"
    assert first.mounts["/workspace"] == folder and folder.is_dir()
    assert first.env["UNICORE_WORKSPACE"] == str(folder)
    assert first.mounts["/tmp"] == tmp_path / "pods" / "t1" / "volumes" / "tmp"
    (folder / "notes.txt").write_text("kept")
    second = plan_of(pod("t2", "tree-a"), tmp_path)
    assert (Path(second.env["UNICORE_WORKSPACE"]) / "notes.txt").read_text() == "kept"
    assert plan_of(pod("t3", "tree-b"), tmp_path).mounts["/workspace"] == folder.parent / "tree-b"
    assert plan_of(pod("t4", None), tmp_path).mounts["/workspace"] == folder.parent
    other_ns = plan_of(pod("t5", "tree-a", namespace="team-b"), tmp_path)
    assert other_ns.mounts["/workspace"] == tmp_path / "claims" / "team-b" / "ws" / "tree-a"


@pytest.mark.parametrize("sub_path", ["/abs", "../up", "a/../../b"])
def test_escaping_subpaths_are_refused(tmp_path: Path, sub_path: str) -> None:
    with pytest.raises(PodSetupError, match="invalid subPath"):
        plan_of(pod("t1", sub_path), tmp_path)
