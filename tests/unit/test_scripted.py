"""The scripted model: script validation, deterministic steps, echo, sleep, usage."""

from __future__ import annotations

import json
import threading
import time

import pytest
from unicore.errors import ConfigError, TurnCancelled
from unicore.providers.base import ModelRequest
from unicore.providers.scripted import ScriptedModel, load_script, resolve_scripted

SCRIPT = {
    "default": "All done.",
    "tasks": {
        "demo": [
            {
                "tool_use": [
                    {"name": "spawn_task", "input": {"name": "a", "prompt": "Find A"}},
                    {"name": "spawn_task", "input": {"name": "b", "prompt": "Find B"}},
                ]
            },
            {"text": "Waiting."},
            {"echo": True},
        ],
        "demo-*": [{"sleep": 0.01, "text": "Child result."}],
    },
}


def request(task_id, messages, purpose="turn"):
    return ModelRequest(task_id=task_id, messages=messages, purpose=purpose)


def user(value):
    return {"role": "user", "content": [{"text": value}]}


def assistant(value):
    return {"role": "assistant", "content": [{"text": value}]}


def test_steps_follow_the_number_of_assistant_messages():
    model = ScriptedModel(load_script(SCRIPT))
    first = model.converse(request("demo", [user("go")]))
    assert first.stop_reason == "tool_use"
    calls = [b["toolUse"] for b in first.content if "toolUse" in b]
    assert [c["name"] for c in calls] == ["spawn_task", "spawn_task"]
    assert calls[0]["input"] == {"name": "a", "prompt": "Find A"}
    second = model.converse(request("demo", [user("go"), assistant("x"), user("r")]))
    assert second.content == [{"text": "Waiting."}] and second.stop_reason == "end_turn"
    past_the_end = model.converse(
        request(
            "demo",
            [user("1"), assistant("x"), user("2"), assistant("y"), user("3"), assistant("z"), user("4")],
        )
    )
    assert past_the_end.content == [{"text": "All done."}]


def test_tool_use_ids_are_deterministic_across_model_instances_and_unique_per_call():
    one = ScriptedModel(load_script(SCRIPT)).converse(request("demo", [user("go")]))
    two = ScriptedModel(load_script(SCRIPT)).converse(request("demo", [user("go")]))
    ids_one = [b["toolUse"]["toolUseId"] for b in one.content if "toolUse" in b]
    ids_two = [b["toolUse"]["toolUseId"] for b in two.content if "toolUse" in b]
    assert ids_one == ids_two and len(set(ids_one)) == 2


def test_echo_answers_with_the_latest_user_messages():
    model = ScriptedModel(load_script(SCRIPT))
    messages = [
        user("go"),
        assistant("a"),
        user("r"),
        assistant("b"),
        {"role": "user", "content": [{"text": "child one"}, {"text": "child two"}]},
    ]
    answer = model.converse(request("demo", messages))
    assert answer.content == [{"text": "child one\n\nchild two"}]


def test_glob_matches_the_task_name_and_unknown_tasks_get_the_default():
    model = ScriptedModel(load_script(SCRIPT))
    assert model.converse(request("ns/demo-x", [user("hi")])).content == [{"text": "Child result."}]
    assert model.converse(request("other", [user("hi")])).content == [{"text": "All done."}]


def test_sleep_is_interrupted_by_the_cancel_event():
    model = ScriptedModel(load_script({"tasks": {"t": [{"sleep": 30, "text": "late"}]}}))
    cancel = threading.Event()
    model.set_cancel_event(cancel)
    threading.Timer(0.05, cancel.set).start()
    began = time.monotonic()
    with pytest.raises(TurnCancelled):
        model.converse(request("t", [user("hi")]))
    assert time.monotonic() - began < 5


def test_usage_is_counted_in_words():
    answer = ScriptedModel(load_script({"tasks": {"t": [{"text": "three little words"}]}})).converse(
        request("t", [user("one two")])
    )
    assert answer.usage.output_tokens == 3
    assert answer.usage.input_tokens == 2
    assert answer.usage.total_tokens == 5


def test_summary_requests_do_not_consume_steps():
    model = ScriptedModel(load_script(SCRIPT))
    summary = model.converse(
        request("demo", [user("go"), assistant("Waiting."), user("summarize")], "summary")
    )
    assert "Waiting." in summary.content[0]["text"]


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"tasks": {"x": [{"txt": "typo"}]}}, "txt"),
        ({"tasks": {"x": [{}]}}, "at least one of"),
        ({"tasks": {"x": [{"tool_use": [{"input": {}}]}]}}, "name"),
        ({"tasks": {"x": [{"sleep": -1, "text": "a"}]}}, "sleep"),
        ({"tasks": {"x": [{"timeout": 5, "text": "a"}]}}, "needs a gate"),
        ({"tasks": {"x": [{"gate": "a:b", "text": "a"}]}}, "gate"),
        ({"tasks": {"x": [{"gate": "*", "text": "a"}]}}, "gate"),
        ({"tasks": {"x": [{"gate": "go", "timeout": 0}]}}, "timeout"),
        ({"tasks": ["not", "a", "mapping"]}, "tasks"),
    ],
)
def test_malformed_scripts_are_a_clear_config_error(bad, fragment):
    with pytest.raises(ConfigError) as info:
        load_script(bad)
    assert fragment in str(info.value)


def test_script_files_yaml_json_and_errors(tmp_path):
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text("default: hi\ntasks:\n  t:\n    - text: yo\n")
    assert load_script(yaml_file).tasks["t"][0].text == "yo"
    json_file = tmp_path / "s.json"
    json_file.write_text(json.dumps(SCRIPT))
    assert load_script(json_file).default == "All done."
    broken = tmp_path / "broken.yaml"
    broken.write_text("tasks: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_script(broken)
    with pytest.raises(ConfigError, match="cannot read script"):
        load_script(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_script(_write(tmp_path / "list.yaml", "- a\n- b\n"))


def _write(path, body):
    path.write_text(body)
    return path


def test_resolve_scripted_specs(tmp_path):
    assert isinstance(resolve_scripted("scripted", script=SCRIPT), ScriptedModel)
    path = _write(tmp_path / "s.yaml", "default: x\n")
    assert resolve_scripted(f"scripted:{path}").script.default == "x"
    with pytest.raises(ConfigError, match="unknown model"):
        resolve_scripted("gpt-17")
