"""Local mode end to end through the CLI, as subprocesses: the scripted demo tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from unicore.store.gates import open_gate
from unicore.store.tasks import TaskStore, connect

from tests.unicore_cli import UNICORE, unicore
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
DEMO_SCRIPT = REPO / "examples" / "demo-script.yaml"
CHILDREN = ["demo-a", "demo-b", "demo-c"]
GATE = "all-three-running"


def gated_demo_script(folder: Path) -> Path:
    """The demo's script whose three researchers' model call waits at a gate the test opens once all three are inside
    it at once (the demo's own script sleeps 1 s there)."""
    script = yaml.safe_load(DEMO_SCRIPT.read_text())
    for child in CHILDREN:
        (step,) = script["tasks"][child]
        assert step.pop("sleep") == 1.0
        step["gate"] = GATE
    path = folder / "demo-gated.yaml"
    path.write_text(yaml.safe_dump(script))
    return path


def test_demo_tree_runs_children_in_parallel_and_the_root_reports_what_they_said(cli_env, redis_url, tmp_path):
    script = gated_demo_script(tmp_path)
    command = [UNICORE, "run", "--model", f"scripted:{script}", "--name", "demo", "Research three facts about water."]
    proc = subprocess.Popen(command, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
    store = TaskStore(connect(redis_url))
    try:
        # the three researchers' turns run at once: each holds its lease, its prompt drained, inside its model call
        wait_for(lambda: all(store.lease_holder(c) and [m.role for m in store.messages(c)] == ["user"]
                             for c in CHILDREN), timeout=60, what="the three researchers' turns to run at once")
        for child in CHILDREN:
            open_gate(store.redis, child, GATE)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    run = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    assert run.returncode == 0, run.stderr
    for said in (
        "Researcher A: water boils at 100 C",
        "Researcher B: water freezes at 0 C",
        "Researcher C: water is densest at 4 C",
    ):
        assert said in run.stdout

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
