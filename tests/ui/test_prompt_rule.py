"""One rule for a prompt on every path a task is created by (``schema.check_prompt``): an empty or whitespace-only
prompt is refused by ``unicore run`` (exit 2, one line, nothing written) and by the web UI (400, form and manifest),
with the same words. The CLI and ``unicore ui`` as subprocesses on the real redis-server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from unicore.store.tasks import TaskStore, connect

from tests.ui.conftest import UI
from tests.ui.test_ui_http import cookie, csrf, request
from tests.unicore_cli import unicore

pytestmark = pytest.mark.ui

BLANK = ["", "   ", "\n\t ", "\u3000"]  # the last: an ideographic space (str.isspace)
SAID = "the prompt is empty (or only whitespace)"


@pytest.mark.parametrize("prompt", BLANK, ids=repr)
def test_unicore_run_refuses_a_blank_prompt(redis_url: str, tmp_path: Path, prompt: str) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home")}
    result = unicore("run", "--name", "blank", prompt, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"unicore: error: {SAID}", result.stderr
    assert not TaskStore(connect(redis_url)).exists("blank")


def test_unicore_run_refuses_a_blank_prompt_for_an_existing_task_too(redis_url: str, tmp_path: Path) -> None:
    """``run`` on an existing name sends its prompt as a message: the same rule."""
    env = {**os.environ, "REDIS_URL": redis_url, "UNICORE_HOME": str(tmp_path / "home")}
    first = unicore("run", "--name", "there", "--quiet", "hello", env=env)
    assert first.returncode == 0, first.stderr
    store = TaskStore(connect(redis_url))
    before = store.pending_count("there"), len(store.load_history("there"))
    again = unicore("run", "--name", "there", " ", env=env)
    assert again.returncode == 2 and again.stderr.strip() == f"unicore: error: {SAID}", again.stderr
    assert (store.pending_count("there"), len(store.load_history("there"))) == before


@pytest.mark.parametrize("prompt", BLANK, ids=repr)
def test_the_ui_refuses_a_blank_prompt_with_the_same_words(ui: UI, redis_url: str, prompt: str) -> None:
    jar = cookie(ui)
    headers = {"Cookie": jar, "X-CSRF-Token": csrf(ui, jar), "Origin": f"http://127.0.0.1:{ui.port}"}
    form = request(ui, "POST", "/api/tasks", headers=headers,
                   body={"prompt": prompt, "model": "scripted", "name": "blank"})
    assert form.status == 400 and json.loads(form.read()) == {"error": SAID}
    manifest = ("apiVersion: unicore.dev/v1alpha1\nkind: AgentTask\nmetadata: {name: blank}\n"
                f"spec: {{prompt: {json.dumps(prompt)}, model: scripted}}\n")
    from_yaml = request(ui, "POST", "/api/tasks", headers=headers, body={"yaml": manifest})
    assert from_yaml.status == 400
    assert SAID in json.loads(from_yaml.read())["error"]
    assert not TaskStore(connect(redis_url)).exists("blank")
