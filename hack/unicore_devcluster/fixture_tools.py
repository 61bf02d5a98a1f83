"""Custom tools for tests and the dev cluster, loaded through the real extension point
``UNICORE_EXTRA_TOOLS=unicore_devcluster.fixture_tools:TOOLS``. They live in the dev-cluster package (on the dev
venv's path, never in images), so turn processes started by the pod runner import them without a host path in the
pod's env.

``slow_step`` blocks like a hung tool: it waits up to ``seconds`` on the turn's cancel event, which only
SIGTERM (the Job being deleted) sets. It never marks progress: to the turn it is one long step.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from unicore.errors import ToolError
from unicore.tools.base import Tool, ToolContext

SPEC = "unicore_devcluster.fixture_tools:TOOLS"


class SlowStep(Tool):
    name = "slow_step"
    description = "Do one slow step of work (blocks for `seconds`)."

    class Input(BaseModel):
        model_config = ConfigDict(extra="forbid")
        seconds: float = Field(3600.0, ge=0, le=86_400)

    Input.__name__ = "SlowStepInput"

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        assert isinstance(args, SlowStep.Input)
        if ctx.cancel.wait(args.seconds):
            raise ToolError("slow_step was cancelled")
        return f"slow step done after {args.seconds:g}s"


TOOLS = [SlowStep]
NOT_A_TOOL = "slow_step"
