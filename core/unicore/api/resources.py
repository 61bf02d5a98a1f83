"""Container resources of turn pods: Kubernetes quantities, the rules the API server applies to them, and the merge
of the operator's defaults, the GPU limit and an AgentTask's ``spec.resources`` (all pure).

The checks here are the ones the AgentTask CRD makes with CEL (crds/agenttask.yaml, ``spec.resources``), so the
operator's own defaults (``UNICORE_AGENT_RESOURCES``) are refused at startup for the same reasons a task is refused
at admission, and the merged result is always a container the API server accepts:

- ``requests`` name only cpu, memory and ephemeral-storage (resources that may be overcommitted); extended resources
  (names with a ``/``, e.g. ``nvidia.com/gpu``, whole numbers) and ``hugepages-<size>`` go in ``limits`` only, where
  Kubernetes sets their request equal to the limit;
- every value is a non-negative quantity (``500m``, ``2``, ``256Mi``, ``1Gi``, ``1e3``);
- a request is at most the limit of the same resource.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

# Kubernetes' quantity grammar (apimachinery resource.Quantity), without a sign: resources cannot be negative.
QUANTITY_RE = re.compile(
    r"^\+?(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))?$"
)
BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_RE = re.compile(r"^hugepages-[0-9]+([KMGTPE]i?)?$")
EXTENDED_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
SECTIONS = ("requests", "limits")
EXAMPLES = "e.g. 500m, 2, 256Mi, 1Gi"

Resources = dict[str, dict[str, str]]


class ResourcesInvalid(ValueError):
    """A resources map breaks a rule; the message is one line and names the offending key."""


def parse_quantity(value: object) -> Decimal:
    """The value of a Kubernetes quantity (an int, or a string such as ``250m`` or ``1Gi``); ValueError if it is none
    or negative."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a Kubernetes quantity ({EXAMPLES})")
    text = str(value)
    match = QUANTITY_RE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a non-negative Kubernetes quantity ({EXAMPLES})")
    number = Decimal(match.group("number"))
    suffix = match.group("suffix") or ""
    if suffix in BINARY:
        return number * (Decimal(1024) ** BINARY[suffix])
    if suffix in DECIMAL:
        return number.scaleb(DECIMAL[suffix])
    return number.scaleb(int(suffix[1:]))  # an exponent: 1e3, 5E-2


def is_extended(name: str) -> bool:
    return "/" in name


def check_name(section: str, name: str) -> None:
    if section == "requests":
        if name not in OVERCOMMITTABLE:
            raise ResourcesInvalid(
                f"requests may only name {', '.join(OVERCOMMITTABLE)}, not {name!r} (extended resources such as "
                "nvidia.com/gpu, and hugepages, go in limits: their request is their limit)"
            )
    elif name not in OVERCOMMITTABLE and not HUGEPAGES_RE.match(name) and not EXTENDED_RE.match(name):
        raise ResourcesInvalid(
            f"limits: {name!r} is not a resource name (cpu, memory, ephemeral-storage, hugepages-<size>, or an "
            "extended resource such as nvidia.com/gpu)"
        )


def check_resources(value: object) -> Resources:
    """``value`` (``{"requests": {...}, "limits": {...}}``, both optional) as the container's resources, quantities
    as strings; ResourcesInvalid (one line) when it breaks a rule of the module docstring."""
    if not isinstance(value, Mapping):
        raise ResourcesInvalid('must be an object {"requests": {...}, "limits": {...}}')
    unknown = sorted(str(key) for key in value if key not in SECTIONS)
    if unknown:
        raise ResourcesInvalid(f"unknown keys {unknown} (only requests and limits)")
    checked: Resources = {}
    for section in SECTIONS:
        entries = value.get(section)
        if entries is None:
            continue
        if not isinstance(entries, Mapping):
            raise ResourcesInvalid(f"{section} must be an object of resource name -> quantity")
        for name, quantity in entries.items():
            check_name(section, str(name))
            try:
                amount = parse_quantity(quantity)
            except ValueError as exc:
                raise ResourcesInvalid(f"{section}.{name}: {exc}") from None
            if section == "limits" and is_extended(str(name)) and amount != amount.to_integral_value():
                raise ResourcesInvalid(f"limits.{name}: an extended resource must be a whole number, not {quantity!r}")
        if entries:
            checked[section] = {str(name): str(quantity) for name, quantity in entries.items()}
    for name, request in checked.get("requests", {}).items():
        limit = checked.get("limits", {}).get(name)
        if limit is not None and parse_quantity(request) > parse_quantity(limit):
            raise ResourcesInvalid(f"requests.{name} ({request}) is more than limits.{name} ({limit})")
    return checked


def merge_resources(defaults: Mapping[str, Mapping[str, str]], gpu_limits: Mapping[str, str],
                    task: Mapping[str, Any] | None) -> Resources:
    """The turn container's resources: ``defaults`` (the operator's), then ``gpu_limits`` (from ``spec.gpus``),
    then the task's ``spec.resources``, each winning key by key over the ones before.

    Where a task sets only one side of a resource, the other side, from the defaults, yields so the pair stays
    valid (a request may not exceed its limit): a task's limit below the default request lowers that request to it;
    a task's request above the default limit raises that limit to it. Both set by the task were checked together
    (CEL at admission).
    """
    task = task or {}
    merged: Resources = {section: dict(defaults.get(section) or {}) for section in SECTIONS}
    merged["limits"].update(gpu_limits)
    own: Resources = {section: {str(k): str(v) for k, v in (task.get(section) or {}).items()} for section in SECTIONS}
    for section in SECTIONS:
        merged[section].update(own[section])
    for name in set(merged["requests"]) & set(merged["limits"]):
        request, limit = merged["requests"][name], merged["limits"][name]
        try:
            too_much = parse_quantity(request) > parse_quantity(limit)
        except ValueError:
            continue  # not ours to judge: the API server says what is wrong with it
        if not too_much:
            continue
        if name in own["limits"] and name not in own["requests"]:
            merged["requests"][name] = limit
        elif name in own["requests"] and name not in own["limits"]:
            merged["limits"][name] = request
    return {section: entries for section, entries in merged.items() if entries}
