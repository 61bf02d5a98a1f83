"""The ``unicore`` command of this venv, run as a user runs it (the CLI integration tests share it)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
UNICORE = str(Path(sys.executable).with_name("unicore"))


def unicore(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``unicore ARGS`` from the repository's root, its output captured; never raises on a non-zero exit."""
    return subprocess.run([UNICORE, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          check=False)


class OutputReader:
    """Reads a process's stdout on a thread, so a test can wait for what it printed (``text``, so far)."""

    def __init__(self, stream: IO[str]) -> None:
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for chunk in iter(lambda: stream.read(1), ""):
            self.text += chunk
