"""Workspace tools: happy paths, confinement (.., absolute, symlinks), size caps, clear errors."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from unicore.errors import ToolError
from unicore.tools import workspace
from unicore.tools.base import ToolContext
from unicore.tools.registry import ALL_TOOLS, run_tool_call


def ctx_for(ws: Path) -> ToolContext:
    return ToolContext(task_id="demo", store=None, spawner=None, workspace=ws)  # type: ignore[arg-type]


def call(ws: Path, name: str, tool_input: dict[str, Any]) -> tuple[str, str]:
    block = run_tool_call(
        ctx_for(ws), ALL_TOOLS.values(), {"toolUse": {"toolUseId": "t", "name": name, "input": tool_input}}
    )
    result = block["toolResult"]
    return result["status"], "\n".join(item["text"] for item in result["content"])


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def test_write_then_read_then_list(ws: Path) -> None:
    assert call(ws, "write_file", {"path": "notes/a.md", "content": "hello\nworld"}) == (
        "success",
        "wrote 11 bytes to notes/a.md",
    )
    assert (ws / "notes" / "a.md").read_text() == "hello\nworld"
    assert call(ws, "read_file", {"path": "notes/a.md"}) == ("success", "hello\nworld")
    assert call(ws, "write_file", {"path": "notes/a.md", "content": "!", "append": True})[0] == "success"
    assert (ws / "notes" / "a.md").read_text() == "hello\nworld!"
    status, listing = call(ws, "list_files", {})
    assert status == "success" and listing == "notes/"
    status, listing = call(ws, "list_files", {"recursive": True})
    assert listing.splitlines() == ["notes/", "notes/a.md (12 bytes)"]
    assert call(ws, "list_files", {"path": "notes"}) == ("success", "a.md (12 bytes)")


def test_overwrite_replaces_content_and_leaves_no_temp_files(ws: Path) -> None:
    call(ws, "write_file", {"path": "a.txt", "content": "long old content"})
    call(ws, "write_file", {"path": "a.txt", "content": "new"})
    assert (ws / "a.txt").read_text() == "new"
    assert sorted(os.listdir(ws)) == ["a.txt"]


def test_list_empty_and_missing_workspace(tmp_path: Path, ws: Path) -> None:
    assert call(ws, "list_files", {}) == ("success", "(no files in .)")
    assert call(tmp_path / "never-made", "list_files", {}) == ("success", "(the workspace is empty)")


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/etc/passwd", "/tmp/x"])
def test_escapes_are_refused(ws: Path, path: str) -> None:
    (ws.parent / "outside.txt").write_text("secret")
    for name, extra in (("read_file", {}), ("write_file", {"content": "x"}), ("list_files", {})):
        status, text = call(ws, name, {"path": path, **extra})
        assert status == "error", (name, path)
        assert "outside your workspace" in text or "absolute path" in text
    assert (ws.parent / "outside.txt").read_text() == "secret"


def test_symlink_escape_is_refused(ws: Path) -> None:
    outside = ws.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (ws / "link").symlink_to(outside)
    (ws / "file-link").symlink_to(outside / "secret.txt")
    (ws / "dangling").symlink_to(outside / "new.txt")
    for path in ("link/secret.txt", "file-link"):
        status, text = call(ws, "read_file", {"path": path})
        assert status == "error" and "outside your workspace" in text
    status, text = call(ws, "write_file", {"path": "dangling", "content": "pwned"})
    assert status == "error" and "outside your workspace" in text
    assert not (outside / "new.txt").exists()
    status, text = call(ws, "write_file", {"path": "link/secret.txt", "content": "pwned"})
    assert status == "error"
    assert (outside / "secret.txt").read_text() == "secret"
    status, _ = call(ws, "list_files", {"path": "link"})
    assert status == "error"


def test_symlink_inside_the_workspace_is_fine(ws: Path) -> None:
    (ws / "real.txt").write_text("ok")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    assert call(ws, "read_file", {"path": "alias.txt"}) == ("success", "ok")


def test_read_errors(ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "bin").write_bytes(b"\x00\x01\x02")
    assert "no such file" in call(ws, "read_file", {"path": "missing.txt"})[1]
    assert "is a directory" in call(ws, "read_file", {"path": "d"})[1]
    assert "binary file" in call(ws, "read_file", {"path": "bin"})[1]
    assert "required field is missing" in call(ws, "read_file", {})[1]
    assert "path is empty" in call(ws, "read_file", {"path": " "})[1]
    assert "is a file" in call(ws, "list_files", {"path": "bin"})[1]
    assert "no such folder" in call(ws, "list_files", {"path": "nope"})[1]
    assert "is a directory" in call(ws, "write_file", {"path": "d", "content": "x"})[1]


def test_long_file_is_read_in_pieces(ws: Path) -> None:
    (ws / "big.txt").write_text("a" * 100 + "b" * 50)
    status, text = call(ws, "read_file", {"path": "big.txt", "max_bytes": 100})
    assert status == "success"
    assert text.startswith("a" * 100 + "\n")
    assert "read again with offset=100" in text
    assert call(ws, "read_file", {"path": "big.txt", "offset": 100}) == ("success", "b" * 50)
    status, text = call(ws, "read_file", {"path": "big.txt", "max_bytes": workspace.MAX_READ_BYTES + 1})
    assert status == "error" and "max_bytes" in text


def test_write_size_cap(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "MAX_WRITE_BYTES", 10)
    status, text = call(ws, "write_file", {"path": "a.txt", "content": "x" * 11})
    assert status == "error" and "exceed the 10-byte cap" in text
    assert not (ws / "a.txt").exists()
    assert call(ws, "write_file", {"path": "a.txt", "content": "x" * 6})[0] == "success"
    status, text = call(ws, "write_file", {"path": "a.txt", "content": "x" * 6, "append": True})
    assert status == "error" and (ws / "a.txt").read_text() == "x" * 6


def test_listing_is_capped(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "MAX_LIST_ENTRIES", 3)
    for index in range(5):
        (ws / f"f{index}.txt").write_text("x")
    status, text = call(ws, "list_files", {})
    lines = text.splitlines()
    assert status == "success"
    assert lines[:3] == ["f0.txt (1 bytes)", "f1.txt (1 bytes)", "f2.txt (1 bytes)"]
    assert lines[3] == "[... 2 more entries not shown ...]"


# ---------------------------------------------------------------- special files (FIFOs, sockets): refused, never block

CALL_DEADLINE = 10.0  # seconds; a refusal takes milliseconds, the old code blocked forever in open()


def _unblock(fifo: Path) -> None:
    """Give a FIFO both ends for a moment, so a tool call stuck opening it returns (the test then fails cleanly)."""
    for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
        try:
            os.close(os.open(fifo, flags))
        except OSError:
            pass


def call_with_deadline(ws: Path, name: str, tool_input: dict[str, Any], special: Path) -> tuple[str, str]:
    """``call`` in a thread; fail (instead of hanging the suite) if it has not returned within the deadline."""
    outcome: list[tuple[str, str]] = []
    worker = threading.Thread(target=lambda: outcome.append(call(ws, name, tool_input)), daemon=True)
    worker.start()
    worker.join(CALL_DEADLINE)
    if worker.is_alive():
        _unblock(special)
        worker.join(CALL_DEADLINE)
        pytest.fail(f"{name} {tool_input} blocked for {CALL_DEADLINE}s on {special.name}")
    return outcome[0]


FIFO_CALLS = [
    ("read_file", {"path": "pipe"}),
    ("write_file", {"path": "pipe", "content": "x", "append": True}),
    ("write_file", {"path": "pipe", "content": "x"}),
    ("read_file", {"path": "pipe-link"}),
    ("write_file", {"path": "pipe-link", "content": "x", "append": True}),
]


@pytest.mark.parametrize(
    ("name", "tool_input"), FIFO_CALLS, ids=["read", "append", "replace", "read-via-symlink", "append-via-symlink"]
)
def test_fifo_is_refused_without_blocking(ws: Path, name: str, tool_input: dict[str, Any]) -> None:
    fifo = ws / "pipe"
    os.mkfifo(fifo)
    (ws / "pipe-link").symlink_to(fifo)
    status, text = call_with_deadline(ws, name, tool_input, fifo)
    assert status == "error", text
    assert "FIFO (named pipe), not a regular file" in text
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not replaced by a regular file either


def test_socket_is_refused(ws: Path) -> None:
    path = ws / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        server.listen(1)
        for name, extra in (("read_file", {}), ("write_file", {"content": "x", "append": True})):
            status, text = call_with_deadline(ws, name, {"path": "sock", **extra}, path)
            assert (status, "socket, not a regular file" in text) == ("error", True), text
    finally:
        server.close()


def test_listing_marks_special_files_and_refuses_them_as_folders(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    (ws / "notes.txt").write_text("hi")
    status, text = call_with_deadline(ws, "list_files", {}, ws / "pipe")
    assert status == "success"
    assert text.splitlines() == ["notes.txt (2 bytes)", "pipe (FIFO (named pipe), not a regular file)"]
    status, text = call_with_deadline(ws, "list_files", {"path": "pipe"}, ws / "pipe")
    assert status == "error" and "is a FIFO (named pipe), not a folder" in text


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY | os.O_APPEND], ids=["read", "append"])
def test_a_path_swapped_for_a_fifo_after_the_check_is_refused_at_open(ws: Path, flags: int) -> None:
    """The race: stat() saw a regular file, the path is a FIFO when it is opened. fstat on the fd decides."""
    fifo = ws / "pipe"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            os.close(workspace.open_regular(fifo, flags, "pipe")[0])
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(CALL_DEADLINE)
    if worker.is_alive():
        _unblock(fifo)
        pytest.fail(f"open_regular blocked on a FIFO (flags {flags:#o})")
    assert isinstance(outcome[0], ToolError) and "not a regular file" in str(outcome[0]), outcome


def test_parent_that_is_not_a_folder_is_a_clear_error(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    status, text = call(ws, "write_file", {"path": "pipe/a.txt", "content": "x"})
    assert status == "error" and "part of that path is not a folder" in text
