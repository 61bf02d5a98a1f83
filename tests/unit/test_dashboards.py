"""Every PromQL expression in every dashboard parses (promql-parser, the Rust parser) and names only exported metrics.

The helpers here are reused by tests/cluster/test_metrics_scrape.py, which checks the names against a live scrape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from unicore_operator.metrics.catalog import known_series

DASHBOARDS = sorted((Path(__file__).resolve().parents[2] / "helm" / "unicore" / "dashboards").glob("*.json"))
# Grafana variables -> values that keep the expression valid PromQL (ranges need a duration, matchers a string).
GRAFANA_RANGE_VARS = re.compile(r"\$(__rate_interval|__interval|__range)|\$\{(__rate_interval|__interval|__range)\}")
GRAFANA_VARS = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>[A-Za-z_][A-Za-z0-9_]*)\)$")


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable (label_values(selector, label))."""
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels") or [])

    for panel in panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            if target.get("expr"):
                yield f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]
    for var in (dashboard.get("templating") or {}).get("list") or []:
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var.get("query"), dict) else var.get("query")
        match = LABEL_VALUES.match(str(query).strip())
        assert match, f"variable {var.get('name')}: only label_values(selector, label) is used, got {query!r}"
        if match.group("selector"):
            yield f"variable {var['name']}", match.group("selector")


def substitute(expr: str) -> str:
    expr = GRAFANA_RANGE_VARS.sub("5m", expr)
    return GRAFANA_VARS.sub("x", expr)


def metric_names(expr: str) -> set[str]:
    """Parse ``expr`` (after Grafana substitution) and return every metric name its selectors use."""
    ast = promql_parser.parse(substitute(expr))
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                for matcher in node.matchers.matchers:
                    if matcher.name == "__name__":
                        names.add(matcher.value)
            return
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if child is not None and not isinstance(child, (str, int, float)):
                visit(child)
        for arg in getattr(node, "args", None) or []:
            visit(arg)

    visit(ast)
    return names


def all_dashboard_metrics() -> dict[str, set[str]]:
    """metric name -> where it is used, over every dashboard."""
    used: dict[str, set[str]] = {}
    for path in DASHBOARDS:
        for where, expr in expressions(json.loads(path.read_text())):
            for name in metric_names(expr):
                used.setdefault(name, set()).add(f"{path.name}: {where}")
    return used


