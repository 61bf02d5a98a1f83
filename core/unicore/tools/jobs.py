"""``submit_job`` and ``job_status``: GPU work longer than a turn (issue 29). ``submit_job`` records a request for a
command to run as its own Job (on Kubernetes the operator creates it, in the task's Kueue queue, with the workspace
mounted; in local mode the supervisor runs it in the sandbox) and returns at once; the task then waits with no turn
until the job ends, and its result (exit code, reason, duration, the end of its log) comes as a message, exactly once
(``store.command_jobs``). Never in a default toolset: a task or Agent names them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unicore.api.schema import task_name
from unicore.errors import LimitExceeded, ToolError
from unicore.store import command_jobs
from unicore.tools.base import Tool, ToolContext

SUBMIT = "submit_job"
STATUS = "job_status"
MAX_JOB_SECONDS = 7 * 24 * 3600


class SubmitJobInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1, max_length=100_000,
                         description="A shell command line, run by /bin/sh -c in /workspace (your files).")
    image: str | None = Field(None, min_length=1, max_length=512,
                              description="Container image (default: your workbench image).")
    gpus: int = Field(0, ge=0, le=64, description="GPUs the job needs (at most your limit).")
    timeout_seconds: int = Field(3600, ge=1, le=MAX_JOB_SECONDS, description="Stop the job after this long.")


class JobStatusInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitJob(Tool):
    name = SUBMIT
    description = ("Run a long command (training, evaluation, a benchmark) as its own job on the cluster's queue, "
                   "with GPUs, and wait for it without holding this turn: the call returns the job's name at once; "
                   "end your turn, and its result (exit code, the end of its log) comes to you as a message when it "
                   "ends. Its files stay in /workspace for your next turn.")
    Input = SubmitJobInput

    def target(self) -> str:
        return "tool 'submit_job' (a command run as its own Job)"

    def run(self, ctx: ToolContext, args: BaseModel) -> str | dict[str, Any] | list[Any]:
        assert isinstance(args, SubmitJobInput)
        if ctx.lease is None:
            raise ToolError("submit_job cannot run here: this turn holds no lease")
        if args.gpus > ctx.max_job_gpus:
            raise LimitExceeded(f"a job may ask for at most {ctx.max_job_gpus} GPUs (limits.maxJobGPUs); "
                                f"you asked for {args.gpus}")
        request = {"command": args.command, "image": args.image, "gpus": args.gpus,
                   "timeout_seconds": args.timeout_seconds, "turn": ctx.turn_number}
        n = command_jobs.request_job(ctx.store, ctx.lease(), request)
        name = command_jobs.job_name(task_name(ctx.task_id), n)
        return {"job": name, "state": "requested",
                "note": "End your turn to wait: the job's result comes as a message when it ends."}


class JobStatus(Tool):
    name = STATUS
    description = "List the jobs you submitted with submit_job and whether each has ended (and how)."
    Input = JobStatusInput

    def run(self, ctx: ToolContext, args: BaseModel) -> str | dict[str, Any] | list[Any]:
        states = command_jobs.job_states(ctx.store, ctx.task_id)
        name = task_name(ctx.task_id)
        return [{"job": command_jobs.job_name(name, state.request.n), "command": state.request.command,
                 "gpus": state.request.gpus,
                 "state": (state.ended or {}).get("state") or ("submitted" if state.created else "requested"),
                 **({"exit_code": state.ended.get("exit_code")} if state.ended else {})}
                for state in states]


__all__ = ["JobStatus", "SubmitJob"]
