"""Terminal escape injection: model, user and tool text is shown with visible escapes, never raw controls."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from unicore.terminal import printable
from unicore_client.kubectl_plugin import main as plugin_cli
from unicore_client.kubectl_plugin.describe_view import render_describe
from unicore_client.kubectl_plugin.errors import PluginError
from unicore_client.kubectl_plugin.logs_view import TranscriptPrinter
from unicore_client.kubectl_plugin.tree_view import render_tree

NOW = datetime.datetime(2026, 11, 22, 10, 5, 0, tzinfo=datetime.UTC)
CSI_CLEAR = "\x1b[2J"  # erase the screen
OSC_TITLE = "\x1b]0;pwned\x07"  # set the window title
RLO = "\u202e"  # right-to-left override


def assert_no_controls(text: str) -> None:
    bad = [ch for ch in text if (ord(ch) < 0x20 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F]
    assert not bad and RLO not in text, f"raw control characters in {text!r}"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (CSI_CLEAR, "\\x1b[2J"),
        (OSC_TITLE, "\\x1b]0;pwned\\x07"),
        ("a\rb", "a\\x0db"),
        ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
        (f"{RLO}txt.exe", "\\u202etxt.exe"),
        ("\u2066iso\u2069", "\\u2066iso\\u2069"),
        ("bad \udcff byte", "bad \\udcff byte"),
        ("line one\nline\ttwo é 中", "line one\nline\ttwo é 中"),
    ],
)
def test_printable_escapes_controls_and_keeps_ordinary_text(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_one_line_mode_escapes_newlines_and_tabs_too() -> None:
    assert printable("a\nb\tc", multiline=False) == "a\\x0ab\\x09c"


def _task(name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-11-22T10:00:00Z"},
        "spec": {"prompt": f"do {CSI_CLEAR} it"},
        "status": {"turns": 1, "tokens": 10, **status},
    }


def test_plugin_tree_escapes_responses_and_error_messages() -> None:
    tasks = [
        _task("ok", phase="Idle", lastResponse=f"{CSI_CLEAR}all good"),
        _task("bad", phase="Failed", message=f"model error {OSC_TITLE}"),
        _task("odd", phase=f"Idle{RLO}"),
    ]
    text = render_tree(tasks, NOW, width=200)
    assert_no_controls(text)
    assert "\\x1b[2Jall good" in text and "model error \\x1b]0;pwned\\x07" in text and "Idle\\u202e" in text
    header, *rows = text.splitlines()
    column = header.index("LAST RESPONSE")  # cells were escaped before the layout: the columns still line up
    by_name = {row.split()[1]: row for row in rows}
    assert by_name["ok"].index("\\x1b[2Jall") == by_name["bad"].index("model error") == column


def test_plugin_logs_escape_messages_tool_calls_results_and_summaries() -> None:
    printer = TranscriptPrinter(tools=True)
    page = {
        "turns": [{"number": 0, "startedAt": 1795320000.0, "endedAt": 1795320003.0, "summary": f"sum{OSC_TITLE}"}],
        "messages": [
            {"seq": 0, "turn": 0, "role": "user", "content": [{"text": f"hi{CSI_CLEAR}"}]},
            {
                "seq": 1,
                "turn": 0,
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "t\x1b1", "name": f"x{RLO}", "input": {"p": CSI_CLEAR}}}],
            },
            {
                "seq": 2,
                "turn": 0,
                "role": "user",
                "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": f"out{OSC_TITLE}"}]}}],
            },
            {"seq": 3, "turn": 0, "role": "assistant", "content": [{"text": f"multi\nline{CSI_CLEAR}"}]},
        ],
    }
    text = printer.render(page) + printer.summary_line(0)
    assert_no_controls(text)
    for shown in ("hi\\x1b[2J", "x\\u202e", "(id t\\x1b1)", "out\\x1b]0;pwned\\x07", "multi\nline\\x1b[2J"):
        assert shown in text
    assert '{"p": "\\u001b[2J"}' in text  # tool input is JSON (escaped by json.dumps)
    assert "[turn 0 summary] sum\\x1b]0;pwned\\x07" in text


def test_plugin_describe_escapes_spec_status_and_events() -> None:
    obj = _task("t", phase="Failed", message=f"boom{OSC_TITLE}", lastResponse=f"{RLO}ok")
    events = [{"type": "Warning", "reason": "TurnFailed", "message": f"bad {CSI_CLEAR}", "count": 1}]
    text = render_describe(obj, [], events, NOW)
    assert_no_controls(text)
    assert "do \\x1b[2J it" in text and "boom\\x1b]0;pwned\\x07" in text and "bad \\x1b[2J" in text


def test_plugin_errors_are_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> Any:
        raise PluginError(f"server said {OSC_TITLE}\nsecond line")

    monkeypatch.setattr(plugin_cli, "connect", refuse)
    err = io.StringIO()
    assert plugin_cli.main(["tree"], out=io.StringIO(), err=err) == 1
    assert err.getvalue() == "error: server said \\x1b]0;pwned\\x07\\x0asecond line\n"
