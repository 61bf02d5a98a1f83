"""The embedded default: when REDIS_URL is unset, a private redis-server on a unix socket in a data directory.

``${UNICORE_HOME:-~/.unicore}/redis`` holds the socket, the append-only file and the log. A server already
running there is reused, so ``unicore send/show/tree`` after ``unicore run`` see the same data.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import time
from pathlib import Path

import redis

from unicore.errors import ConfigError
from unicore.log import get_logger
from unicore.settings import RuntimeSettings

log = get_logger("launch.redis")


def unicore_home() -> Path:
    """``$UNICORE_HOME`` (default ``~/.unicore``), read now."""
    return RuntimeSettings.from_env(only={"home"}).home


def data_dir() -> Path:
    return unicore_home() / "redis"


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2).ping())
    except (redis.RedisError, OSError):
        return False


def ensure_embedded_redis(directory: Path | None = None, *, timeout: float = 20.0) -> str:
    """The URL of the embedded redis-server, started (daemonized) unless it already answers."""
    where = directory or data_dir()
    where.mkdir(parents=True, exist_ok=True)
    socket_path = where / "redis.sock"
    url = f"unix://{socket_path}"
    if len(str(socket_path)) > 100:
        raise ConfigError(
            f"the socket path {socket_path} is too long for a unix socket; set UNICORE_HOME shorter"
        )
    with open(where / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two CLIs starting at once start one server
        if _answers(url):
            return url
        binary = shutil.which("redis-server")
        if binary is None:
            raise ConfigError(
                "redis-server is not on PATH: install it (hack/bootstrap.sh does) or set REDIS_URL"
            )
        if socket_path.exists():
            socket_path.unlink()
        command = [
            binary,
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(where),
            "--daemonize",
            "yes",
            "--pidfile",
            str(where / "redis.pid"),
            "--logfile",
            str(where / "redis.log"),
            "--appendonly",
            "yes",
            "--save",
            "",
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ConfigError(
                f"could not start redis-server: {result.stderr.strip() or result.stdout.strip()}"
            )
        deadline = time.monotonic() + timeout
        while not _answers(url):
            if time.monotonic() > deadline:
                raise ConfigError(f"redis-server did not answer on {socket_path}; see {where / 'redis.log'}")
            time.sleep(0.05)
        log.info("started the embedded redis-server in %s", where)
        return url


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
    """``$REDIS_URL`` (from ``settings``, else read now), or the embedded server's URL (started if needed)."""
    if settings is None:
        settings = RuntimeSettings.from_env(only={"redis_url"})
    return settings.redis_url or ensure_embedded_redis()
