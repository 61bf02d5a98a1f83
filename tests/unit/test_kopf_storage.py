"""The operator's lean Kopf storages make the same essences as Kopf's own, without deep-copying whole bodies."""

from __future__ import annotations

import copy
import json
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import diffs
from unicore_operator import names
from unicore_operator.kopf_storage import DIGEST_OVER_BYTES, LeanDiffBaseStorage, LeanProgressStorage, digest

PREFIX = names.ANNOTATION_PREFIX
MANAGED = [{"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {"f:active": {}}}}]
TASK = {
    "apiVersion": "unicore.dev/v1alpha1", "kind": "AgentTask",
    "metadata": {"name": "demo", "namespace": "ns", "uid": "u1", "generation": 2, "resourceVersion": "7",
                 "labels": {"team": "a"}, "finalizers": [names.FINALIZER], "managedFields": MANAGED,
                 "annotations": {f"{PREFIX}/last-handled-configuration": json.dumps({"spec": {"prompt": "hi"}}),
                                 f"{PREFIX}/initialise": json.dumps({"started": "2026-01-01T00:00:00"}),
                                 "kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "kept"}},
    "spec": {"prompt": "hi", "suspend": True, "script": {"default": "done"}},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
}
JOB = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "demo-t1", "namespace": "ns", "uid": "j1", "managedFields": MANAGED,
                 "labels": {"app.kubernetes.io/managed-by": "unicore-operator"},
                 "annotations": {"unicore.dev/task-id": "ns/demo"},
                 "ownerReferences": [{"kind": "AgentTask", "name": "demo", "uid": "u1"}]},
    "spec": {"template": {"spec": {"containers": [{"name": "turn", "image": "x", "env": [{"name": "A"}]}]}}},
    "status": {"active": 1, "startTime": "2026-01-01T00:00:00Z"},
}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-t1-abc", "namespace": "ns"},
       "spec": {"containers": [{"name": "turn"}]}, "status": {"phase": "Succeeded"}}
FIELDS: list[list[Any]] = [[], [("spec", "suspend")], ["status.phase"], [("metadata", "labels", "team")]]


def kopfs() -> tuple[kopf.AnnotationsDiffBaseStorage, kopf.AnnotationsProgressStorage]:
    return (kopf.AnnotationsDiffBaseStorage(prefix=PREFIX, key="last-handled-configuration"),
            kopf.AnnotationsProgressStorage(prefix=PREFIX))


def leans() -> tuple[LeanDiffBaseStorage, LeanProgressStorage]:
    return (LeanDiffBaseStorage(prefix=PREFIX, key="last-handled-configuration"),
            LeanProgressStorage(prefix=PREFIX))


@pytest.mark.parametrize("raw", [TASK, JOB, POD], ids=["agenttask", "job", "pod"])
@pytest.mark.parametrize("fields", FIELDS, ids=["none", "spec", "status", "metadata"])
def test_the_essences_are_kopfs(raw: dict[str, Any], fields: list[Any]) -> None:
    untouched = copy.deepcopy(raw)
    body = kopf.Body(raw)
    (kopf_base, kopf_progress), (lean_base, lean_progress) = kopfs(), leans()
    new = lean_progress.clear(essence=lean_base.build(body=body, extra_fields=fields))
    assert new == kopf_progress.clear(essence=kopf_base.build(body=body, extra_fields=fields))
    old = lean_base.fetch(body=body)
    if old is not None:
        assert lean_progress.clear(essence=old) == kopf_progress.clear(essence=kopf_base.fetch(body=body))
    assert raw == untouched  # nothing of the body was changed, though the essence is not a deep copy of it
    new["spec"]["added"] = 1
    assert "added" not in raw["spec"]


def test_the_operator_uses_them() -> None:
    from unicore_operator.handlers.lifecycle import tune_kopf
    from unicore_operator.settings import OperatorSettings

    settings = kopf.OperatorSettings()
    tune_kopf(settings, OperatorSettings(redis_url="redis://unused:6379/0", namespaces=("ns",)))
    assert isinstance(settings.persistence.diffbase_storage, LeanDiffBaseStorage)
    assert isinstance(settings.persistence.progress_storage, LeanProgressStorage)


@pytest.mark.parametrize(("namespaces", "scanning"), [((), True), (("ns",), False), (("a", "b"), False),
                                                      (("team-*",), True)])
def test_a_namespaced_operator_serves_its_namespaces_without_listing_namespaces(
    namespaces: tuple[str, ...], scanning: bool,
) -> None:
    """Kopf's namespace scanning lists namespaces at cluster scope, which the chart's namespaced operator may not:
    Kopf retried the 403 for about a minute, serving nothing, before it fell back to the names it was given."""
    from unicore_operator.handlers.lifecycle import tune_kopf
    from unicore_operator.settings import OperatorSettings

    settings = kopf.OperatorSettings()
    tune_kopf(settings, OperatorSettings(redis_url="redis://unused:6379/0", namespaces=namespaces))
    assert settings.scanning.disabled is not scanning


ANNOTATIONS_CAP = 256 * 1024  # the API server's cap on all of an object's annotations together
STORED_KEY = f"{PREFIX}/last-handled-configuration"


def big_task(script_text: str, prompt: str) -> dict[str, Any]:
    task = copy.deepcopy(TASK)
    del task["metadata"]["annotations"][STORED_KEY]
    task["spec"] = {"prompt": prompt, "suspend": False, "model": "scripted",
                    "script": {"default": "done", "tasks": {"*": [{"text": script_text}]}}}
    return task


def stored(raw: dict[str, Any]) -> str:
    """The annotation the lean storage writes for ``raw`` (as Kopf patches it)."""
    storage = leans()[0]
    patch = kopf.Patch()
    storage.store(body=kopf.Body(raw), patch=patch, essence=storage.build(body=kopf.Body(raw)))
    return str(patch["metadata"]["annotations"][STORED_KEY])


def test_large_fields_are_stored_as_digests_so_the_annotation_fits() -> None:
    """A 1.4 MB spec.script and a 64k-character prompt (each character 6 bytes as Kopf's JSON escapes it): the
    stored essence stays small, and Kopf still sees a change to either (issue 25, 7: every patch of the annotation
    failed with 422)."""
    raw = big_task("s" * 1_400_000, "\u4e2d" * 65536)
    encoded = stored(raw)
    assert len(encoded) < 2048 and len(encoded) + 1024 < ANNOTATIONS_CAP
    essence = json.loads(encoded)
    assert essence["spec"]["suspend"] is False and essence["spec"]["model"] == "scripted"  # small fields as they are
    for field in ("script", "prompt"):
        assert str(essence["spec"][field]).startswith("unicore-digest:sha256:")

    # stored, then read back from the object: no change; a change of one character of the script: a change of
    # spec.script only, as Kopf compares them
    base, progress = leans()
    raw["metadata"]["annotations"][STORED_KEY] = encoded
    body = kopf.Body(raw)
    old = progress.clear(essence=base.fetch(body=body))
    assert diffs.diff(old, progress.clear(essence=base.build(body=body))) == ()
    changed = copy.deepcopy(raw)
    changed["spec"]["script"]["tasks"]["*"][0]["text"] = "s" * 1_399_999 + "t"
    changed["spec"]["suspend"] = True
    diff = diffs.diff(old, progress.clear(essence=base.build(body=kopf.Body(changed))))
    assert sorted(op.field for op in diff) == [("spec", "script"), ("spec", "suspend")]
    assert [(op.old, op.new) for op in diff if op.field == ("spec", "suspend")] == [(False, True)]


def test_a_value_is_digested_only_past_the_bound() -> None:
    at_bound = "a" * (DIGEST_OVER_BYTES - 2)  # its JSON, with the quotes, is DIGEST_OVER_BYTES bytes
    assert digest(at_bound) == at_bound and digest(["b" * 500, "c" * 517]) == ["b" * 500, "c" * 517]
    over = digest(at_bound + "a")
    assert over.startswith("unicore-digest:sha256:") and over.endswith(f"({DIGEST_OVER_BYTES + 1} bytes)")
    assert digest({"x": 1, "y": "z" * 2000}) == digest({"y": "z" * 2000, "x": 1})  # key order does not count
    note = "n" * 5000
    raw = big_task("small", "hi")
    raw["metadata"]["annotations"]["note"] = note
    assert json.loads(stored(raw))["metadata"]["annotations"]["note"] == digest(note) != note
