"""Kopf's annotation storages (the last handled spec, handler progress) without Kopf's deep copies of every object.

On every watch event of every object it watches (AgentTasks, and the turn Jobs and turn pods, about fifteen events
per turn), Kopf works out the object's *essence* (spec, labels, annotations and the fields handlers name; no status,
no other metadata) to compare with the essence it last handled. ``DiffBaseStorage.build`` deep-copies the whole body
before it drops metadata (with its managedFields) and status, and ``ProgressStorage.clear`` deep-copies the essence
again, for the stored one and the new one alike: for a Job or a pod, whose bodies are large and whose kinds have no
handler that compares essences, this was a fifth of the event loop's busy time (py-spy, 90 turns/min).

These two storages store the same annotations and make the same essences: ``build`` hands Kopf's own ``build`` the
body without the stanzas it drops (status and metadata but for labels, annotations and owner references, unless a
handler's field is in them), and ``clear`` removes Kopf's progress annotations from the essence it is given, which
Kopf built or decoded for this one comparison and uses only as returned (its one caller, ``_detect_causes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

KEPT_METADATA = ("labels", "annotations", "ownerReferences")  # what Kopf's build reads of metadata


def kept_stanzas(body: Mapping[str, Any], extra_fields: Iterable[Any]) -> dict[str, Any]:
    """``body`` without what ``DiffBaseStorage.build`` drops (shallow: values are the body's own objects)."""
    roots = {field.split(".", 1)[0] if isinstance(field, str) else field[0] for field in extra_fields}
    kept = {key: value for key, value in body.items() if key not in ("metadata", "status") or key in roots}
    if "metadata" not in kept:
        meta = body.get("metadata") or {}
        kept["metadata"] = {key: meta[key] for key in KEPT_METADATA if key in meta}
    return kept


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> Any:
        fields = list(extra_fields or ())
        return super().build(body=kopf.Body(cast(kopf.RawBody, kept_stanzas(body, fields))), extra_fields=fields)


class LeanProgressStorage(kopf.AnnotationsProgressStorage):
    def clear(self, *, essence: Any) -> Any:
        # AnnotationsProgressStorage.clear, without ProgressStorage.clear's deep copy of the essence first.
        annotations = cast(dict[str, Any], essence).get("metadata", {}).get("annotations", {})
        keys = {key for key in annotations if self.prefix and key.startswith(f"{self.prefix}/")}
        self.remove_annotations(essence, keys)
        self.remove_empty_stanzas(essence)
        return essence
