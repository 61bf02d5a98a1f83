"""``schema.check_prompt``: the one rule for a prompt (not empty, not only whitespace), in every model a prompt
enters by: the stored TaskSpec, the spawn_task tool's input (an error result to the model) and the operator's
AgentTask spec (the web UI's manifests use it too)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from unicore.api.schema import TaskSpec, check_prompt
from unicore.api.spec import SpecInvalid, parse_spec
from unicore.tools.tasks import SpawnTaskInput

BLANK = ["", " ", "\n\t ", "\u3000\u2003"]
SAID = "the prompt is empty (or only whitespace)"


@pytest.mark.parametrize("prompt", BLANK, ids=repr)
def test_a_blank_prompt_is_refused_in_one_line(prompt: str) -> None:
    with pytest.raises(ValueError, match=r"^the prompt is empty \(or only whitespace\)$"):
        check_prompt(prompt)


@pytest.mark.parametrize("prompt", ["x", "  padded  ", "\u200b"])  # a zero-width space is not whitespace
def test_any_other_prompt_is_kept_as_written(prompt: str) -> None:
    assert check_prompt(prompt) == prompt
    assert TaskSpec(id="t", prompt=prompt).prompt == prompt


@pytest.mark.parametrize("prompt", BLANK, ids=repr)
def test_every_model_of_a_prompt_uses_the_rule(prompt: str) -> None:
    with pytest.raises(ValidationError) as spec:
        TaskSpec(id="t", prompt=prompt)
    assert spec.value.errors()[0]["msg"] == SAID
    assert TaskSpec(id="t", prompt=None).prompt is None  # the operator queues a task's prompt on its own
    with pytest.raises(ValidationError) as spawn:
        SpawnTaskInput(name="child", prompt=prompt)
    assert spawn.value.errors()[0]["msg"] == SAID
    for spec_fields in ({"prompt": prompt}, {"prompt": prompt, "parentRef": {"name": "parent"}}):
        with pytest.raises(SpecInvalid, match=r"spec\.prompt: the prompt is empty"):
            parse_spec(spec_fields)
