"""Start a private, real redis-server on a unix socket (tests and local mode share this helper's idea)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import redis

from tests.waiting import wait_for


class RedisServer:
    def __init__(self, directory: Path | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH; run hack/bootstrap.sh (it installs Debian's package)")
        self.dir = directory or Path(tempfile.mkdtemp(prefix="unicore-redis-"))
        self.socket = self.dir / "redis.sock"
        self.proc = subprocess.Popen(
            [binary, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--dir", str(self.dir), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.url = f"unix://{self.socket}"
        wait_for(self._ping, timeout=20, what="redis-server to answer PING")

    def _ping(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
        return bool(redis.Redis.from_url(self.url).ping())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class RestartableRedis:
    """A private redis-server on a unix socket that can be stopped and started again with its data (AOF)."""

    def __init__(self, directory: Path | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not on PATH; run hack/bootstrap.sh (it installs Debian's package)")
        self.binary = binary
        self.dir = directory or Path(tempfile.mkdtemp(prefix="uc-redis-"))
        self.socket = self.dir / "redis.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def admin(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket), decode_responses=True)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--dir", str(self.dir), "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout=20, what="redis-server to answer PING")

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
        client = self.admin()
        try:
            return bool(client.ping())
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # a clean shutdown: the AOF is complete
            self.proc.wait(timeout=20)
        self.socket.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
