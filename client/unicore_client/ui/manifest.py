"""An AgentTask manifest (YAML or JSON) as the web UI's "create from YAML" receives it, checked with the same rules as
the operator's (``unicore.api.spec.parse_spec``: the spec's pydantic model, camelCase keys, unknown fields
refused, the model and script checked) plus what the API server would check of the object itself: apiVersion
``unicore.dev/v1alpha1``, kind ``AgentTask``, ``metadata.name`` a task name. Every problem is one line
(``BadRequest``). YAML aliases are refused (a small manifest must not expand into a large one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from unicore.api.contract import API_VERSION, KIND
from unicore.api.schema import validate_task_id
from unicore.errors import UniCoreError

if TYPE_CHECKING:
    from unicore.api.spec import AgentTaskSpec

MAX_DEPTH = 64


class ManifestInvalid(ValueError):
    """A manifest that cannot be created; the message is one line for the user."""


def load_yaml(text: str) -> Any:
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise ManifestInvalid(f"the manifest uses a YAML alias (*{event.anchor}); write the value out")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ManifestInvalid(f"the manifest is nested more than {MAX_DEPTH} levels deep")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ManifestInvalid(f"the manifest is not valid YAML/JSON: {first}") from None


def parse_manifest(text: str) -> tuple[str, AgentTaskSpec]:
    """(metadata.name, the parsed spec) of a root AgentTask manifest; ``ManifestInvalid`` otherwise."""
    # The spec's model lives with the operator, which the web UI shares its distribution with; imported here only.
    from unicore.api.spec import parse_spec

    document = load_yaml(text)
    if not isinstance(document, dict):
        raise ManifestInvalid(f"the manifest is one object with apiVersion: {API_VERSION} and kind: {KIND}")
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        raise ManifestInvalid(f"apiVersion: {API_VERSION} and kind: {KIND} expected, got "
                              f"{document.get('apiVersion')!r} and {document.get('kind')!r}")
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ManifestInvalid("metadata.name is required")
    try:
        validate_task_id(name)
    except ValueError as exc:
        raise ManifestInvalid(f"metadata.name: {exc}") from None
    spec = document.get("spec")
    if not isinstance(spec, dict):
        raise ManifestInvalid("spec is required (an object with at least spec.prompt)")
    try:
        parsed = parse_spec(spec)
    except UniCoreError as exc:  # SpecInvalid: every problem listed on one line
        raise ManifestInvalid(str(exc)) from None
    if parsed.parent_ref is not None:
        raise ManifestInvalid("spec.parentRef: the UI creates root tasks (children are spawned by their parent)")
    return name, parsed


__all__ = ["ManifestInvalid", "load_yaml", "parse_manifest"]
