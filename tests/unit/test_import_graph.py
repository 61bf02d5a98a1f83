"""The dependency rule between the deployables, and no import cycles (docs/architecture.md, "Layout").

- ``unicore`` (the core: all a turn pod installs) imports neither ``unicore_operator``, ``unicore_client`` nor
  ``unicore_devcluster``;
- ``unicore_operator`` and ``unicore_client`` do not import each other: the client talks to the operator over the
  Kubernetes API only, and what both need lives in the core (``unicore.api``);
- no product package imports ``unicore_devcluster`` (the test cluster is development only);
- no module imports itself through others: a cycle held together by an import inside a function is a cycle too.

Every ``.py`` file of the four packages is parsed with ``ast``; every ``import`` statement counts, wherever it is (in a
function, under ``if TYPE_CHECKING:``). ``from pkg import name`` imports the module ``pkg.name`` when there is one,
else ``pkg`` (its ``__init__``); a package's ``__init__`` that imports its submodules has those edges too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "unicore": REPO / "core" / "unicore",
    "unicore_operator": REPO / "operator" / "unicore_operator",
    "unicore_client": REPO / "client" / "unicore_client",
    "unicore_devcluster": REPO / "hack" / "unicore_devcluster",
}
FORBIDDEN = {  # importer's package -> packages it may not import, and why
    "unicore": {name: "the core is all a turn pod installs" for name in PACKAGES if name != "unicore"},
    "unicore_operator": {"unicore_client": "what both need belongs in unicore.api",
                         "unicore_devcluster": "the test cluster is development only"},
    "unicore_client": {"unicore_operator": "the client talks to the operator over the Kubernetes API only; what both "
                                           "need belongs in unicore.api",
                       "unicore_devcluster": "the test cluster is development only"},
}


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` at ``line`` of its file."""

    importer: str
    imported: str
    line: int


