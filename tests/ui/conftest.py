"""Fixtures of the web UI tests: ``unicore ui`` as a subprocess on the session's real redis-server (its printed URL,
token included), and Debian's chromium driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

CHROMIUM = "/usr/bin/chromium"
UNICORE = str(Path(sys.executable).with_name("unicore"))
REPO = Path(__file__).resolve().parents[2]


@dataclass
class UI:
    url: str  # as printed: http://127.0.0.1:P/?token=...
    process: subprocess.Popen[str]
    dialogs: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)

    @property
    def token(self) -> str:
        return parse_qs(urlsplit(self.url).query)["token"][0]


def _printed_url(process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=deadline - time.monotonic()):
            line = process.stdout.readline()
            if not line:
                break
            if line.startswith("UniCore UI: "):
                return line.split(": ", 1)[1].strip()
    raise AssertionError(f"unicore ui printed no URL (exit {process.poll()})")


@pytest.fixture
def ui(redis_url: str, tmp_path: Path) -> Iterator[UI]:
    env = {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home")}
    with open(tmp_path / "ui.stderr", "w") as stderr:  # the server's tracebacks, if any, for a failing test
        # --scripts: the tests' scripts are written to tmp_path and named scripted:<file name>
        # (unicore_client.ui.scripts)
        process = subprocess.Popen([UNICORE, "ui", "--port", "0", "--scripts", str(tmp_path)], env=env, cwd=tmp_path,
                                   text=True, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
    try:
        yield UI(url=_printed_url(process), process=process)
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the server and the turn processes its supervisors started
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One Chromium for the package's tests. Package scope, not session: Playwright's sync API keeps an event loop
    running in the main thread while it is open, so every later test calling ``asyncio.run`` would fail."""
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run hack/bootstrap.sh (it installs Debian's chromium)")
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, ui: UI) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    opened = context.new_page()
    opened.on("dialog", lambda dialog: (ui.dialogs.append(dialog.message), dialog.dismiss()))
    try:
        yield opened
    finally:
        context.close()
