"""The client's one tree builder (``unicore_client.tree``): its ordering rule, orphans, cycles and bounds."""

from __future__ import annotations

from itertools import permutations

from unicore_client.tree import Forest, TreeRow, assemble, newest_first


def row(task_id: str, parent: str | None, created: float, name: str = "") -> TreeRow[str]:
    return TreeRow(task_id, parent, created, item=f"item-{task_id}", name=name)


def shape(forest: Forest[str]) -> list[tuple[int, str]]:
    return [(depth, node.id) for depth, node in forest.walk(forest.roots)]


def test_siblings_and_roots_come_oldest_first_whatever_order_the_rows_come_in() -> None:
    rows = [row("r", None, 1), row("r-late", "r", 9), row("r-early", "r", 2), row("r-early-kid", "r-early", 3),
            row("s", None, 0.5)]
    expected = [(0, "s"), (0, "r"), (1, "r-early"), (2, "r-early-kid"), (1, "r-late")]
    for order in permutations(rows):
        assert shape(assemble(order, orphans_are_roots=False)) == expected
    assert assemble(rows, orphans_are_roots=False).rows["r-early-kid"].item == "item-r-early-kid"


def test_equal_creation_times_go_by_name_then_id() -> None:
    rows = [row("b/x", None, 5, name="x"), row("a/y", None, 5, name="y"), row("a/x", None, 5, name="x"),
            row("c/old", None, 1, name="old")]
    forest = assemble(reversed(rows), orphans_are_roots=False)
    assert [n.id for n in forest.roots] == ["c/old", "a/x", "b/x", "a/y"]
    assert [n.id for n in newest_first(forest.roots)] == ["a/x", "b/x", "a/y", "c/old"]


def test_orphans_are_roots_or_in_no_tree_as_the_caller_says_and_reachable_by_id_either_way() -> None:
    rows = [row("root", None, 1), row("lost", "gone", 2), row("lost-kid", "lost", 3), row("selfish", "selfish", 4)]
    kept = assemble(rows, orphans_are_roots=True)
    assert shape(kept) == [(0, "root"), (0, "lost"), (1, "lost-kid"), (0, "selfish")]
    dropped = assemble(rows, orphans_are_roots=False)
    assert shape(dropped) == [(0, "root")]
    assert [(d, n.id) for d, n in dropped.walk([dropped.rows["lost"]])] == [(0, "lost"), (1, "lost-kid")]
    assert dropped.walk([dropped.rows["selfish"]]) == [(0, dropped.rows["selfish"])]  # not its own child


def test_a_refused_link_makes_an_orphan() -> None:
    rows = [row("a/root", None, 1), row("a/kid", "a/root", 2), row("b/kid", "a/root", 3)]
    forest = assemble(rows, orphans_are_roots=False, follow=lambda child, parent: child[0] == parent[0])
    assert shape(forest) == [(0, "a/root"), (1, "a/kid")]
    assert "b/kid" in forest.rows


def test_a_cycle_of_parent_links_is_in_no_tree_and_walking_it_stops() -> None:
    rows = [row("root", None, 1), row("a", "b", 2), row("b", "c", 3), row("c", "a", 4), row("a-kid", "a", 5)]
    for orphans_are_roots in (True, False):
        forest = assemble(rows, orphans_are_roots=orphans_are_roots)
        assert shape(forest) == [(0, "root")]
    walked = forest.walk([forest.rows["a"]], max_nodes=10)  # bounded: a walk that loops fails, not hangs
    assert [(d, n.id) for d, n in walked] == [(0, "a"), (1, "c"), (2, "b"), (1, "a-kid")]  # b's child a: met again


def test_the_walk_stops_at_max_nodes() -> None:
    rows = [row("r", None, 1), row("r-a", "r", 2), row("r-b", "r", 3), row("s", None, 4)]
    forest = assemble(rows, orphans_are_roots=False)
    assert [n.id for _, n in forest.walk(forest.roots, max_nodes=2)] == ["r", "r-a"]
    assert [n.id for _, n in forest.walk(newest_first(forest.roots), max_nodes=3)] == ["s", "r", "r-a"]
