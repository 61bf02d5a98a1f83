"""The real model server for the tests of this folder: one llama-server per session (tests/model_server.py).

It comes from the cache that ``make test`` fills first (its ``model-bins`` prerequisite: hack/build-model-server.sh
and hack/fetch-model.py); a cold cache is built here. Where it cannot be built or started, the tests FAIL with the
reason, unless UNICORE_NO_MODEL=1 says to skip them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.model_server import OPT_OUT, ModelServer, ModelUnavailable, opted_out

REPO = Path(__file__).resolve().parents[2]
UNICORE = str(Path(sys.executable).with_name("unicore"))


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    if opted_out():
        pytest.skip(f"{OPT_OUT}=1: no real model server")
    try:
        server = ModelServer()
    except ModelUnavailable as exc:
        pytest.fail(f"the real model server is unavailable: {exc} (set {OPT_OUT}=1 to skip these tests)")
    yield server
    server.stop()


@pytest.fixture
def model_env(model_server: ModelServer, redis_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a local-mode CLI that uses the real model as ``openai:<alias>``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "UNICORE_OPENAI_"))}
    return {**env, **model_server.env(), "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home"),
            "UNICORE_OPENAI_TIMEOUT": "300", "UNICORE_OPENAI_MAX_ATTEMPTS": "2"}


def unicore(*args: str, env: dict[str, str], timeout: float = 420) -> subprocess.CompletedProcess[str]:
    return subprocess.run([UNICORE, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          check=False)
