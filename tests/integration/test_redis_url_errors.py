"""A bad or unreachable ``REDIS_URL`` is one line on stderr for every ``unicore`` command, never a traceback: exit
code 2 for a URL no client can be built from (scheme, port, path, options), 1 for a server that cannot be reached
once the retry window (``UNICORE_REDIS_RETRY_SECONDS``) is over. The CLI as a subprocess (tests/unicore_cli.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.unicore_cli import unicore

COMMANDS = [
    ["run", "--name", "t", "hi"], ["send", "t", "hi"], ["show", "t"], ["tree"], ["gc", "--ttl", "60", "--dry-run"],
    ["agents", "list"], ["approve", "t"], ["deny", "t"], ["pending", "t"], ["suspend", "t"], ["resume", "t"],
    ["stop", "t"], ["ui", "--port", "0"],
]


def env_with(url: str, home: Path, retry_seconds: str = "0") -> dict[str, str]:
    return {**os.environ, "REDIS_URL": url, "UNICORE_HOME": str(home), "UNICORE_REDIS_RETRY_SECONDS": retry_seconds}


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(("url", "code"), [("bogus://x", 2), ("redis+cluster://127.0.0.1:1", 1)])
def test_every_command_says_one_line(tmp_path: Path, command: list[str], url: str, code: int) -> None:
    result = unicore(*command, env=env_with(url, tmp_path / "home"), timeout=60)
    line = one_line(result.stderr)
    assert result.returncode == code, result.stderr
    assert line.startswith("unicore: error: ")
    assert ("REDIS_URL" in line) if code == 2 else ("127.0.0.1:1" in line), line


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("bogus://x", "the scheme must be one of redis://, rediss://, unix://, redis+cluster://"),
        ("redis:/x", "the scheme must be one of"),
        ("localhost:6379", "the scheme must be one of"),
        ("REDIS://127.0.0.1:1", "the scheme must be one of"),
        ("redis://127.0.0.1:notaport", "Port could not be cast to integer value as 'notaport'"),
        ("redis://127.0.0.1:99999", "Port out of range"),
        ("redis://[::1", "Invalid IPv6 URL"),
        ("redis://127.0.0.1:1?foo=bar", "unknown option 'foo'"),
        ("redis://127.0.0.1:1?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
        ("rediss://127.0.0.1:1?ssl_cert_reqs=bogus", "Invalid SSL Certificate Requirements Flag: bogus"),
        ("unix://", "no socket path"),
        ("redis+cluster://127.0.0.1:1/3", "a Redis Cluster has only database 0"),
        ("rediss+cluster://", "no host"),
        ("redis+sentinel://127.0.0.1:1", "no master name"),
    ],
)
def test_a_bad_url_is_exit_2(tmp_path: Path, url: str, needle: str) -> None:
    result = unicore("tree", env=env_with(url, tmp_path / "home"), timeout=60)
    line = one_line(result.stderr)
    assert result.returncode == 2, result.stderr
    assert line.startswith("unicore: error: invalid REDIS_URL ") and needle in line, line
    assert not (tmp_path / "home" / "redis").exists()  # no embedded server was started instead


def test_a_bad_url_never_shows_its_password(tmp_path: Path) -> None:
    for url in ("redis://me:s3cret@127.0.0.1:notaport", "redis://127.0.0.1:1/?password=s3cret&foo=1",
                "bogus://:s3cret@x"):
        result = unicore("tree", env=env_with(url, tmp_path / "home"), timeout=60)
        assert result.returncode == 2, result.stderr
        assert "s3cret" not in result.stderr and "***" in one_line(result.stderr), result.stderr


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("redis://127.0.0.1:1", "Error 111 connecting to 127.0.0.1:1"),
        ("unix:///nonexistent/unicore.sock", "connecting to /nonexistent/unicore.sock"),
        ("redis+cluster://127.0.0.1:1", "Redis Cluster cannot be connected"),
        ("redis+sentinel://127.0.0.1:1/m", "No master found for 'm'"),
    ],
)
def test_an_unreachable_server_is_exit_1(tmp_path: Path, url: str, needle: str) -> None:
    result = unicore("tree", env=env_with(url, tmp_path / "home"), timeout=60)
    line = one_line(result.stderr)
    assert result.returncode == 1, result.stderr
    assert line.startswith("unicore: error: Redis: ") and needle in line, line


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1", "redis+cluster://127.0.0.1:1"])
def test_an_unreachable_server_is_retried_for_the_window_then_one_error_line(tmp_path: Path, url: str) -> None:
    began = time.monotonic()
    result = unicore("tree", env=env_with(url, tmp_path / "home", retry_seconds="2"), timeout=60)
    took = time.monotonic() - began
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    waiting, error = result.stderr.strip().splitlines()  # one progress line when it starts waiting, one error
    assert "Redis unavailable" in waiting and "retrying for up to 2 s" in waiting, waiting
    assert error.startswith("unicore: error: Redis: "), error
    assert took >= 2
