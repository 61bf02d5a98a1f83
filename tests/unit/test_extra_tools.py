"""UNICORE_EXTRA_TOOLS: custom Tool classes join the known tools; a bad spec is a clear ConfigError."""

from __future__ import annotations

import pytest
from unicore.api.schema import TaskSpec
from unicore.errors import ConfigError
from unicore.tools.registry import ALL_TOOLS, known_tools, load_extra_tools, tool_names_for, toolset_for
from unicore_devcluster.fixture_tools import SPEC, SlowStep

BUILTIN = "unicore.tools.workspace:ReadFile"


def test_without_the_env_only_the_builtin_tools_are_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNICORE_EXTRA_TOOLS", raising=False)
    assert known_tools() == ALL_TOOLS
    assert "slow_step" not in tool_names_for(TaskSpec(id="demo", prompt="hi", tools=["slow_step"]))


def test_extra_tools_are_available_to_tasks_that_name_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICORE_EXTRA_TOOLS", f" {SPEC} , ")
    assert set(known_tools()) == set(ALL_TOOLS) | {"slow_step"}
    assert isinstance(known_tools()["slow_step"], SlowStep)
    tools = toolset_for(TaskSpec(id="demo", prompt="hi", tools=["read_file", "slow_step"]))
    assert [tool.name for tool in tools] == ["read_file", "slow_step"]
    # never part of the default toolsets
    assert "slow_step" not in tool_names_for(TaskSpec(id="demo", prompt="hi"))


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("unicore_devcluster.fixture_tools", "package.module:ATTR"),
        (":TOOLS", "package.module:ATTR"),
        ("tests.no_such_module:TOOLS", "cannot import 'tests.no_such_module'"),
        ("unicore_devcluster.fixture_tools:MISSING", "has no attribute 'MISSING'"),
        ("unicore_devcluster.fixture_tools:NOT_A_TOOL", "is not a Tool subclass"),
        (f"{SPEC},{SPEC}", "'slow_step' .* defined twice"),
        (BUILTIN, "'read_file' .* defined twice"),
    ],
)
def test_bad_specs_raise_config_error(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"UNICORE_EXTRA_TOOLS: .*{problem}"):
        load_extra_tools(spec)
