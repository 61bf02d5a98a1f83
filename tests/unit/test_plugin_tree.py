"""Golden output of `kubectl agenttask tree` (a pure function of the AgentTask list and the time).

Regenerate after an intended change: UNICORE_UPDATE_GOLDEN=1 pytest tests/unit/test_plugin_tree.py
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import pytest
from unicore_client.kubectl_plugin.humanize import human_count, human_duration, one_line
from unicore_client.kubectl_plugin.tree_view import build_forest, parent_name, render_tree

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NOW = datetime.datetime(2026, 11, 22, 10, 5, 0, tzinfo=datetime.UTC)


def task(
    name: str,
    parent: str | None = None,
    *,
    phase: str | None = "Idle",
    turns: int = 1,
    tokens: int = 100,
    created: str = "2026-11-22T10:00:00Z",
    ended: str | None = None,
    response: str = "",
    message: str = "",
    namespace: str = "default",
    owner_ref: bool = True,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "unicore.dev/v1alpha1",
        "kind": "AgentTask",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": created,
            "uid": f"uid-{name}",
        },
        "spec": {"prompt": "p"},
        "status": {"turns": turns, "tokens": tokens, "lastResponse": response, "message": message},
    }
    if phase:
        obj["status"]["phase"] = phase
    if parent:
        obj["spec"] = {"parentRef": {"name": parent}}
        if owner_ref:
            obj["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "unicore.dev/v1alpha1",
                    "kind": "AgentTask",
                    "name": parent,
                    "uid": f"uid-{parent}",
                    "controller": True,
                }
            ]
    if ended:
        obj["status"]["lastTurn"] = {"number": turns - 1, "endedAt": ended}
    return obj


def three_levels() -> list[dict[str, Any]]:
    """A root, three children, two grandchildren: every phase once; listed out of order on purpose."""
    return [
        task("demo-a-y", "demo-a", phase="Pending", turns=0, tokens=0, created="2026-11-22T10:00:11Z"),
        task(
            "demo-c",
            "demo",
            phase="Suspended",
            turns=1,
            tokens=50,
            created="2026-11-22T10:00:07Z",
            response="Paused halfway through the density table.",
        ),
        task(
            "demo",
            None,
            phase="Waiting",
            turns=2,
            tokens=15234,
            response="I asked three researchers;\nwaiting for their answers.",
        ),
        task(
            "demo-a",
            "demo",
            turns=1,
            tokens=1200,
            created="2026-11-22T10:00:05Z",
            ended="2026-11-22T10:00:35Z",
            response="Researcher A: water boils at 100 C at sea level.",
        ),
        task(
            "demo-b",
            "demo",
            phase="Running",
            turns=1,
            tokens=800,
            created="2026-11-22T10:00:06Z",
            owner_ref=False,
        ),  # parent known from spec.parentRef only
        task(
            "demo-a-x",
            "demo-a",
            phase="Failed",
            turns=0,
            tokens=0,
            created="2026-11-22T10:00:10Z",
            response="ignored",
            message="turn failed 4 times in a row; last: BackoffLimitExceeded",
        ),
    ]


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UNICORE_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with UNICORE_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_three_level_tree_utf8() -> None:
    check_golden("tree_utf8.txt", render_tree(three_levels(), NOW))


def test_three_level_tree_ascii() -> None:
    text = render_tree(three_levels(), NOW, utf8=False)
    assert text.isascii()
    check_golden("tree_ascii.txt", text)


def test_subtree_all_namespaces_and_width() -> None:
    tasks = three_levels() + [task("other", namespace="team-b", response="x" * 200)]
    check_golden(
        "tree_subtree_wide.txt",
        render_tree(tasks, NOW, root="demo-a", namespace="default", all_namespaces=True)
        + render_tree(tasks, NOW, all_namespaces=True, width=100),
    )


def test_lines_fit_the_terminal_width() -> None:
    for line in render_tree(three_levels(), NOW, width=90).splitlines():
        assert len(line) <= 90, line


def test_missing_root_and_empty_list() -> None:
    with pytest.raises(KeyError):
        render_tree(three_levels(), NOW, root="nope")
    assert render_tree([], NOW, namespace="team-a") == "No agenttasks found in namespace team-a.\n"


def test_forest_is_robust_to_orphans_and_self_parents() -> None:
    orphan = task("lost", "gone-parent")
    selfish = task("loop", "loop")
    roots = build_forest([orphan, selfish])
    assert sorted(node.name for node in roots) == ["loop", "lost"]
    assert parent_name(orphan) == "gone-parent"


def test_humanize() -> None:
    assert [
        human_duration(s)
        for s in (None, 5, 119, 125, 600, 3 * 3600 + 60, 20 * 3600, 3 * 86400 + 3600, 30 * 86400, 800 * 86400)
    ] == ["-", "5s", "119s", "2m5s", "10m", "3h1m", "20h", "3d1h", "30d", "2y70d"]
    assert [human_count(n) for n in (None, 999, 1000, 15234, 2_500_000)] == [
        "0",
        "999",
        "1k",
        "15.2k",
        "2.5M",
    ]
    assert one_line("a\n b   c", 10) == "a b c"
    assert one_line("abcdefghijkl", 6) == "abcde…" and one_line("abcdefghijkl", 6, utf8=False) == "abc..."


def test_a_tasks_command_jobs_are_listed_under_it_before_its_children() -> None:
    root = task("train", phase="WaitingForJobs")
    root["status"]["jobs"] = [
        {"name": "train-j1", "state": "Succeeded", "gpus": 1, "command": "python prep.py", "exitCode": 0},
        {"name": "train-j2", "state": "Queued", "gpus": 2, "command": "python train.py\x1b[31m"},
    ]
    text = render_tree([root, task("train-eval", "train")], NOW, utf8=False)
    lines = text.splitlines()
    assert lines[1].startswith(". train ") and "WaitingForJobs" in lines[1]
    assert lines[2].startswith("|-job train-j1 (1 GPU)") and "Succeeded" in lines[2]
    assert "exit 0: python prep.py" in lines[2]
    assert lines[3].startswith("|-job train-j2 (2 GPU)") and "Queued" in lines[3] and "\\x1b[31m" in lines[3]
    assert lines[4].startswith("`-") and "train-eval" in lines[4]


def test_a_root_started_by_a_schedule_trigger_or_a2a_caller_says_so() -> None:
    scheduled, triggered, called = task("nightly-29931239"), task("alerts-83832c3ab5b3"), task("a2a-1")
    scheduled["status"]["origin"] = {"kind": "AgentSchedule", "name": "nightly", "at": "2026-11-22T02:00:00Z"}
    triggered["status"]["origin"] = {"kind": "AgentTrigger", "name": "alerts\x1b[2J", "id": "e-1"}
    called["status"]["origin"] = {"kind": "A2A", "name": "advisor", "caller": "alice"}
    text = render_tree([scheduled, triggered, called, task("by-hand")], NOW, utf8=False)
    assert "nightly-29931239 [schedule nightly]" in text and "a2a-1 [a2a advisor]" in text
    assert "alerts-83832c3ab5b3 [trigger alerts" in text and "\x1b" not in text
    assert [line for line in text.splitlines() if "by-hand" in line][0].split()[1] == "by-hand"
