"""The plugin's command line and its pure views (logs, describe)."""

from __future__ import annotations

import datetime
import io
from pathlib import Path

import pytest
from unicore_client.kubectl_plugin import commands
from unicore_client.kubectl_plugin import main as cli
from unicore_client.kubectl_plugin.describe_view import render_describe
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.logs_view import TranscriptPrinter


def test_send_accepts_words_after_options_and_flags_anywhere() -> None:
    args = cli.parse(["-n", "team", "send", "demo", "--id", "m1", "hello", "world"])
    assert (args.namespace, args.name, args.id, args.text) == ("team", "demo", "m1", ["hello", "world"])
    args = cli.parse(["tree", "-A", "--no-utf8", "--context", "dev"])
    assert args.all_namespaces and args.no_utf8 and args.context == "dev"


def test_unknown_options_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["logs", "demo", "--bogus"])
    assert exit_info.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_message_text_sources(tmp_path: Path) -> None:
    file = tmp_path / "msg.txt"
    file.write_text("from a file\n")
    assert commands.read_text(cli.parse(["send", "demo", "-f", str(file)])) == "from a file\n"
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9\n".encode("latin-1"))
    huge = tmp_path / "huge.txt"
    huge.write_bytes(b"\xc3\xa9" * (commands.MAX_TEXT_BYTES // 2 + 1))  # a cut at the cap splits a character
    for argv, needle in (
        (["send", "demo", "-f", str(latin1)], "latin1.txt is not UTF-8 text"),
        (["send", "demo", "-f", str(huge)], "over the cap"),
        (["send", "demo", "caf\udce9"], "not valid UTF-8"),  # how Python hands over an undecodable argument
        (["send", "demo"], "nothing to send"),
        (["send", "demo", "-f", str(file), "x"], "not both"),
        (["send", "demo", "  "], "empty"),
        (["send", "demo", "-f", str(tmp_path / "no")], "cannot read"),
    ):
        with pytest.raises(PluginError, match=needle) as err:
            commands.read_text(cli.parse(argv))
        assert err.value.exit_code == 2


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    err = io.StringIO()
    code = cli.main(["--kubeconfig", str(tmp_path / "missing"), "tree"], out=io.StringIO(), err=err)
    assert code == 1 and err.getvalue().startswith(
        f"error: cannot load the kubeconfig {tmp_path / 'missing'}"
    )


def page(messages: list[dict], turns: list[dict], **extra: object) -> dict:
    return {"messages": messages, "turns": turns, **extra}


def test_transcript_printer_one_banner_per_turn_across_pages() -> None:
    printer = TranscriptPrinter(tools=False)  # pages as the task API serves them: turns numbered from 1
    turn1 = {"number": 1, "startedAt": 1795320000.0, "endedAt": 1795320003.0}  # 2026-11-22 04:00:00Z
    first = printer.render(
        page(
            [
                {"seq": 0, "turn": 1, "role": "user", "content": [{"text": "hello"}]},
                {
                    "seq": 1,
                    "turn": 1,
                    "role": "assistant",
                    "content": [{"toolUse": {"toolUseId": "t", "name": "spawn_task"}}],
                },
            ],
            [turn1],
        )
    )
    second = printer.render(
        page(
            [
                {
                    "seq": 2,
                    "turn": 1,
                    "role": "user",
                    "content": [{"toolResult": {"toolUseId": "t", "status": "success"}}],
                },
                {"seq": 3, "turn": 1, "role": "assistant", "content": [{"text": "done"}]},
                {"seq": 4, "turn": 2, "role": "user", "content": [{"text": "more?"}]},
            ],
            [turn1, {"number": 2, "startedAt": 1795320010.0, "endedAt": None}],
        )
    )
    assert first == (
        "=== turn 1 (started 2026-11-22 04:00:00Z, ended after 3s) ===\n\nUser: hello\n\n"
        "[Used spawn_task tool]\n"
    )
    assert second == (
        "Assistant: done\n\n\n=== turn 2 (started 2026-11-22 04:00:10Z, not ended) ===\n\nUser: more?\n"
    )
    assert printer.render(page([], [])) == ""


def test_describe_shows_spec_status_children_and_recent_events() -> None:
    now = datetime.datetime(2026, 11, 22, 10, 5, tzinfo=datetime.UTC)
    obj = {
        "metadata": {"name": "demo", "namespace": "ns", "creationTimestamp": "2026-11-22T10:00:00Z"},
        "spec": {"prompt": "Find\nfacts", "model": "scripted", "limits": {"maxChildren": 5}},
        "status": {
            "phase": "Idle",
            "turns": 2,
            "tokens": 30,
            "lastResponse": "All done",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Settled", "observedGeneration": 1}],
        },
    }
    child = {
        "metadata": {"name": "demo-a", "creationTimestamp": "2026-11-22T10:00:01Z"},
        "status": {"phase": "Idle", "turns": 1},
    }
    events = [
        {
            "type": "Normal",
            "reason": f"R{i}",
            "message": f"event {i}",
            "source": {"component": "op"},
            "lastTimestamp": f"2026-11-22T10:00:{i:02d}Z",
        }
        for i in range(25)
    ]
    text = render_describe(obj, [child], list(reversed(events)), now)
    assert "Prompt:             Find facts" in text and "Phase:              Idle" in text
    assert "Ready=True reason=Settled observedGeneration=1" in text
    assert "demo-a" in text and "turns=1" in text
    shown = [line.split()[1] for line in text.splitlines() if line.startswith("  Normal")]
    assert shown == [f"R{i}" for i in range(5, 25)]  # the 20 most recent, oldest first


def test_describe_shows_an_agent_tasks_agent_effective_model_and_mcp_servers() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    obj = {"metadata": {"name": "report", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"agentRef": {"name": "writer"}, "prompt": "Write",
                    "mcpServers": [{"name": "time", "tools": ["get_current_time"]}, {"name": "search"}]},
           "status": {"phase": "Idle", "model": "openai:qwen2.5-coder-1.5b"}}
    text = render_describe(obj, [], [], now)
    assert "Agent:              writer" in text and "Model:              openai:qwen2.5-coder-1.5b" in text
    assert "MCP Server:         time (get_current_time)" in text
    assert "MCP Server:         search (all its tools)" in text


def test_describe_shows_the_limits_and_the_scheduling_fields_as_the_spec_spells_them() -> None:
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    obj = {"metadata": {"name": "big", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"prompt": "Go", "systemPrompt": "Be  brief", "tools": ["read_file", "task_status"],
                    "limits": {"maxIterations": 5, "turnTimeoutSeconds": 60}, "gpus": 0, "queueName": "team-a",
                    "priorityClassName": "high", "suspend": True},
           "status": {"phase": "Suspended"}}
    lines = render_describe(obj, [], [], now).splitlines()
    assert '  Limits:             {"maxIterations": 5, "turnTimeoutSeconds": 60}' in lines
    assert "  Gpus:               0" in lines and "  QueueName:          team-a" in lines
    assert "  PriorityClassName:  high" in lines and not any("RuntimeClassName" in line for line in lines)
    assert "  System Prompt:      Be brief" in lines and "  Tools:              read_file, task_status" in lines
    assert "  Suspend:            True" in lines and "  Model:              scripted" in lines
    assert "Parent:             <none>" in lines and "  Agent:              <none>" in lines


def test_describe_says_what_started_a_task_with_the_origin_escaped() -> None:
    now = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
    obj = {"metadata": {"name": "alerts-1a2b", "namespace": "team-a"}, "spec": {"prompt": "go"},
           "status": {"phase": "Idle", "origin": {"kind": "AgentTrigger", "name": "alerts", "id": "evt\x1b[31m-1"}}}
    [line] = [line for line in render_describe(obj, [], [], now).splitlines() if "Started By" in line]
    assert "AgentTrigger alerts (id evt" in line and "\x1b" not in line
    plain = {"metadata": {"name": "by-hand", "namespace": "team-a"}, "spec": {"prompt": "go"}, "status": {}}
    assert "Started By" not in render_describe(plain, [], [], now)
