"""Task trees from flat rows, each with an id and its parent's id: ``unicore tree``, the local web UI's forest,
``kubectl agenttask tree`` and the cluster web UI's forest are all assembled here; each keeps only how it shows them.

One ordering rule: siblings oldest first, roots oldest first (``newest_first`` turns roots around, for the web UI);
equal creation times go by name, then id, so the order never depends on the order the rows come in.

A row whose parent has no row (removed, or out of the reader's sight), whose parent is itself, or whose link to its
parent is not followed (``follow``) is an orphan: a root where the caller says so (the cluster views: a parent the
user cannot see), else in no tree (local mode: a task whose parent was removed). Either way ``Forest.rows`` still
holds it, to be shown alone. A cycle of parent links has no root, so its rows are in no tree; ``Forest.walk`` from one
of them stops where it would come round again.

The forest is rows and lists of them, no object per task on top: the local web UI rebuilds it after every change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class TreeRow(NamedTuple, Generic[T]):
    """One task as a tree sees it: ``item`` is what its view shows."""

    id: str
    parent: str | None  # the parent's id; None or "": a root
    created: float  # seconds; orders siblings and roots
    item: T
    name: str = ""  # orders equal creation times before ``id`` does


_oldest_first = itemgetter(2, 4, 0)  # (created, name, id): the ordering rule


def _newest_first(row: TreeRow[T]) -> tuple[float, str, str]:
    return (-row.created, row.name, row.id)


@dataclass(frozen=True)
class Forest(Generic[T]):
    roots: list[TreeRow[T]]  # oldest first
    rows: dict[str, TreeRow[T]]  # every row by id, those in no tree included
    children: dict[str, list[TreeRow[T]]]  # by parent id, oldest first

    def children_of(self, row_id: str) -> list[TreeRow[T]]:
        return self.children.get(row_id, [])

    def walk(self, roots: Iterable[TreeRow[T]], *, max_nodes: int | None = None) -> list[tuple[int, TreeRow[T]]]:
        """(depth below its root, row), depth first from each root in turn, children oldest first; at most
        ``max_nodes``. A row met a second time (a cycle of parent links) is not walked again."""
        out: list[tuple[int, TreeRow[T]]] = []
        seen: set[str] = set()
        stack = [(0, root) for root in reversed(list(roots))]
        while stack and (max_nodes is None or len(out) < max_nodes):
            depth, row = stack.pop()
            if row.id in seen:
                continue
            seen.add(row.id)
            out.append((depth, row))
            stack.extend((depth + 1, child) for child in reversed(self.children.get(row.id, ())))
        return out


def assemble(
    rows: Iterable[TreeRow[T]], *, orphans_are_roots: bool, follow: Callable[[str, str], bool] | None = None
) -> Forest[T]:
    """The forest of ``rows`` (of one id, the last row counts). ``follow(child_id, parent_id)``, when given, says
    whether a parent link is followed at all; a link it refuses makes the child an orphan."""
    by_id = {row.id: row for row in rows}
    roots: list[TreeRow[T]] = []
    children: dict[str, list[TreeRow[T]]] = {}
    for row in by_id.values():
        parent_id = row.parent
        if not parent_id:
            roots.append(row)
        elif parent_id in by_id and parent_id != row.id and (follow is None or follow(row.id, parent_id)):
            children.setdefault(parent_id, []).append(row)
        elif orphans_are_roots:
            roots.append(row)
    for group in children.values():
        group.sort(key=_oldest_first)
    roots.sort(key=_oldest_first)
    return Forest(roots, by_id, children)


def newest_first(roots: Iterable[TreeRow[T]]) -> list[TreeRow[T]]:
    """``roots`` newest first (equal creation times still by name, then id)."""
    return sorted(roots, key=_newest_first)


__all__ = ["Forest", "TreeRow", "assemble", "newest_first"]