def module_name(package: str, root: Path, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def find_modules(packages: dict[str, Path]) -> dict[str, Path]:
    """Every module of ``packages`` by dotted name (a package by its own name: its ``__init__.py``)."""
    return {module_name(package, root, path): path
            for package, root in packages.items() for path in sorted(root.rglob("*.py"))}


def _absolute(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name ``from <level dots><module> import ...`` means in ``importer``."""
    if not level:
        return module or ""
    base = importer.split(".")
    base = base[: len(base) - level + (1 if is_package else 0)]
    return ".".join([*base, module] if module else base)


def _known(name: str, modules: set[str]) -> str | None:
    """``name`` or its longest prefix that is a module of the graph; None for a module from elsewhere."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def imports_of(importer: str, source: str, modules: set[str], *, is_package: bool = False) -> Iterator[Edge]:
    """The edges of every import statement of ``source`` to a module of ``modules``, wherever the statement is."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (target := _known(alias.name, modules)) is not None:
                    yield Edge(importer, target, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(importer, is_package, node.level, node.module)
            for alias in node.names:
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else _known(base, modules)
                if target is not None:
                    yield Edge(importer, target, node.lineno)


def import_graph(packages: dict[str, Path]) -> list[Edge]:
    """Every import edge among the modules of ``packages`` (one per statement and module imported; a package's
    ``__init__`` naming its own package is no edge)."""
    found = find_modules(packages)
    names = set(found)
    return sorted({edge for name, path in found.items()
                   for edge in imports_of(name, path.read_text(), names, is_package=path.name == "__init__.py")
                   if edge.imported != edge.importer},
                  key=lambda edge: (edge.importer, edge.line, edge.imported))


def strongly_connected(edges: list[Edge]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative: a deep import chain must not hit the recursion limit
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def one_cycle(component: list[str], edges: list[Edge]) -> list[Edge]:
    """A shortest cycle through the first module of ``component``, as the import statements that close it."""
    members = set(component)
    by_importer: dict[str, list[Edge]] = {}
    for edge in edges:
        if edge.importer in members and edge.imported in members:
            by_importer.setdefault(edge.importer, []).append(edge)
    start = component[0]
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in sorted(by_importer.get(node, []), key=lambda e: (e.imported, e.line)):
                if edge.imported == start:
                    return [*paths[node], edge]
                if edge.imported not in paths:
                    paths[edge.imported] = [*paths[node], edge]
                    following.append(edge.imported)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a strongly connected component always has one


def describe_cycle(component: list[str], edges: list[Edge], files: dict[str, Path]) -> str:
    steps = "\n".join(f"    {edge.importer} ({files[edge.importer].relative_to(REPO)}:{edge.line}) imports "
                      f"{edge.imported}" for edge in one_cycle(component, edges))
    return f"  cycle of {len(component)} module(s): {component}\n  for example:\n{steps}"


def forbidden_imports(edges: list[Edge]) -> list[str]:
    offenders = []
    for edge in edges:
        importer, imported = edge.importer.split(".")[0], edge.imported.split(".")[0]
        why = FORBIDDEN.get(importer, {}).get(imported)
        if why is not None:
            offenders.append(f"{edge.importer}:{edge.line} imports {edge.imported} ({importer} may not import "
                             f"{imported}: {why})")
    return offenders


def test_the_deployables_import_only_downwards() -> None:
    offenders = forbidden_imports(import_graph(PACKAGES))
    assert offenders == [], ("imports against the dependency rule (move the shared piece to the package both may "
                             "import, usually unicore.api):\n" + "\n".join(offenders))


def test_no_import_cycles() -> None:
    edges = import_graph(PACKAGES)
    files = find_modules(PACKAGES)
    cycles = [describe_cycle(component, edges, files) for component in strongly_connected(edges)]
    assert cycles == [], ("import cycles (an import inside a function counts; move what both sides need to a module "
                          "of its own):\n" + "\n".join(cycles))


def test_all_four_packages_are_parsed() -> None:
    modules = find_modules(PACKAGES)
    for package in PACKAGES:
        assert package in modules, f"{PACKAGES[package]} has no __init__.py: the check would see nothing of it"
    assert len(modules) > 200


PLANTED = {
    "pkg": "from pkg import a\n",
    "pkg.a": "import os\nfrom . import b\n",
    "pkg.b": "def later():\n    from pkg.c import helper\n",
    "pkg.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\nfrom .a import thing\n",
    "pkg.d": "import pkg.b.nothing\nfrom pkg import VALUE\nfrom other import x\n",
    "other": "from pkg.d import y\n",
}


def planted_edges() -> list[Edge]:
    modules = set(PLANTED)
    return [edge for name, source in PLANTED.items()
            for edge in imports_of(name, source, modules, is_package=name in ("pkg", "other"))]


def test_the_check_sees_every_kind_of_import() -> None:
    assert sorted((e.importer, e.imported, e.line) for e in planted_edges()) == [
        ("other", "pkg.d", 1),
        ("pkg", "pkg.a", 1),  # a package's __init__ importing its submodule
        ("pkg.a", "pkg.b", 2),  # relative
        ("pkg.b", "pkg.c", 2),  # inside a function
        ("pkg.c", "pkg.a", 3),  # under TYPE_CHECKING
        ("pkg.c", "pkg.a", 4),  # relative, a name of the module
        ("pkg.d", "other", 3),
        ("pkg.d", "pkg", 2),  # a name of the package, not a module: its __init__
        ("pkg.d", "pkg.b", 1),  # the longest prefix that is a module
    ]


def test_the_check_finds_the_cycles_and_says_how_they_close() -> None:
    edges = planted_edges()
    assert strongly_connected(edges) == [["other", "pkg.d"], ["pkg.a", "pkg.b", "pkg.c"]]
    assert [(e.importer, e.imported) for e in one_cycle(["pkg.a", "pkg.b", "pkg.c"], edges)] == [
        ("pkg.a", "pkg.b"), ("pkg.b", "pkg.c"), ("pkg.c", "pkg.a")]


def test_the_rule_names_each_forbidden_import() -> None:
    edges = [Edge("unicore.ui.manifest", "unicore_operator.crd_model", 7),
             Edge("unicore_client.ui.x", "unicore_operator.names", 3),
             Edge("unicore_operator.main", "unicore_devcluster.cluster", 9),
             Edge("unicore_devcluster.cluster", "unicore_operator.main", 2),
             Edge("unicore_client.local.main", "unicore.store.tasks", 5)]
    assert [line.split(" (")[0] for line in forbidden_imports(edges)] == [
        "unicore.ui.manifest:7 imports unicore_operator.crd_model",
        "unicore_client.ui.x:3 imports unicore_operator.names",
        "unicore_operator.main:9 imports unicore_devcluster.cluster",
    ]
