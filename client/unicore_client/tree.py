"""Task trees from flat rows, each with an id and its parent's id: ``unicore tree``, the local web UI's forest,
``kubectl agenttask tree`` and the cluster web UI's forest are all assembled here; each keeps only how it shows them.

One ordering rule: siblings oldest first, roots oldest first (``newest_first`` turns roots around, for the web UI);
equal creation times go by name, then id, so the order never depends on the order the rows come in.

A row whose parent has no row (removed, or out of the reader's sight), whose parent is itself, or whose link to its
parent is not followed (``follow``) is an orphan: a root where the caller says so (the cluster views: a parent the
user cannot see), else in no tree (local mode: a task whose parent was removed). Either way ``Forest.nodes`` still
holds it, to be shown alone. A cycle of parent links has no root, so its rows are in no tree; ``walk`` from one of
them stops where it would come round again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class TreeRow(Generic[T]):
    """One task as a tree sees it: ``item`` is what its view shows."""

    id: str
    parent: str | None  # the parent's id; None or "": a root
    created: float  # seconds; orders siblings and roots
    item: T
    name: str = ""  # orders equal creation times before ``id`` does


@dataclass(eq=False)
class TreeNode(Generic[T]):
    row: TreeRow[T]
    children: list[TreeNode[T]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def item(self) -> T:
        return self.row.item


@dataclass(frozen=True)
class Forest(Generic[T]):
    roots: list[TreeNode[T]]  # oldest first
    nodes: dict[str, TreeNode[T]]  # every row's node by id, those in no tree included


def _oldest_first(node: TreeNode[T]) -> tuple[float, str, str]:
    return (node.row.created, node.row.name, node.row.id)


def _newest_first(node: TreeNode[T]) -> tuple[float, str, str]:
    return (-node.row.created, node.row.name, node.row.id)


def assemble(
    rows: Iterable[TreeRow[T]], *, orphans_are_roots: bool, follow: Callable[[str, str], bool] | None = None
) -> Forest[T]:
    """The forest of ``rows`` (of one id, the last row counts). ``follow(child_id, parent_id)``, when given, says
    whether a parent link is followed at all; a link it refuses makes the child an orphan."""
    nodes = {row.id: TreeNode(row) for row in rows}
    roots: list[TreeNode[T]] = []
    for node in nodes.values():
        parent_id = node.row.parent
        if not parent_id:
            roots.append(node)
            continue
        holder = nodes.get(parent_id)
        if holder is None or holder is node or (follow is not None and not follow(node.id, parent_id)):
            if orphans_are_roots:
                roots.append(node)
        else:
            holder.children.append(node)
    for node in nodes.values():
        node.children.sort(key=_oldest_first)
    roots.sort(key=_oldest_first)
    return Forest(roots, nodes)


def newest_first(roots: Iterable[TreeNode[T]]) -> list[TreeNode[T]]:
    """``roots`` newest first (equal creation times still by name, then id)."""
    return sorted(roots, key=_newest_first)


def walk(roots: Iterable[TreeNode[T]], *, max_nodes: int | None = None) -> list[tuple[int, TreeNode[T]]]:
    """(depth below its root, node), depth first from each root in turn, children in order; at most ``max_nodes``.
    A node met a second time (a cycle of parent links) is not walked again."""
    out: list[tuple[int, TreeNode[T]]] = []
    seen: set[str] = set()
    stack = [(0, root) for root in reversed(list(roots))]
    while stack and (max_nodes is None or len(out) < max_nodes):
        depth, node = stack.pop()
        if node.id in seen:
            continue
        seen.add(node.id)
        out.append((depth, node))
        stack.extend((depth + 1, child) for child in reversed(node.children))
    return out


__all__ = ["Forest", "TreeNode", "TreeRow", "assemble", "newest_first", "walk"]
