"""A stdio MCP server's stderr through ``StderrPump`` (issue 24; docs/mcp.md), over a real pipe into a real file:
what the real-server test (tests/integration/test_mcp_hostile.py) cannot make a server do reliably: a line that
never ends, bytes that are no UTF-8, a carriage return."""

from __future__ import annotations

import os
from pathlib import Path

from unicore.tools.mcp_stderr import CAP_BYTES, LINE_CHARS, StderrPump

PREFIX = "MCP server s stderr: "


def pumped(tmp_path: Path, data: bytes) -> tuple[str, StderrPump]:
    out = tmp_path / "log"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        pump = StderrPump("s", fd)
        with os.fdopen(os.dup(pump.errlog.fileno()), "wb") as server:  # the server's copy of the write end
            server.write(data)
        pump.finish(timeout=30)
    finally:
        os.close(fd)
    return out.read_text(), pump


def test_a_line_that_never_ends_is_cut_and_the_rest_counted_not_held(tmp_path):
    text, pump = pumped(tmp_path, b"x" * 3_000_000)
    assert text.splitlines() == [PREFIX + "x" * LINE_CHARS + " [cut]",
                                 f"{PREFIX}... {3_000_000 - LINE_CHARS} bytes dropped (at most {CAP_BYTES} bytes of "
                                 f"stderr lines per server and turn, {LINE_CHARS} characters a line)"]
    assert pump.dropped == 3_000_000 - LINE_CHARS


def test_bytes_that_are_no_utf8_and_controls_are_shown_escaped_and_a_crlf_ends_a_line(tmp_path):
    text, pump = pumped(tmp_path, b"caf\xc3\xa9 \xff\x9b[2J\r\n\ttab\n")
    assert text == PREFIX + "caf\u00e9 \\udcff\\udc9b[2J\n" + PREFIX + "\\x09tab\n"
    assert pump.dropped == 0


def test_the_cap_counts_the_lines_written_prefixes_included(tmp_path):
    line = b"y" * 99 + b"\n"
    shown = len(PREFIX) + 100
    fit = CAP_BYTES // shown
    text, pump = pumped(tmp_path, line * (fit + 5))
    lines = text.splitlines(keepends=True)
    assert lines[:-1] == [PREFIX + "y" * 99 + "\n"] * fit
    assert pump.written == fit * shown <= CAP_BYTES < (fit + 1) * shown
    assert lines[-1].startswith(f"{PREFIX}... {5 * len(line)} bytes dropped")


def test_nothing_dropped_no_last_line(tmp_path):
    text, _pump = pumped(tmp_path, b"hello\n")
    assert text == PREFIX + "hello\n"
