"""A hostile stdio MCP server (tests/hostile_mcp_server.py, made with the mcp SDK) against the real ``unicore`` CLI
and a real redis-server (issue 24): tool names that sanitise alike keep their offered names whatever order the
server lists them in, an approval runs only the tool it was given for, and the server's stderr reaches the turn's
log escaped and bounded (docs/mcp.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from unicore.launch.local import turn_log_name
from unicore.store.tasks import TaskStore, connect
from unicore.tools.mcp_toolbox import offered_names

from tests import hostile_mcp_server as hostile
from tests.integration.test_mcp_local import calls, results, script
from tests.mcp_servers import document, write_documents
from tests.unicore_cli import unicore
from tests.waiting import wait_for

STDERR_CAP_BYTES = 65_536  # docs/mcp.md: a stdio server's stderr in the turn's log, per server and turn
STDERR_LINE_CHARS = 1_000


@pytest.fixture
def store(redis_url: str) -> TaskStore:
    return TaskStore(connect(redis_url))


def order(tmp_path: Path, *names: str) -> Path:
    path = tmp_path / "order"
    path.write_text("\n".join(names) + "\n")
    return path


def approve_after_listing(cli_env: dict[str, str], store: TaskStore, tmp_path: Path, task: str, first: list[str],
                          then: list[str]) -> tuple[str, tuple[str, str]]:
    """Turn 1: the server lists ``first`` and the model calls the offered name of ``files.read`` (gated); the server
    then lists ``then`` and the call is approved. The offered name called and its result (status, text)."""
    listing = order(tmp_path, *first)
    servers = write_documents(tmp_path / "servers.yaml", [document("fs", hostile.spec(listing))])
    called = {tool: name for name, tool in offered_names("fs", first).items()}["files.read"]
    steps = [calls((called, {"path": "a.txt"})), {"echo_results": True}]
    run = unicore("run", "--name", task, "--no-summary", "--script", script(tmp_path, task, steps),
                  "--mcp-server", str(servers), "--require-approval", "*", "read a.txt", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert f"unicore approve {task}" in run.stdout
    assert called not in results(store, task)  # waiting: nothing ran
    order(tmp_path, *then)  # the next turn's server lists these
    approve = unicore("approve", task, env=cli_env)
    assert approve.returncode == 0, approve.stderr
    return called, results(store, task)[called]


def test_an_approved_call_runs_the_tool_it_was_approved_for_when_the_server_lists_its_tools_in_another_order(
        cli_env, store, tmp_path):
    called, (status, text) = approve_after_listing(cli_env, store, tmp_path, "swap", ["files.read", "files/read"],
                                                   ["files/read", "files.read"])
    assert (status, text) == ("success", "files.read read a.txt"), called


def test_an_approved_call_whose_name_now_names_another_tool_is_not_run(cli_env, store, tmp_path):
    """Turn 1 lists files.read alone (offered as fs__files_read); by the approval the server also lists files_read,
    a valid name that keeps fs__files_read: the approved name now names another tool, and nothing runs."""
    called, (status, text) = approve_after_listing(cli_env, store, tmp_path, "rebound", ["files.read"],
                                                   ["files_read", "files.read"])
    assert called == "fs__files_read"
    assert status == "error", text
    assert "files_read read" not in text and "files.read read" not in text
    assert text == ("Error: the approved call was not run: fs__files_read now names MCP tool 'files_read' of server "
                    "'fs', not MCP tool 'files.read' of server 'fs' that was approved")


def test_a_stdio_servers_stderr_reaches_the_turns_log_escaped_cut_and_bounded(cli_env, store, tmp_path):
    lines = 4000  # far past the cap
    servers = write_documents(tmp_path / "servers.yaml",
                              [document("noisy", hostile.spec(order(tmp_path, "files.read"), flood_lines=lines))])
    steps = [calls(("noisy__files_read", {"path": "a.txt"})), {"text": "done"}]
    run = unicore("run", "--name", "noisy", "--no-summary", "--script", script(tmp_path, "noisy", steps),
                  "--mcp-server", str(servers), "read a.txt", env=cli_env)
    assert run.returncode == 0, run.stderr
    assert results(store, "noisy")["noisy__files_read"] == ("success", "files.read read a.txt")

    prefix = "MCP server noisy stderr: "
    log = Path(cli_env["UNICORE_HOME"]) / "logs" / turn_log_name("noisy")
    wait_for(lambda: " bytes dropped" in log.read_text(), timeout=30, what="the stderr's last line in the log")
    raw = log.read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw  # no terminal control character reaches the log
    *kept, last = [line for line in raw.decode().splitlines(keepends=True) if line.startswith(prefix)]
    assert kept[0] == prefix + "L" * STDERR_LINE_CHARS + " [cut]\n"  # a long line is cut

    def shown(number: int) -> str:
        return prefix + f"\\x1b[2J\\x1b]0;pwned\\x07\\x1b[31mflood {number:05d}\\x1b[0m" + "\n"

    assert kept[1:] == [shown(number) for number in range(len(kept) - 1)]  # in order, none lost before the cap
    size = sum(len(line.encode()) for line in kept)
    assert size <= STDERR_CAP_BYTES < size + len(shown(len(kept) - 1).encode())  # filled up to the cap exactly
    written = len(hostile.flood_text(lines).encode())
    shown_raw = STDERR_LINE_CHARS + 1 + (len(kept) - 1) * len(hostile.flood_line(0).encode())
    assert last.startswith(f"{prefix}... {written - shown_raw} bytes dropped"), last
