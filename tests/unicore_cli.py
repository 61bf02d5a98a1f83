"""The ``unicore`` command of this venv, run as a user runs it (the CLI integration tests share it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNICORE = str(Path(sys.executable).with_name("unicore"))


def unicore(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``unicore ARGS`` from the repository's root, its output captured; never raises on a non-zero exit."""
    return subprocess.run([UNICORE, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          check=False)
