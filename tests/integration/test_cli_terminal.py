"""`unicore run/show/tree` show model, user and tool text with visible escapes; `show --json` stays exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from unicore.store.tasks import TaskStore
from unicore_client.local import main as cli

CSI_CLEAR = "\x1b[2J"
OSC_TITLE = "\x1b]0;pwned\x07"
RLO = "\u202e"


@pytest.fixture
def cli_env(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    return tmp_path


def assert_no_controls(text: str) -> None:
    bad = [ch for ch in text if (ord(ch) < 0x20 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F]
    assert not bad and RLO not in text, f"raw control characters in {text!r}"


def test_run_show_and_tree_escape_controls_and_json_keeps_them(
    cli_env: Path, store: TaskStore, capsys: pytest.CaptureFixture[str]
) -> None:
    script = cli_env / "esc.json"
    tool_call = {"name": f"no{RLO}tool", "input": {"q": CSI_CLEAR}}
    steps = [{"echo": True, "tool_use": [tool_call]}, {"text": f"answer {OSC_TITLE}\nline {RLO}two"}]
    script.write_text(json.dumps({"tasks": {"esc": steps}}))
    prompt = f"hello {CSI_CLEAR}{OSC_TITLE} world\r"

    assert cli.main(["run", "--script", str(script), "--name", "esc", "--quiet", prompt]) == 0
    run_out = capsys.readouterr().out
    assert_no_controls(run_out)
    assert run_out == "answer \\x1b]0;pwned\\x07\nline \\u202etwo\n"  # the answer, escaped, lines kept

    store.redis.hset(store.keys("esc").task, "last_error", f"model error {OSC_TITLE}")
    assert cli.main(["show", "esc"]) == 0
    shown = capsys.readouterr().out
    assert_no_controls(shown)
    assert "User: hello \\x1b[2J\\x1b]0;pwned\\x07 world\\x0d" in shown
    assert "Assistant: hello \\x1b[2J" in shown  # the model's echo
    assert "[tool call no\\u202etool " in shown and '{"q": "\\u001b[2J"}' in shown  # tool name and input
    assert "Last error: model error \\x1b]0;pwned\\x07" in shown
    assert "(summary: Scripted turn:" in shown and "final: answer \\x1b]0;pwned\\x07" in shown

    assert cli.main(["tree", "esc"]) == 0
    tree = capsys.readouterr().out
    assert_no_controls(tree)
    assert "last: answer \\x1b]0;pwned\\x07" in tree

    assert cli.main(["show", "esc", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    first = data["turns"][0]["messages"][0]
    assert first["content"] == [{"text": prompt}]  # exact text in the JSON
    assert data["task"]["last_error"] == f"model error {OSC_TITLE}"
    uses = [b["toolUse"] for m in data["turns"][0]["messages"] for b in m["content"] if "toolUse" in b]
    assert uses[0]["name"] == f"no{RLO}tool" and uses[0]["input"] == {"q": CSI_CLEAR}
