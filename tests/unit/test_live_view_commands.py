"""A ``run_command`` command as people see it (issue 28), pure: its live ``output`` entries in ``LiveText`` (``unicore
show --follow``, ``kubectl agenttask logs --follow``) and its stored result as lines (``result_lines``,
``unicore show``'s ``block_lines``/``message_text``)."""

from __future__ import annotations

from typing import Any

from unicore.commands.result import CommandResult, result_lines
from unicore_client.live_view import COMMAND_MARK, LiveText
from unicore_client.local.follow import block_lines, message_text


def entry(kind: str, seq: int = 5, attempt: int = 1, text: str = "") -> dict[str, Any]:
    return {"kind": kind, "seq": seq, "attempt": attempt, "text": text, "turn": 1, "call": 1_000_000}


def command_entries(seq: int = 5, command: str = "make test") -> list[dict[str, Any]]:
    return [entry("attempt", seq), entry("output", seq, text=f"$ {command}\n"), entry("output", seq, text="line one\n"),
            entry("output", seq, text="line two\n"), entry("end", seq)]


def render_all(live: LiveText, entries: list[dict[str, Any]], printed_next: int = 5) -> str:
    return "".join(live.render(e, printed_next) for e in entries)


def test_a_commands_output_is_marked_once_then_its_text_follows() -> None:
    live = LiveText()
    out = render_all(live, command_entries())
    body = f"{COMMAND_MARK}$ make test\nline one\nline two\n"
    assert COMMAND_MARK == "[run_command] "
    assert out.startswith(body) and out[len(body):].strip("\n") == "", repr(out)
    assert out.count(COMMAND_MARK) == 1 and "Assistant: " not in out
    assert not live.open  # its end closed the live text


def test_the_command_line_mark_goes_after_the_lead() -> None:
    out = render_all(LiveText(lead="\n"), command_entries()[:3])
    assert out == f"\n{COMMAND_MARK}$ make test\nline one\n"


def test_output_of_a_call_already_printed_from_the_transcript_is_skipped() -> None:
    live = LiveText()
    assert render_all(live, command_entries(seq=3), printed_next=5) == ""
    assert not live.open and 3 not in live.streamed


def test_control_characters_in_command_output_are_shown_escaped() -> None:
    live = LiveText()
    out = render_all(live, [entry("output", text="$ ls --color\n"), entry("output", text="\x1b[31mred\x1b[0m\x07\n"),
                            entry("output", text="\u202eevil\tcol\n")])
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert out == f"{COMMAND_MARK}$ ls --color\n\\x1b[31mred\\x1b[0m\\x07\n\\u202eevil\tcol\n"


def test_a_model_answer_at_another_seq_still_gets_its_assistant_prefix() -> None:
    live = LiveText()
    before = render_all(live, [entry("attempt", 3), entry("text", 3, text="I will run it."), entry("end", 3)],
                        printed_next=3)
    assert before == "Assistant: I will run it.\n"
    partial = render_all(live, [entry("output", 5, text="$ true\n"), entry("output", 5, text="no newline yet")])
    assert partial == f"{COMMAND_MARK}$ true\nno newline yet" and live.open
    after = render_all(live, [entry("text", 7, text="It worked.")], printed_next=7)
    assert after == "\nAssistant: It worked."  # the open command output is closed first


def test_the_stored_result_at_the_commands_seq_is_still_printed() -> None:
    live = LiveText()
    render_all(live, command_entries())
    result = {"seq": 5, "role": "user", "content": [{"toolResult": {
        "toolUseId": "t1", "status": "success", "content": [{"json": {
            "exit_code": 0, "duration_seconds": 0.01, "stdout": "line one\nline two\n", "stderr": ""}}]}}]}
    assert live.visible(result) == result


def test_result_lines_of_a_timed_out_run_with_a_truncated_stdout() -> None:
    body = CommandResult(exit_code=None, duration_seconds=30.0004, stdout="last\nlines\n", stderr="warn: slow\n",
                         stdout_bytes=20_000_000, stderr_bytes=11, timed_out=True, signal="SIGKILL").for_model()
    assert result_lines(body) == [
        "killed (SIGKILL), 30.0 s, timed out",
        "stdout (only the last 16 KiB of 20,000,000 bytes are shown):",
        "  | last",
        "  | lines",
        "stderr:",
        "  | warn: slow",
    ]


def test_result_lines_of_a_normal_and_a_cancelled_run() -> None:
    ok = CommandResult(exit_code=0, duration_seconds=0.0123, stdout="", stderr="", stdout_bytes=0,
                       stderr_bytes=0).for_model()
    assert result_lines(ok) == ["exit code 0, 0.012 s"]  # no empty stream headers
    failed = CommandResult(exit_code=2, duration_seconds=1.5, stdout="", stderr="no such file\n", stdout_bytes=0,
                           stderr_bytes=13).for_model()
    assert result_lines(failed) == ["exit code 2, 1.5 s", "stderr:", "  | no such file"]
    cancelled = CommandResult(exit_code=None, duration_seconds=4.0, stdout="x", stderr="", stdout_bytes=1,
                              stderr_bytes=0, cancelled=True, signal="SIGKILL").for_model()
    assert result_lines(cancelled) == ["killed (SIGKILL), 4.0 s, cancelled", "stdout:", "  | x"]


def test_result_lines_is_none_for_other_json() -> None:
    for other in (None, "exit code 0", 3, [1, 2], {"files": ["a.py"]}, {"exit_code": 0, "stdout": "x"},
                  {"exit_code": 0, "duration_seconds": 1.0, "stdout": "x"}):
        assert result_lines(other) is None, other


def test_unicore_show_prints_a_command_result_line_by_line_escaped() -> None:
    body = CommandResult(exit_code=0, duration_seconds=0.25, stdout="\x1b[31mred\nplain\n", stderr="",
                         stdout_bytes=16, stderr_bytes=0).for_model()
    block = {"toolResult": {"toolUseId": "call-1", "status": "success", "content": [{"json": body}]}}
    assert block_lines(block) == ["[tool result call-1 success] exit code 0, 0.25 s", "stdout:", "  | \x1b[31mred",
                                  "  | plain"]
    text = message_text({"role": "user", "content": [block]})
    assert text == ("User: [tool result call-1 success] exit code 0, 0.25 s\nUser: stdout:\n"
                    "User:   | \\x1b[31mred\nUser:   | plain\n")
    other = {"toolResult": {"toolUseId": "call-2", "status": "success", "content": [{"json": {"files": ["a"]}}]}}
    assert block_lines(other) == ['[tool result call-2 success] {"files": ["a"]}']
