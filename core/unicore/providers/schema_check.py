"""A small JSON Schema validator for the subset our tool schemas use (pydantic's output; jsonschema is not a
dependency): ``type`` (one or a list), ``properties``, ``required``, ``additionalProperties`` (bool or schema),
``items``, ``enum``, ``const``, ``anyOf``/``oneOf``/``allOf``, ``minimum``/``maximum``, ``minLength``/``maxLength``,
``pattern``, ``minItems``/``maxItems``. Unknown keywords are ignored (as JSON Schema does), so a custom tool's
richer schema is checked no stricter than this; the tool's own pydantic validation still runs when it is called.
"""

from __future__ import annotations

import re
from typing import Any

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_problems(value: Any, schema: Any, where: str = "") -> list[str]:
    """What is wrong with ``value`` under ``schema`` (empty: it passes)."""
    if not isinstance(schema, dict):
        return []
    at = where or "(arguments)"
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not any(_TYPES.get(name, lambda v: True)(value) for name in names):
            return [f"{at}: expected {' or '.join(map(str, names))}, got {type(value).__name__}"]
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{at}: must be one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{at}: must be {schema['const']!r}")
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and all(schema_problems(value, o, where) for o in options):
            problems.append(f"{at}: matches none of the allowed forms")
    for option in schema.get("allOf") or []:
        problems.extend(schema_problems(value, option, where))
    if isinstance(value, dict):
        problems.extend(_object_problems(value, schema, where))
    elif isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{at}: at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{at}: at most {schema['maxItems']} items")
        for index, item in enumerate(value):
            problems.extend(schema_problems(item, schema.get("items"), f"{where}[{index}]"))
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{at}: at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{at}: at most {schema['maxLength']} characters")
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            problems.append(f"{at}: does not match {pattern}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{at}: at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{at}: at most {schema['maximum']}")
    return problems


def _object_problems(value: dict[str, Any], schema: dict[str, Any], where: str) -> list[str]:
    problems: list[str] = []
    properties = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in value:
            problems.append(f"{where + '.' if where else ''}{name}: required field is missing")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        path = f"{where}.{name}" if where else str(name)
        if name in properties:
            problems.extend(schema_problems(item, properties[name], path))
        elif extra is False:
            problems.append(f"{path}: unknown field (not in the tool's input schema)")
        elif isinstance(extra, dict):
            problems.extend(schema_problems(item, extra, path))
    return problems


__all__ = ["schema_problems"]
