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

**Large fields.** Kopf stores the essence it last handled, as JSON, in the annotation
``unicore.dev/last-handled-configuration``, and the API server caps all of an object's annotations together at
256 KiB: a large ``spec.script`` (1.4 MB) or a prompt near its cap made every patch of that annotation fail with 422,
on every event. ``build`` therefore keeps a value of a stanza (``spec``'s fields, each label and annotation) whose
JSON is over ``DIGEST_OVER_BYTES`` as its SHA-256 digest (``digest``): the stored essence stays small, and a change to
the value still changes the essence, so Kopf still sees every change (a handler's ``old``/``new`` of such a field are
digests; the operator's handlers read the body, and the one field handler, ``spec.suspend``, names a boolean).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

KEPT_METADATA = ("labels", "annotations", "ownerReferences")  # what Kopf's build reads of metadata
DIGEST_OVER_BYTES = 1024  # a stanza's value whose compact JSON is longer is kept in the essence as its digest
DIGEST_PREFIX = "unicore-digest:sha256:"


def kept_stanzas(body: Mapping[str, Any], extra_fields: Iterable[Any]) -> dict[str, Any]:
    """``body`` without what ``DiffBaseStorage.build`` drops (shallow: values are the body's own objects)."""
    roots = {field.split(".", 1)[0] if isinstance(field, str) else field[0] for field in extra_fields}
    kept = {key: value for key, value in body.items() if key not in ("metadata", "status") or key in roots}
    if "metadata" not in kept:
        meta = body.get("metadata") or {}
        kept["metadata"] = {key: meta[key] for key in KEPT_METADATA if key in meta}
    return kept


def digest(value: Any) -> Any:
    """``value`` itself when its compact JSON is at most ``DIGEST_OVER_BYTES`` bytes, else a short string naming
    its SHA-256 and size (equal values, equal digests)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str) and 6 * len(value) + 2 <= DIGEST_OVER_BYTES:  # \uXXXX: at most 6 bytes a character
        return value
    encoded = json.dumps(value, separators=(",", ":"), sort_keys=True)  # ASCII, as Kopf stores it
    if len(encoded) <= DIGEST_OVER_BYTES:
        return value
    return f"{DIGEST_PREFIX}{hashlib.sha256(encoded.encode()).hexdigest()} ({len(encoded)} bytes)"


def digest_large_values(essence: dict[str, Any]) -> dict[str, Any]:
    """The essence (changed in place) with every large value of a stanza replaced by its ``digest``: each field of
    ``spec`` (and of any other top-level stanza), each label and annotation, and a large top-level scalar."""
    for key, stanza in list(essence.items()):
        if key == "metadata" and isinstance(stanza, dict):
            for part in stanza.values():
                if isinstance(part, dict):
                    for name, value in list(part.items()):
                        part[name] = digest(value)
        elif isinstance(stanza, dict):
            for name, value in list(stanza.items()):
                stanza[name] = digest(value)
        else:
            essence[key] = digest(stanza)
    return essence


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> Any:
        fields = list(extra_fields or ())
        essence = super().build(body=kopf.Body(cast(kopf.RawBody, kept_stanzas(body, fields))), extra_fields=fields)
        return digest_large_values(cast(dict[str, Any], essence))  # Kopf's build made it: a copy of its own


class LeanProgressStorage(kopf.AnnotationsProgressStorage):
    def clear(self, *, essence: Any) -> Any:
        # AnnotationsProgressStorage.clear, without ProgressStorage.clear's deep copy of the essence first.
        annotations = cast(dict[str, Any], essence).get("metadata", {}).get("annotations", {})
        keys = {key for key in annotations if self.prefix and key.startswith(f"{self.prefix}/")}
        self.remove_annotations(essence, keys)
        self.remove_empty_stanzas(essence)
        return essence
