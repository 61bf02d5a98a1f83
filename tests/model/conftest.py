"""The real model servers for the tests of this folder: the 0.5B here, the 1.5B (``tool_model_server``) in
tests/conftest.py, shared with the real node's model pod tests; one llama-server each per session
(tests/model_server.py).

It comes from the cache that ``make test`` fills first (its ``model-bins`` prerequisite: hack/build-model-server.sh
and hack/fetch-model.py); a cold cache is built here. Where it cannot be built or started, the tests FAIL with the
reason, unless UNICORE_NO_MODEL=1 says to skip them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.model_server import ALIAS, OPT_OUT, ModelServer, ModelUnavailable, opted_out

REPO = Path(__file__).resolve().parents[2]
UNICORE = str(Path(sys.executable).with_name("unicore"))


def start_server(model: str) -> ModelServer:
    if opted_out():
        pytest.skip(f"{OPT_OUT}=1: no real model server")
    try:
        return ModelServer(model=model)
    except ModelUnavailable as exc:
        pytest.fail(f"the real model server is unavailable: {exc} (set {OPT_OUT}=1 to skip these tests)")


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    """Qwen2.5-Coder-0.5B: plain answers (streaming)."""
    server = start_server(ALIAS)
    yield server
    server.stop()


def cli_env(server: ModelServer, redis_url: str, home: Path) -> dict[str, str]:
    """The environment of a local-mode CLI that uses the server's model as ``openai:<alias>``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "UNICORE_OPENAI_"))}
    return {**env, **server.env(), "REDIS_URL": redis_url, "UNICORE_HOME": str(home),
            "UNICORE_OPENAI_TIMEOUT": "600", "UNICORE_OPENAI_MAX_ATTEMPTS": "2"}


@pytest.fixture
def model_env(model_server: ModelServer, redis_url: str, tmp_path: Path) -> dict[str, str]:
    return cli_env(model_server, redis_url, tmp_path / "home")


@pytest.fixture
def tool_model_env(tool_model_server: ModelServer, redis_url: str, tmp_path: Path) -> dict[str, str]:
    return cli_env(tool_model_server, redis_url, tmp_path / "home")


def unicore(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process group: on a timeout the group goes, turn processes included (a turn left
    running would keep the shared server busy for the next test)."""
    proc = subprocess.Popen([UNICORE, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"unicore {' '.join(args)} ran over {timeout} s; stderr: {err[-2000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
