"""The embedded default: when REDIS_URL is unset, a private redis-server on a unix socket in a data directory.

``${UNICORE_HOME:-~/.unicore}/redis`` holds the socket, the append-only file, the log and:

- ``start.lock``: held (flock) by the one command that checks and starts the server, so two commands starting at
  once start one server;
- ``owner.lock``: held (flock) by the server itself for as long as it runs (the starting command locks it and hands
  the open file to redis-server, which keeps it, daemonized or not; the kernel lets go when the process ends, even
  on SIGKILL). It is what says a live server owns the directory, whatever its pid file says (a pid can be reused);
- ``redis.pid``: the server's pid (redis-server writes it), named in messages.

A server that answers PING is reused, so ``unicore send/show/tree`` after ``unicore run`` see the same data. A live
server that does not answer (loading a large AOF, a busy machine, stopped) is never replaced and its socket is never
deleted: the command waits for it, up to ``START_TIMEOUT_SECONDS`` (then one line, and the server is left as it
is). Only when no live server owns the directory is a stale socket removed and a new server started.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from contextlib import AbstractContextManager
from pathlib import Path

import redis

from unicore.errors import ConfigError
from unicore.launch.file_lock import exclusive
from unicore.log import get_logger
from unicore.settings import RuntimeSettings
from unicore.store.client import check_url

log = get_logger("launch.redis")

START_TIMEOUT_SECONDS = 60.0  # how long a command waits for the embedded server to answer (docs: README)
_POLL_SECONDS = 0.1


def unicore_home() -> Path:
    """``$UNICORE_HOME`` (default ``~/.unicore``), read now."""
    return RuntimeSettings.from_env(only={"home"}).home


def data_dir() -> Path:
    return unicore_home() / "redis"


def _answers(url: str) -> bool:
    """Whether a server answers PING on ``url`` (one loading its data answers LOADING: not yet)."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2).ping())
    except (redis.RedisError, OSError):
        return False


def _locked(path: Path, deadline: float) -> AbstractContextManager[None]:
    """Hold an exclusive flock on ``path``; ConfigError if another process holds it past ``deadline``."""
    return exclusive(path, deadline, "starting the embedded redis-server", _POLL_SECONDS)


def _owner_lock(where: Path) -> int | None:
    """An open descriptor of ``owner.lock``, locked, when no live server owns ``where``; None when one does."""
    fd = os.open(where / "owner.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _pid(where: Path) -> str:
    try:
        return (where / "redis.pid").read_text().strip() or "?"
    except OSError:
        return "?"


def _start(where: Path, socket_path: Path, owner: int) -> None:
    """Start a daemonized redis-server in ``where`` that keeps ``owner`` (the locked owner.lock) open."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ConfigError("redis-server is not on PATH: install it (hack/bootstrap.sh does) or set REDIS_URL")
    socket_path.unlink(missing_ok=True)  # a dead server's: no live one owns the directory
    command = [
        binary, "--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700", "--dir", str(where),
        "--daemonize", "yes", "--pidfile", str(where / "redis.pid"), "--logfile", str(where / "redis.log"),
        "--appendonly", "yes", "--save", "",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, pass_fds=(owner,))
    if result.returncode != 0:
        raise ConfigError(f"could not start redis-server: {result.stderr.strip() or result.stdout.strip()}")
    log.info("started the embedded redis-server in %s", where)


def ensure_embedded_redis(directory: Path | None = None, *, timeout: float = START_TIMEOUT_SECONDS) -> str:
    """The URL of the embedded redis-server: the one running in ``directory`` once it answers, else a new one
    (started only when no live server owns the directory). ConfigError, one line, when none answers within
    ``timeout`` seconds; a live server is left running."""
    where = directory or data_dir()
    where.mkdir(parents=True, exist_ok=True)
    socket_path = where / "redis.sock"
    url = f"unix://{socket_path}"
    if len(str(socket_path)) > 100:
        raise ConfigError(
            f"the socket path {socket_path} is too long for a unix socket; set UNICORE_HOME shorter"
        )
    deadline = time.monotonic() + timeout
    started = said = False
    while True:
        with _locked(where / "start.lock", deadline):
            if _answers(url):
                return url
            owner = _owner_lock(where)
            if owner is not None:  # no live server owns the directory
                try:
                    if started:  # the one this command started has ended
                        raise ConfigError(f"the embedded redis-server in {where} exited at its start; see "
                                          f"{where / 'redis.log'}")
                    _start(where, socket_path, owner)
                    started = True
                finally:
                    os.close(owner)  # the server holds its own copy
            elif not said and not started:
                log.warning("waiting for the embedded redis-server (pid %s) in %s to answer (loading its data, "
                            "or stopped); up to %.0f s", _pid(where), where, timeout)
                said = True
        if time.monotonic() > deadline:
            raise ConfigError(
                f"the embedded redis-server (pid {_pid(where)}) in {where} did not answer within {timeout:.0f} s "
                f"(loading its data, or stopped); it was left running: try again later, or end it and the next "
                f"command starts a new one; see {where / 'redis.log'}"
            )
        time.sleep(_POLL_SECONDS)


def stop_embedded_redis(directory: Path | None = None) -> bool:
    """Shut the embedded server down (if running); True if it was running."""
    url = f"unix://{(directory or data_dir()) / 'redis.sock'}"
    if not _answers(url):
        return False
    try:
        redis.Redis.from_url(url).shutdown(nosave=True)
    except (redis.ConnectionError, redis.ResponseError):
        pass
    return True


def redis_url(settings: RuntimeSettings | None = None) -> str:
    """``$REDIS_URL`` (from ``settings``, else read now), or the embedded server's URL (started if needed);
    ``RedisURLError`` (one line naming REDIS_URL) for a URL no client can be built from."""
    if settings is None:
        settings = RuntimeSettings.from_env(only={"redis_url"})
    return check_url(settings.redis_url, "REDIS_URL") if settings.redis_url else ensure_embedded_redis()
