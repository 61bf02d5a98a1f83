"""spec.prompt against the runtime's message cap (issue 25, 7): the CRD's maxLength counts characters (262144), the
runtime's cap the bytes of the stored inbox message (256 KiB, UTF-8 JSON with its envelope), so a prompt the API server
accepts may not fit. The operator's create handler refuses it before storing anything (``checked_prompt``: the task is
Failed with InvalidSpec saying why) instead of leaving a task that looks Ready and Idle and never runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import yaml
from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES
from unicore.api.spec import SpecInvalid, parse_spec, prompt_message
from unicore.errors import MessageTooLarge
from unicore.store.tasks import TaskStore
from unicore_operator.handlers.agenttasks import checked_prompt

REPO = Path(__file__).resolve().parents[2]
UID = "0b6a4d52-5a43-4c4e-9b0e-2f1f6c1d2e3f"


@pytest.fixture
def store() -> TaskStore:
    return TaskStore(redis.Redis(host="unused.invalid", decode_responses=True))  # the size check sends nothing to Redis


def crd_prompt_max_length() -> int:
    crd = yaml.safe_load((REPO / "crds" / "agenttask.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return int(spec["properties"]["prompt"]["maxLength"])


@pytest.mark.parametrize("prompt", ["\u00e9" * 200_000, "a" * 262_144, "\u4e2d" * 100_000, "\x01" * 50_000],
                         ids=["2-byte", "ascii-at-maxLength", "3-byte", "escaped-control"])
def test_a_prompt_the_crd_accepts_but_the_runtime_cannot_queue_is_refused(store: TaskStore, prompt: str) -> None:
    assert len(prompt) <= crd_prompt_max_length() == 262_144  # the API server admits it
    parsed = parse_spec({"prompt": prompt})
    with pytest.raises(SpecInvalid) as refused:
        checked_prompt(store, UID, "team-a", parsed)
    message = str(refused.value)
    assert message.startswith("spec.prompt cannot be queued: message prompt-") and "\n" not in message
    assert f"over the cap of {DEFAULT_MESSAGE_CAP_BYTES} bytes" in message and "kubectl agenttask send" in message


def test_the_cap_is_on_the_stored_message_and_exact(store: TaskStore) -> None:
    parsed = parse_spec({"prompt": "a"})
    message = checked_prompt(store, UID, "team-a", parsed)
    assert message is not None and message.content == "a" and message.sender == "user"
    envelope = store.check_message(message) - 1
    fits = message.model_copy(update={"content": "a" * (DEFAULT_MESSAGE_CAP_BYTES - envelope)})
    assert store.check_message(fits) == DEFAULT_MESSAGE_CAP_BYTES
    with pytest.raises(MessageTooLarge):
        store.check_message(fits.model_copy(update={"content": fits.content + "a"}))
    child = prompt_message(UID, "team-a", parse_spec({"prompt": "go", "parentRef": {"name": "boss"}}))
    assert child is not None and child.sender == "team-a/boss" and child.id == f"prompt-{UID}"
    assert prompt_message(UID, "team-a", parse_spec({"parentRef": {"name": "boss"}})) is None
