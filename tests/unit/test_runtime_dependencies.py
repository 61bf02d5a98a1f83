"""Every module a distribution's package imports is installed by that distribution's own dependencies (and the
distributions it requires), not by the dev tools or a sibling: the agent image installs the core only
(Dockerfile.agent), the operator image the core and the operator (Dockerfile.operator). The chart's operator pod
crashed at start-up on the real node with ``No module named 'cryptography'`` (the task API's authentication imports
it; only the dev extras named it), while every test run from the venv passed."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# distribution folder -> its import package; the test cluster (hack/) is development only
PACKAGES = {"core": "unicore", "operator": "unicore_operator", "client": "unicore_client"}
OWN = {"unicore", "unicore_operator", "unicore_client", "unicore_devcluster"}


def imported_modules(folder: str) -> dict[str, str]:
    """Top-level module -> the first file importing it, over one package (imports inside functions too)."""
    found: dict[str, str] = {}
    for package in (ROOT / folder / PACKAGES[folder],):
        for path in sorted(package.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def requirement_extras(requirement: str) -> set[str]:
    match = re.match(r"[^\[;]*\[([^\]]*)\]", requirement)
    return {extra.strip().lower() for extra in match.group(1).split(",")} if match else set()


def wanted(requirement: str, extras: set[str]) -> bool:
    """A requirement of an installed distribution: unconditional, or under one of the extras asked of it."""
    marker = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
    return marker is None or marker.group(1).lower() in extras


def runtime_closure(folder: str) -> set[str]:
    """The distributions ``pip install`` of one of ours installs: its dependencies and theirs, with the extras that
    are asked for (``pyjwt[crypto]`` brings cryptography)."""
    direct = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [(requirement_name(r), requirement_extras(r)) for r in direct]
    seen: dict[str, set[str]] = {}
    while todo:
        name, extras = todo.pop()
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [(requirement_name(r), requirement_extras(r)) for r in requires if wanted(r, seen[name])]
    return set(seen)


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_every_imported_module_comes_with_the_distributions_own_dependencies(folder: str) -> None:
    providers = metadata.packages_distributions()
    closure = runtime_closure(folder)
    missing = {}
    for module, where in imported_modules(folder).items():
        if module in OWN or module in sys.stdlib_module_names or module == "__future__":
            continue
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & closure:
            missing[module] = (sorted(dists), where)
    assert not missing, f"imported, but not installed by {folder}/pyproject.toml's dependencies: {missing}"


def test_the_core_does_not_install_the_operators_dependencies() -> None:
    """The agent image installs the core only: kopf and prometheus-client are the operator's. (cryptography is not in
    this list: the MCP SDK requires pyjwt[crypto].)"""
    closure = runtime_closure("core")
    assert not {"kopf", "prometheus-client"} & closure
    assert {"redis", "pydantic", "mcp", "cryptography"} <= closure  # the walk follows extras: pyjwt[crypto]
