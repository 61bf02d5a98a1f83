"""Pure checks of the Helm chart's files (no helm binary needed): CRD copy, values docs, schema coverage.

Rendering (`helm lint`, `helm template`) and installing are in tests/cluster/test_chart*.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "unicore"


def test_chart_crds_are_byte_identical_copies_of_crds() -> None:
    sources = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert "agenttask.yaml" in sources and "mcpserver.yaml" in sources
    for name in sources:
        source = (ROOT / "crds" / name).read_bytes()
        copy = (CHART / "crds" / name).read_bytes() if (CHART / "crds" / name).is_file() else b""
        assert copy == source, f"helm/unicore/crds/{name} drifted from crds/{name}: cp crds/*.yaml helm/unicore/crds/"


def test_chart_crds_folder_holds_only_the_crds() -> None:
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def _key_lines() -> list[tuple[int, list[str], str]]:
    """(line number, key path, previous line) for every mapping key in values.yaml."""
    out: list[tuple[int, list[str], str]] = []
    stack: list[tuple[int, str]] = []
    lines = (CHART / "values.yaml").read_text().splitlines()
    for n, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z_][\w./-]*|\"[^\"]+\"):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2).strip('"')
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key]
        stack.append((indent, key))
        out.append((n + 1, path, lines[n - 1].strip() if n else ""))
    return out


def _schema_node(schema: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for key in path:
        if node is None or "properties" not in node:
            return None
        node = node["properties"].get(key)
    return node


def test_every_value_is_commented(schema: dict[str, Any]) -> None:
    """Every chart value (a key the schema declares) has a comment right above it. Keys inside free-form data
    (resources, labels, annotations) are data, not chart values."""
    missing = []
    for number, path, previous in _key_lines():
        parent = _schema_node(schema, path[:-1])
        if parent is None or "properties" not in parent:
            continue  # inside free-form data
        if not previous.startswith("#"):
            missing.append(f"values.yaml:{number}: {'.'.join(path)}")
    assert not missing, "values without a comment:\n" + "\n".join(missing)


def _walk(values: Any, schema: dict[str, Any], path: str, problems: list[str]) -> None:
    if "properties" not in schema:
        return
    if not isinstance(values, dict):
        problems.append(f"{path}: expected a mapping")
        return
    for key, value in values.items():
        sub = schema["properties"].get(key)
        if sub is None:
            problems.append(f"{path}.{key}: not declared in values.schema.json")
            continue
        _walk(value, sub, f"{path}.{key}", problems)
    for key in schema["properties"]:
        if key not in values:
            problems.append(f"{path}.{key}: declared in values.schema.json but missing from values.yaml")


def test_schema_and_values_declare_the_same_keys(values: dict[str, Any], schema: dict[str, Any]) -> None:
    problems: list[str] = []
    _walk(values, schema, "", problems)
    assert not problems, "\n".join(problems)


def test_schema_is_strict(schema: dict[str, Any]) -> None:
    """Every object with declared properties rejects unknown keys (typos in -f my-values.yaml fail loudly)."""
    loose = []

    def visit(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            if node.get("additionalProperties") is not False:
                loose.append(path or "<root>")
            for key, sub in node["properties"].items():
                visit(sub, f"{path}.{key}")

    visit(schema, "")
    assert not loose, f"objects without additionalProperties: false: {loose}"


def test_no_latest_image_tags(values: dict[str, Any]) -> None:
    for section in ("operator", "agent", "redis"):
        assert values[section]["image"]["tag"] != "latest"
    assert values["redis"]["image"]["tag"], "the Redis image must be pinned"


def test_dashboards_are_valid_json() -> None:
    files = sorted((CHART / "dashboards").glob("*.json"))
    assert files, "helm/unicore/dashboards/ holds no dashboard: the ConfigMap template would render nothing"
    for path in files:
        board = json.loads(path.read_text())
        assert board.get("title"), f"{path.name} has no title"


def _panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    return [p for panel in items for p in (panel, *_panels(panel.get("panels") or []))]


def test_every_dashboard_panel_says_what_it_shows_and_what_to_do() -> None:
    """issue 11: 18 of 24 panels had no description. Each has one (Grafana shows it as the panel's (i) tooltip):
    what the panel shows, then after "Looks bad:" what that means and what to do."""
    missing = []
    count = 0
    for path in sorted((CHART / "dashboards").glob("*.json")):
        for panel in _panels(json.loads(path.read_text()).get("panels") or []):
            count += 1
            text = str(panel.get("description") or "").strip()
            title = str(panel.get("title") or "")
            if len(text) < 80 or text.lower() == title.lower() or "Looks bad" not in text:
                missing.append(f"{path.name}: {title!r}: {text!r}")
    assert count >= 24
    assert not missing, "panels without a useful description:\n" + "\n".join(missing)


def test_chart_version_fields() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "unicore"
    assert re.match(r"^\d+\.\d+\.\d+$", str(chart["version"]))
    assert chart["appVersion"] != "latest"
