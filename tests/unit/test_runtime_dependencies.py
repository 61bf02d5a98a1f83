"""Every module the runtime and the operator import is installed by their own dependencies, not only by the dev
extras: the images install ``unicore`` without them (Dockerfile.agent, Dockerfile.operator). The chart's operator pod
crashed at start-up on the real node with ``No module named 'cryptography'`` (the task API's authentication imports
it; only the dev extras named it), while every test run from the venv passed."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "agent_image" / "unicore", ROOT / "operator" / "unicore_operator")
OWN = {"unicore", "unicore_operator"}


def imported_modules() -> dict[str, str]:
    """Top-level module -> the first file importing it, over both packages (imports inside functions too)."""
    found: dict[str, str] = {}
    for package in PACKAGES:
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


def runtime_closure() -> set[str]:
    """The distributions ``pip install unicore`` installs: its dependencies and theirs (no extras)."""
    direct = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    todo, seen = [requirement_name(r) for r in direct], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [requirement_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_every_imported_module_comes_with_the_runtime_dependencies() -> None:
    providers = metadata.packages_distributions()
    closure = runtime_closure()
    missing = {}
    for module, where in imported_modules().items():
        if module in OWN or module in sys.stdlib_module_names or module == "__future__":
            continue
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & closure:
            missing[module] = (sorted(dists), where)
    assert not missing, f"imported, but not installed by pyproject's dependencies (only dev extras?): {missing}"
