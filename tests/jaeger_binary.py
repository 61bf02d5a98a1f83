"""The real Jaeger of the trace tests: ``$UNICORE_JAEGER`` when set, else hack/build-jaeger.sh's binary (make test's
``jaeger-bins`` prerequisite; a cold cache is built here, about 5 minutes on 2 cores).

``UNICORE_NO_JAEGER=1`` makes these tests skip (as it makes ``make jaeger-bins`` build nothing); otherwise a binary
that cannot be built FAILS them with the script's own error, never skips.
"""

from __future__ import annotations

import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
from unicore_client.traces.jaeger import BINARY_VARIABLE, find_jaeger_binary

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "hack" / "build-jaeger.sh"
OPT_OUT = "UNICORE_NO_JAEGER"


@lru_cache(maxsize=1)
def _built() -> Path:
    if os.environ.get(BINARY_VARIABLE):
        return find_jaeger_binary(None)
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=900, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"hack/build-jaeger.sh failed ({proc.returncode}): {proc.stderr.strip()[-600:]}")
    binary = Path(lines[-1]) / "jaeger"
    assert binary.is_file() and os.access(binary, os.X_OK), f"{binary} missing after hack/build-jaeger.sh"
    return binary


def jaeger_binary() -> Path:
    """The binary to run (built first when the cache is cold); skips the test under ``UNICORE_NO_JAEGER=1``."""
    if os.environ.get(OPT_OUT) == "1":
        pytest.skip(f"{OPT_OUT}=1: no Jaeger")
    return _built()
