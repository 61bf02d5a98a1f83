"""Every user error of the `unicore` CLI is one line on stderr and exit code 2, never a traceback, and writes
nothing: undecodable arguments, out-of-range numbers, and script files that are not UTF-8, use YAML aliases
(loops, "billion laughs"), nest too deep, are too large or are not regular files."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from unicore.store.tasks import TaskStore
from unicore_client.arguments import MAX_SCRIPT_BYTES
from unicore_client.local import main as cli

UNICORE = str(Path(sys.executable).with_name("unicore"))
LAUGHS = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
) + "tasks: {x: [{text: *a8}]}\n"


@pytest.fixture
def cli_env(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("UNICORE_HOME", str(tmp_path / "home"))
    return tmp_path


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exit_info:  # argparse errors exit from inside the parser
        code = int(exit_info.code or 0)
    return code, capsys.readouterr().err


def assert_usage_error(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--name", "bad-bytes", "caf\udce9"], "argument 4 is not valid UTF-8 text: b'caf\\xe9'"),
        (["run", "--name", "x\udcff", "hi"], "argument 3 is not valid UTF-8"),
        (["send", "bad-bytes", "\udcff"], "argument 3 is not valid UTF-8"),
        (["run", "--name", "bad-iter", "--max-iterations", "-5", "hi"], "must be from 1 to 10000, not -5"),
        (["run", "--name", "bad-iter", "--max-iterations", "0", "hi"], "must be from 1 to 10000, not 0"),
        (["run", "--name", "bad-iter", "--max-iterations", "100000", "hi"], "must be from 1 to 10000, not 100000"),
        (["run", "--name", "bad-iter", "--max-iterations", "many", "hi"], "not a whole number"),
        (["run", "--name", "bad-time", "--timeout", "nan", "hi"], "positive number of seconds"),
        (["send", "bad-time", "hi", "--timeout", "-1"], "positive number of seconds"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(
    cli_env: Path, store: TaskStore, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, err = run_cli(argv, capsys)
    assert_usage_error(code, err, needle)
    assert store.list_tasks() == []


# The ids are the needles: a test id carrying the 4 MiB script became PYTEST_CURRENT_TEST, and every process the
# test's set-up started (the session's redis-server, when this test came first in a worker) failed with E2BIG.
BAD_SCRIPTS = [
    (b"tasks:\n  x:\n    - text: caf\xe9\n", "is not UTF-8 text (bad byte at offset 27)"),
    (b"tasks: &loop {x: [{text: hi}], y: *loop}\n", "YAML aliases (*loop) are not allowed"),
    (LAUGHS.encode(), "YAML aliases (*a0) are not allowed"),
    (b"tasks: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested more than 64 levels deep"),
    (b"tasks: {x: [{text: 'unclosed}\n", "is not valid YAML/JSON"),
    (b"- just\n- a list\n", "a script is a mapping"),
    (b"tasks: {x: [{tool_use: [{name: a, input: {day: 2020-01-01}}]}]}\n", "not plain JSON"),
    (b"tasks: {x: [{txt: typo}]}\n", "invalid script: tasks.x.0.txt"),
    (b"#" * (MAX_SCRIPT_BYTES + 1), "is larger than 4 MiB"),
]


@pytest.mark.parametrize(("content", "needle"), BAD_SCRIPTS, ids=[needle for _, needle in BAD_SCRIPTS])
def test_bad_script_files_are_one_line_exit_2(
    cli_env: Path, store: TaskStore, capsys: pytest.CaptureFixture[str], content: bytes, needle: str
) -> None:
    script = cli_env / "script.yaml"
    script.write_bytes(content)
    for argv in (
        ["run", "--name", "scripted", "--script", str(script), "hi"],
        ["run", "--name", "scripted", "--model", f"scripted:{script}", "hi"],
    ):
        code, err = run_cli(argv, capsys)
        assert_usage_error(code, err, needle)
    assert store.list_tasks() == []


def test_a_directory_is_not_a_script(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["run", "--name", "d", "--script", str(cli_env), "hi"], capsys)
    assert_usage_error(code, err, "is not a regular file")


def _memory_cap() -> None:  # a regression must fail with MemoryError, not eat the machine's memory
    cap = 2 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def test_real_command_line_bytes_devices_and_fifos(redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home")}
    fifo = tmp_path / "script.fifo"
    os.mkfifo(fifo)
    for argv, needle in (
        ([UNICORE, "run", b"\xff\xfe"], "argument 2 is not valid UTF-8 text: b'\\xff\\xfe'"),
        ([UNICORE, "run", "--script", "/dev/zero", "hi"], "script /dev/zero is not a regular file"),
        ([UNICORE, "run", "--script", str(fifo), "hi"], f"script {fifo} is not a regular file"),
    ):
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False, preexec_fn=_memory_cap
        )
        assert_usage_error(done.returncode, done.stderr, needle)
        assert done.stdout == ""