def test_there_are_an_overview_and_a_task_tree_dashboard() -> None:
    uids = {json.loads(p.read_text())["uid"] for p in DASHBOARDS}
    assert {"unicore-overview", "unicore-task-tree"} <= uids


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_expression_parses_and_uses_exported_metrics(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    found = list(expressions(dashboard))
    assert len(found) >= 5, f"{path.name} has suspiciously few queries"
    exported = known_series()
    for where, expr in found:
        names = metric_names(expr)  # raises ValueError when the expression does not parse
        assert names, f"{path.name} {where}: no metric in {expr!r}"
        unknown = names - exported
        assert not unknown, f"{path.name} {where}: {sorted(unknown)} not exported by UniCore"


def test_task_tree_dashboard_is_driven_by_the_root_variable() -> None:
    tree = json.loads(next(p for p in DASHBOARDS if json.loads(p.read_text())["uid"] == "unicore-task-tree")
                      .read_text())
    variables = {v["name"] for v in tree["templating"]["list"]}
    assert "root" in variables
    panel_exprs = [e for where, e in expressions(tree) if where.startswith("panel")]
    per_tree = [e for e in panel_exprs if "unicore_tree_" in e]
    assert len(per_tree) >= 5
    unfiltered = [e for e in per_tree if 'root="$root"' not in e]
    assert not unfiltered, f"per-tree panels not filtered by the root variable: {unfiltered}"


@pytest.mark.parametrize("bad", [
    "sum(rate(unicore_turns_started_total[5m])",  # unclosed parenthesis
    "rate(unicore_turns_started_total[5q])",  # bad duration unit
    "histogram_quantile(0.95 sum by (le) (x))",  # missing comma
    "sum by (le (rate(x[5m]))",  # broken grouping
    "unicore_tasks{phase=Idle}",  # unquoted label value
    "rate(unicore_tasks)",  # rate() needs a range vector
    "no_such_function(unicore_tasks)",
])
def test_the_parser_rejects_known_bad_expressions(bad: str) -> None:
    with pytest.raises(ValueError):
        promql_parser.parse(bad)


def test_names_outside_the_catalog_are_reported() -> None:
    assert metric_names('sum(rate(unicore_made_up_total{namespace=~"$namespace"}[$__rate_interval]))') == {
        "unicore_made_up_total"}
    assert "unicore_made_up_total" not in known_series()


def _sampled_names(exposition: str) -> set[str]:
    """Names that have at least one sample (a family with only its # HELP / # TYPE lines shows "No data")."""
    from prometheus_client.parser import text_string_to_metric_families

    return {sample.name for family in text_string_to_metric_families(exposition) for sample in family.samples}


def test_every_dashboard_metric_has_a_series_from_the_start(redis_url: str) -> None:
    """issue 11: metrics the dashboards use were missing from /metrics until their first event (a failed turn, a
    reap, a throttle...), so a fresh install showed "No data". The operator's start-up hook attaches the exporters to
    the registry /metrics serves; on an empty Redis, with no AgentTask yet, every metric a dashboard queries has a
    series (at 0, or a gauge's resting value), except those whose every series names a model or a task tree: no value
    of those labels is known before the first model call or the first tree. Tool calls are no such exception (issue
    24: the panel "tool calls by outcome" showed "No data" until the first tool call): every deployment's built-in
    tools are known before any call. Once one model has been called and one task exists, every metric of every
    dashboard has a series, although nothing failed, was reaped or throttled."""
    import asyncio
    from types import SimpleNamespace

    import redis
    from prometheus_client.parser import text_string_to_metric_families
    from unicore.store.telemetry import Telemetry
    from unicore.tools import call_metrics
    from unicore.tools.registry import ALL_TOOLS
    from unicore_operator import composition
    from unicore_operator.metrics import http as metrics_http
    from unicore_operator.metrics.catalog import CATALOG

    used = all_dashboard_metrics()
    spec_of = {series: spec for spec in CATALOG for series in spec.series_names}
    needs_a_value = {name for name in used if {"model", "provider", "root"} & set(spec_of[name].labels)}
    assert {spec_of[name].name for name in needs_a_value} == {
        "unicore_model_calls_total", "unicore_model_call_duration_seconds", "unicore_model_tokens_total",
        "unicore_throttle_events_total", "unicore_throttle_wait_seconds_total", "unicore_throttle_multiplier",
        "unicore_tree_tasks", "unicore_tree_tokens", "unicore_tree_turns", "unicore_tree_inbox_messages",
        "unicore_tree_active_jobs"}
    assert "unicore_tool_calls_total" in used  # the panel "tool calls by outcome": there before any tool call

    client = redis.Redis.from_url(redis_url)
    tasks: dict[tuple[str, str], list[dict[str, Any]]] = {}
    ctx = SimpleNamespace(redis=SimpleNamespace(sync=client), agenttasks=tasks,
                          settings=SimpleNamespace(namespaces=("team-a",)))
    try:
        asyncio.run(composition.start_metrics(ctx))  # type: ignore[arg-type]
        exposition = metrics_http.render().decode()
        fresh = _sampled_names(exposition)
        missing = sorted(set(used) - needs_a_value - fresh)
        assert not missing, f"dashboard metrics without a series on a fresh install: {missing}"
        tool_calls = {(s.labels["tool"], s.labels["source"], s.labels["server"], s.labels["outcome"]): s.value
                      for family in text_string_to_metric_families(exposition) for s in family.samples
                      if s.name == "unicore_tool_calls_total"}
        for name in ALL_TOOLS:  # every built-in tool and every outcome, at 0
            for outcome in call_metrics.OUTCOMES:
                assert tool_calls[(name, "builtin", "", outcome)] == 0

        # the first ordinary events: one task (a tree) and one successful model call (as the runtime records them)
        tasks[("team-a", "demo")] = [{"metadata": {"namespace": "team-a", "name": "demo"}, "status": {"phase": "Idle"}}]
        Telemetry(client).incr("model_calls_total", {"model": "m1", "provider": "bedrock", "outcome": "ok"})
        later = _sampled_names(metrics_http.render().decode())
        missing = sorted(set(used) - later)
        assert not missing, f"dashboard metrics still without a series: {missing}"
    finally:
        for collector in metrics_http._attached.values():  # leave the shared registry as other tests expect it
            metrics_http.REGISTRY.unregister(collector)
        metrics_http._attached.clear()
        client.close()
