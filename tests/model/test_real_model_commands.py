"""run_command with the real model (issue 28): asked to compute something by writing and running a Python script,
the 1.5B calls write_file, then run_command, and answers with what the script printed. Local mode, through the CLI
as a user would (``unicore run --tool run_command``), the command in the bubblewrap sandbox over the workspace."""

from __future__ import annotations

import pytest
from unicore.store.tasks import TaskStore, connect

from tests.model.conftest import unicore
from tests.model.test_real_model import TOOL_MODEL, final_text, tool_uses
from tests.model_retries import report_retries

pytestmark = [pytest.mark.model, pytest.mark.timeout(1800)]


def test_the_model_writes_a_script_runs_it_and_answers_with_its_output(tool_model_env: dict[str, str],
                                                                      redis_url: str) -> None:
    run = unicore(
        "run", "--model", TOOL_MODEL, "--name", "calc", "--no-summary", "--max-iterations", "5",
        "--tool", "run_command",
        "Use write_file to write a Python script squares.py that prints the sum of the squares of the numbers "
        "1 to 100. Then use run_command with the command 'python3 squares.py'. "
        "Then reply with only the number the script printed.",
        env=tool_model_env,
    )
    store = TaskStore(connect(redis_url))
    report_retries(store, ["calc"])
    assert run.returncode == 0, run.stderr[-2000:]
    calls = tool_uses(store, "calc")
    names = [call["name"] for call in calls]
    assert names[:2] == ["write_file", "run_command"], calls
    assert "squares.py" in calls[1]["input"]["command"], calls
    assert "338350" in final_text(store, "calc"), final_text(store, "calc")
