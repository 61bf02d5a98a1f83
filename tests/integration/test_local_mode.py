"""Local mode end to end through the CLI, as subprocesses: the scripted demo tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from unicore.store.tasks import TaskStore, connect

from tests.unicore_cli import unicore

REPO = Path(__file__).resolve().parents[2]
DEMO_SCRIPT = REPO / "examples" / "demo-script.yaml"
CHILDREN = ["demo-a", "demo-b", "demo-c"]


def test_demo_tree_runs_children_in_parallel_and_the_root_reports_what_they_said(cli_env, redis_url):
    run = unicore(
        "run",
        "--model",
        f"scripted:{DEMO_SCRIPT}",
        "--name",
        "demo",
        "Research three facts about water.",
        env=cli_env,
    )
    assert run.returncode == 0, run.stderr
    for said in (
        "Researcher A: water boils at 100 C",
        "Researcher B: water freezes at 0 C",
        "Researcher C: water is densest at 4 C",
    ):
        assert said in run.stdout

    store = TaskStore(connect(redis_url))
    assert sorted(store.children("demo")) == CHILDREN
    windows = {}
    for child in CHILDREN:
        (only_turn,) = store.load_history(child)
        windows[child] = (only_turn.started_at, only_turn.ended_at)
        assert only_turn.ended_at is not None
    latest_start = max(start for start, _ in windows.values())
    earliest_end = min(end for _, end in windows.values())
    assert latest_start < earliest_end, f"children did not overlap: {windows}"  # they ran in parallel
    root_turns = store.load_history("demo")
    assert len(root_turns) == 2  # spawn + wait, then one turn reading all three completions
    assert root_turns[1].started_at >= max(end for _, end in windows.values())
    assert [m.role for m in root_turns[1].messages] == ["user", "user", "user", "assistant"]
    assert all(
        store.get_task(t).status == "idle" and store.pending_count(t) == 0 for t in ["demo", *CHILDREN]
    )

    tree = unicore("tree", "demo", env=cli_env)
    assert tree.returncode == 0
    lines = tree.stdout.splitlines()
    assert lines[0].startswith("demo  [idle]  turns=2")
    for child in CHILDREN:
        assert any(line.strip().startswith(f"- {child}  [idle]  turns=1") for line in lines[1:])

    show = unicore("show", "demo", env=cli_env)
    assert show.returncode == 0
    assert "=== Turn 1 ===" in show.stdout and "=== Turn 2 ===" in show.stdout  # counted from 1, as users do
    assert "=== Turn 0 ===" not in show.stdout
    assert "[tool call spawn_task" in show.stdout and "Researcher B: water freezes" in show.stdout

    as_json = json.loads(unicore("show", "demo", "--json", env=cli_env).stdout)
    assert [t["turn_number"] for t in as_json["turns"]] == [0, 1]
    assert as_json["turns"][0]["messages"][0]["content"] == [{"text": "Research three facts about water."}]

    follow_up = unicore("send", "demo", "Thanks!", env=cli_env)
    assert follow_up.returncode == 0, follow_up.stderr
    assert follow_up.stdout.strip() == "Done."
    assert len(store.load_history("demo")) == 3


def test_embedded_redis_is_started_once_and_reused(tmp_path):
    home = tmp_path / "h"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {"UNICORE_HOME": str(home)}
    script = tmp_path / "s.yaml"
    script.write_text("tasks:\n  solo:\n    - echo: true\n")
    try:
        run = unicore("run", "--script", str(script), "--name", "solo", "--quiet", "echo me", env=env)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "echo me"
        assert (home / "redis" / "redis.sock").exists()
        tree = unicore("tree", env=env)
        assert tree.stdout.startswith("solo  [idle]  turns=1")
    finally:
        subprocess.run(
            [sys.executable, "-c", "from unicore.launch.embedded_redis import stop_embedded_redis as s; s()"],
            env=env,
            check=False,
            timeout=30,
        )
