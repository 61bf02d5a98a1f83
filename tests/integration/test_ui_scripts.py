"""The web UI reads no file a browser names (issue 24, item 6): ``scripted:<path>`` from the create form or a
manifest made the server load any file it could read, and the error echoed the file's top-level keys. Now the UI's
``scripted:NAME`` is a file directly in the directory ``unicore ui --scripts DIR`` names, and nothing else; without
``--scripts`` it is refused. The refusals echo nothing of any file. Real redis-server, the real LocalBackend."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import redis
from unicore.store.reads import busy
from unicore.store.tasks import TaskStore
from unicore_client.ui.local_backend import LocalBackend
from unicore_client.ui.scripts import ScriptRefused

from tests.waiting import wait_for

SECRET = "root: $6$hash-of-root\nTOPSECRET_LINE: hunter2\n"
GOOD = "tasks:\n  '*':\n    - text: 'from the scripts directory'\n"


def manifest(name: str, model: str, script: str = "") -> str:
    return (f"apiVersion: unicore.dev/v1alpha1\nkind: AgentTask\nmetadata: {{name: {name}}}\n"
            f"spec:\n  prompt: hi\n  model: '{model}'\n{script}")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "private" / "shadow.yaml"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def _refused(store: TaskStore, backend: LocalBackend, name: str, model: str, *, yaml_script: str | None = None) -> str:
    with pytest.raises(ValueError) as caught:  # BadRequest / ScriptRefused: both are the server's 400
        if yaml_script is None:
            backend.create("hi", model, name)
        else:
            backend.create_from_yaml(manifest(name, model, yaml_script))
    message = str(caught.value)
    assert "TOPSECRET" not in message and "hunter2" not in message and "hash-of-root" not in message, message
    assert "\n" not in message
    assert not store.exists(name)
    return message


@pytest.mark.parametrize("spelling", ["scripted:{}", "Scripted:{}", " scripted:{}", "SCRIPTED : {}"])
def test_without_a_scripts_directory_no_script_file_is_read(store: TaskStore, redis_client: redis.Redis, redis_url: str,
                                                            secret: Path, spelling: str) -> None:
    backend = LocalBackend(redis_client, redis_url)
    model = spelling.format(secret)
    message = _refused(store, backend, "form", model)
    assert "--scripts" in message
    _refused(store, backend, "yaml", model, yaml_script="")
    inline = "  script: {tasks: {'*': [{text: inline}]}}\n"  # an inline script does not make the path harmless
    _refused(store, backend, "both", model, yaml_script=inline)


def test_a_scripts_directory_serves_its_own_files_only(store: TaskStore, redis_client: redis.Redis, redis_url: str,
                                                       secret: Path, tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "good.yaml").write_text(GOOD)
    (scripts / "link.yaml").symlink_to(secret)  # a link out of the directory is not its file
    (scripts / ".hidden.yaml").write_text(GOOD)
    backend = LocalBackend(redis_client, redis_url, scripts=scripts)
    for index, model in enumerate([f"scripted:{secret}", "scripted:../private/shadow.yaml", "scripted:link.yaml",
                                   "scripted:.hidden.yaml", "scripted:sub/good.yaml", "scripted:missing.yaml",
                                   "scripted:.", "scripted:.."]):
        _refused(store, backend, f"bad-{index}", model)
    _refused(store, backend, "yaml-bad", f"scripted:{secret}", yaml_script="")

    assert backend.create("hi", "scripted:good.yaml", "good-form") == "good-form"
    assert backend.create_from_yaml(manifest("good-yaml", "scripted:good.yaml")) == "good-yaml"
    for name in ("good-form", "good-yaml"):
        record = store.get_task(name)
        # stored as the script itself: no turn process reads a path later
        assert record.model == "scripted" and record.script is not None
        assert record.script["tasks"]["*"][0]["text"] == "from the scripts directory"
        wait_for(lambda name=name: store.get_task(name).last_response == "from the scripts directory"
                 and not busy(store, name), timeout=60, what=f"{name}'s turn to end")
    # the backend's supervisor threads end once their trees settled (none is left polling a flushed Redis)
    wait_for(lambda: not [t for t in threading.enumerate() if t.name.startswith("ui-run-")], timeout=30,
             what="the UI's supervisor threads to end")


def test_a_scripts_directory_script_with_an_error_names_the_file(store: TaskStore, redis_client: redis.Redis,
                                                                 redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "typo.yaml").write_text("tasks: {x: [{txt: typo}]}\n")
    backend = LocalBackend(redis_client, redis_url, scripts=tmp_path)
    with pytest.raises(ScriptRefused, match=r"typo\.yaml") as caught:
        backend.create("hi", "scripted:typo.yaml", "typo")
    assert "txt" in str(caught.value)  # the directory's own script: its mistake is shown
    assert not store.exists("typo")
