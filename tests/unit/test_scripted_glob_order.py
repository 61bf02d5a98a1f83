"""Which script entry a task uses: the most specific matching glob, never the order of the keys (issue 10, item 17).

The Kubernetes API server does not keep the order of an object's keys (it hands a spec back with its map keys
sorted), so an order-based rule let a ``"*"`` entry shadow ``"*-a"`` and a tree spawned children forever.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from unicore.api.spec import parse_spec, to_task_spec
from unicore.providers.base import ModelRequest
from unicore.providers.registry import resolve_model
from unicore.providers.scripted import ScriptedModel, load_script, pick_pattern, specificity

KEYS = ["*", "*-a", "demo-*", "demo-a", "d?mo-a", "demo-[ab]", "ns/*"]
EXPECTED = {
    "demo-a": "demo-a",  # an exact name beats every glob
    "ns/demo-a": "demo-a",  # ... also when the task id carries a namespace
    "demo-b": "demo-[ab]",  # 5 literal characters each; a one-character set beats a '*'
    "demo-c": "demo-*",
    "dimo-a": "d?mo-a",  # 5 literal characters beat the 2 of "*-a"
    "x-a": "*-a",
    "ns/x-b": "ns/*",  # the full id matches with 3 literal characters, "*" with none
    "other": "*",
}


def _orders() -> list[list[str]]:
    shuffled = []
    for seed in range(20):
        keys = list(KEYS)
        random.Random(seed).shuffle(keys)
        shuffled.append(keys)
    return [list(KEYS), list(reversed(KEYS)), sorted(KEYS), sorted(KEYS, reverse=True), *shuffled]


def _script(keys: list[str]) -> dict[str, Any]:
    return {"tasks": {key: [{"text": f"from {key}"}] for key in keys}}


def _answer(model: Any, task_id: str) -> Any:
    request = ModelRequest(task_id=task_id, messages=[{"role": "user", "content": [{"text": "go"}]}])
    return model.converse(request).content


@pytest.mark.parametrize("keys", _orders(), ids=lambda keys: ",".join(keys))
def test_the_same_entry_is_chosen_whatever_the_key_order(keys: list[str]) -> None:
    model = ScriptedModel(load_script(_script(keys)))
    chosen = {task: _answer(model, task)[0]["text"].removeprefix("from ") for task in EXPECTED}
    assert chosen == EXPECTED


def test_every_permutation_of_competing_globs_picks_the_same_entry() -> None:
    keys = ["*", "*-a", "demo-*", "?emo-a", "demo-?"]
    picks = {pick_pattern(order, "demo-a") for order in itertools.permutations(keys)}
    assert picks == {"?emo-a"}  # 5 literal characters and no "*" each, like "demo-?": lexical order decides


def test_specificity_is_a_total_order_with_the_documented_ranks() -> None:
    ranked = sorted(["*", "a*", "ab", "a?", "a[xy]", "[ab]b", "a*b*", "?b", "a[", "*a*"], key=specificity)
    assert ranked == ["a[", "ab", "a*b*", "?b", "[ab]b", "a?", "a[xy]", "a*", "*a*", "*"]
    assert pick_pattern(["x", "y"], "z") is None
    assert pick_pattern([], "z") is None


RUNAWAY: dict[str, Any] = {  # the runaway tree: every task spawns a child "a"; a child "...-a" must answer instead
    "default": "Done.",
    "tasks": {
        "*-a": [{"text": "leaf answer"}],
        "*": [{"tool_use": [{"name": "spawn_task", "input": {"name": "a", "prompt": "go deeper"}}]}],
    },
}


def _runaway_in(order: list[str]) -> dict[str, Any]:
    return {"default": RUNAWAY["default"], "tasks": {key: RUNAWAY["tasks"][key] for key in order}}


@pytest.mark.parametrize("order", [["*-a", "*"], ["*", "*-a"]], ids=["star-last", "star-first"])
def test_the_runaway_example_stops_at_the_child(order: list[str]) -> None:
    model = ScriptedModel(load_script(_runaway_in(order)))
    assert [block["toolUse"]["name"] for block in _answer(model, "demo")] == ["spawn_task"]
    assert _answer(model, "demo-a") == [{"text": "leaf answer"}]
    assert _answer(model, "team/demo-a") == [{"text": "leaf answer"}]


def test_local_and_cluster_mode_choose_the_same_entry(tmp_path: Path) -> None:
    """Local: a script file read by ``resolve_model("scripted:PATH")``. Cluster: the AgentTask spec as the API
    server returns it (keys sorted, "*" first), through the operator's TaskSpec and ``resolve_model("scripted")``."""
    script_file = tmp_path / "script.yaml"
    script_file.write_text(yaml.safe_dump(_runaway_in(["*-a", "*"]), sort_keys=False))
    local = resolve_model(f"scripted:{script_file}")

    from_api_server = json.loads(json.dumps({"prompt": "go", "model": "scripted", "script": RUNAWAY}, sort_keys=True))
    assert list(from_api_server["script"]["tasks"]) == ["*", "*-a"]
    spec = to_task_spec("team", "demo-a", parse_spec(from_api_server), None)
    cluster = resolve_model(spec.model, script=spec.script)

    for task_id in ("demo", "demo-a", "team/demo", "team/demo-a", "team/demo-a-a"):
        assert _answer(local, task_id) == _answer(cluster, task_id), task_id
    assert _answer(cluster, "team/demo-a") == [{"text": "leaf answer"}]
