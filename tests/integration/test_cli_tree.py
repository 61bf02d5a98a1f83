"""`unicore tree`: roots and children oldest first, a task whose parent was removed only when asked for by name, and a
cycle of parent links (written straight into Redis) neither listed nor walked for ever."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from unicore.api.schema import TaskSpec
from unicore.store.tasks import TaskStore
from unicore_client.local import main as cli


@pytest.fixture
def cli_env(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    return tmp_path


def tree(capsys: pytest.CaptureFixture[str], *task: str) -> list[str]:
    assert cli.main(["tree", *task]) == 0
    return [line.split("  [")[0] for line in capsys.readouterr().out.splitlines()]


def test_tree_lists_oldest_first_leaves_out_orphans_and_stops_at_cycles(
    cli_env: Path, store: TaskStore, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    for task_id, parent in [("zeta", None), ("zeta-late", None), ("zeta-b", "zeta"),
                            ("zeta-a", "zeta"), ("zeta-b-kid", "zeta-b"), ("alpha", None), ("gone", None),
                            ("lost", "gone"), ("lost-kid", "lost"), ("loop-a", None), ("loop-b", "loop-a")]:
        store.create_task(TaskSpec(id=task_id, parent=parent, prompt="p"))
    store.delete_task("gone")
    redis_client.hset(store.keys("loop-a").task, "parent", "loop-b")  # loop-a <-> loop-b: no root

    assert tree(capsys) == ["zeta", "  - zeta-b", "    - zeta-b-kid", "  - zeta-a", "zeta-late", "alpha"]
    assert tree(capsys, "zeta-b") == ["zeta-b", "  - zeta-b-kid"]
    assert tree(capsys, "lost") == ["lost", "  - lost-kid"]
    assert tree(capsys, "loop-a") == ["loop-a", "  - loop-b"]


def test_tree_of_a_missing_task_fails_and_an_empty_store_says_so(
    cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tree(capsys) == ["no tasks"]
    assert cli.main(["tree", "nope"]) == 1
    assert "no task 'nope'" in capsys.readouterr().err
