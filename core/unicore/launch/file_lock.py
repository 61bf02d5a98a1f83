"""One process at a time: an exclusive ``flock`` on a file, waited for up to a deadline (local mode's embedded
redis-server and ``unicore traces up`` start or stop one shared process under it)."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from unicore.errors import ConfigError


@contextmanager
def exclusive(path: Path, deadline: float, doing: str, poll_seconds: float = 0.1) -> Iterator[None]:
    """Hold an exclusive flock on ``path``; ConfigError (one line, saying what the holder is ``doing``) when another
    process holds it past ``deadline`` (``time.monotonic()``)."""
    with open(path, "w") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(f"another unicore command holds {path} ({doing}); try again") from None
                time.sleep(poll_seconds)
        yield


__all__ = ["exclusive"]
