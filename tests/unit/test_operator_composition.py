"""The operator's composition root (issue 11): parts are attached by calls, nothing registers itself on import, and the
operator's modules import each other without a cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "unicore_operator"

IMPORT_ONLY = """
import unicore_operator.task_api, unicore_operator.task_api.server
import unicore_operator.metrics, unicore_operator.watchdog.adapter
from unicore_operator import http_server
from unicore_operator.handlers import lifecycle
assert http_server._installers == [], http_server._installers
assert lifecycle.startup_hooks == [], lifecycle.startup_hooks
from unicore_operator.composition import compose, metrics_routes, start_metrics
from unicore_operator.task_api.server import start_task_api
from unicore_operator.watchdog.adapter import start_watchdog
from unicore_operator.admission import start_webhook
from unicore_operator import redis_identities
from unicore_operator.handlers.warm_pools import start_agentless_pools
from unicore_operator.retention_daemon import start_retention
from unicore_operator.trigger_server import start_triggers
compose(); compose()
assert http_server._installers == [metrics_routes], http_server._installers
assert lifecycle.startup_hooks == [redis_identities.start, start_metrics, start_watchdog, start_task_api,
                                   start_retention, start_agentless_pools, start_triggers,
                                   start_webhook], \
    lifecycle.startup_hooks
"""


def test_importing_a_part_attaches_nothing_and_compose_attaches_each_part_once() -> None:
    result = subprocess.run([sys.executable, "-c", IMPORT_ONLY], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path, known: set[str]) -> set[str]:
    """The operator modules ``path`` imports at module level (imports inside functions run later: no cycle)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("unicore_operator"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("unicore_operator")}
    return {name for name in found if name in known}


def test_the_operator_modules_have_no_import_cycle() -> None:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: top_level_imports(path, set(paths)) for name, path in paths.items()}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in done:
            return
        for target in sorted(graph[node]):
            if target != node and not node.startswith(target + "."):  # a module importing its own package
                visit(target, [*stack, node], done)
        done.add(node)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [], done)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)
