"""``run_command``: run a shell command line where the task's code may run: the workbench container of its turn pod
(through the exec server's socket, ``commands.exec_client``) or, in local mode, a sandbox over its workspace
(``commands.local_runner``). Never in a default toolset (``tools.policy``): a task or Agent names it.

The timeout is the call's ``timeout_seconds``, capped by ``limits.commandTimeoutSeconds`` and by the turn's remaining
time; at the timeout, when the turn is cancelled (suspend, stop) or when the turn ends, the command's whole process
group is killed. The result: exit code, duration, the last 16 KiB of stdout and of stderr (what was cut is said).
A command that could not start at all (no such folder, the workbench gone or unusable) is an error result with the
reason. Counted in ``command_calls_total{outcome}`` and ``command_duration_seconds`` besides the tool call metrics.
"""

from __future__ import annotations

import json
import posixpath
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unicore.commands.result import CommandResult
from unicore.errors import ToolError
from unicore.tools.base import Tool, ToolContext

NAME = "run_command"
CALLS = "command_calls_total"
DURATION = "command_duration_seconds"
OUTCOMES = ("ok", "failed", "timed_out", "cancelled", "error")
TIME_LEFT_MARGIN_SECONDS = 15.0  # kept back from the turn's remaining time to store the result and end the turn


class RunCommandInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, max_length=100_000,
                         description="A shell command line, run by /bin/sh -c (pipes, &&, redirections work).")
    workdir: str | None = Field(None, max_length=4096,
                                description="Folder to run in, relative to the workspace (default: the workspace).")
    timeout_seconds: float | None = Field(None, gt=0, le=86_400,
                                          description="Kill the command after this many seconds (capped by the "
                                                      "task's limit and the turn's remaining time).")


def workdir_in(workspace: str, workdir: str | None) -> str:
    """``workdir`` as an absolute path inside ``workspace`` (lexically; the runner checks the real folder), or a
    ToolError."""
    if not workdir:
        return workspace
    path = posixpath.normpath(posixpath.join(workspace, workdir))
    if path != workspace and not path.startswith(workspace.rstrip("/") + "/"):
        raise ToolError(f"workdir {workdir!r} is outside the workspace ({workspace}); give a folder inside it")
    return path


def command_timeout(ctx: ToolContext, asked: float | None) -> float:
    """The call's timeout: what it asked for, at most the task's limit and the turn's remaining time."""
    limit = float(ctx.command_timeout_seconds)
    timeout = min(asked, limit) if asked is not None else limit
    if ctx.deadline is not None:
        left = ctx.deadline - time.monotonic() - TIME_LEFT_MARGIN_SECONDS
        if left < 1:
            raise ToolError("the turn has no time left to run a command; finish with what you have")
        timeout = min(timeout, left)
    return timeout


class RunCommand(Tool):
    name = NAME
    description = ("Run a shell command in your workspace (where your files are) and get its exit code, duration "
                   "and the end of its stdout and stderr. Use it to run scripts you wrote, tests, pip install, GPU "
                   "jobs. Output beyond 16 KiB per stream is cut from the start; long runs need timeout_seconds.")
    Input = RunCommandInput

    def target(self) -> str:
        return "tool 'run_command' (a shell command in the task's workbench)"

    def run(self, ctx: ToolContext, args: BaseModel) -> str | dict[str, Any] | list[Any]:
        assert isinstance(args, RunCommandInput)
        runner = ctx.command_runner
        if runner is None:
            raise ToolError("run_command cannot run here: this turn has no workbench or sandbox")
        workdir = workdir_in(str(ctx.workspace), args.workdir)
        timeout = command_timeout(ctx, args.timeout_seconds)
        sink = ctx.command_output(args.command) if ctx.command_output is not None else None
        try:
            result = runner.run(args.command, workdir=workdir, timeout_seconds=timeout, cancel=ctx.cancel,
                                on_output=sink.write if sink is not None else None)
        except ToolError:
            record(ctx, "error", None)
            raise
        finally:
            if sink is not None:
                sink.close()
        record(ctx, result.outcome, result)
        if result.cancelled:
            raise ToolError("cancelled: the turn is stopping, the command was killed; what it printed: "
                            + json.dumps(result.for_model()))
        return result.for_model()


def record(ctx: ToolContext, outcome: str, result: CommandResult | None) -> None:
    if ctx.telemetry is None:
        return
    ctx.telemetry.incr(CALLS, {"outcome": outcome})
    if result is not None:
        ctx.telemetry.observe(DURATION, result.duration_seconds)


__all__ = ["CALLS", "DURATION", "NAME", "OUTCOMES", "RunCommand", "RunCommandInput", "command_timeout",
           "workdir_in"]
