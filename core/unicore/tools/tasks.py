"""Task tools: spawn_task (create or resume a child), message_task, task_status (the status of the task's
descendants)."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unicore.api.schema import DEFAULT_MESSAGE_CAP_BYTES, InboxMessage, Prompt, child_task_id
from unicore.errors import ToolError
from unicore.tools import policy, storeview
from unicore.tools.base import Tool, ToolContext
from unicore.tools.storeview import Activity

MAX_PROMPT_CHARS = DEFAULT_MESSAGE_CAP_BYTES // 2
STATUS_MAX_TASKS = 50
STATUS_MAX_LEVELS = 5
STALE_HEARTBEAT_SECONDS = 90.0
EXCERPT_CHARS = 160


def _excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def resolve_descendant(ctx: ToolContext, ref: str) -> str:
    """The id of a descendant of the calling task given its child name, its name or its id."""
    me = ctx.task_id
    candidates = [ref] if ref.startswith(me + "-") else []
    candidates += [child_task_id(me, ref)]
    for candidate in candidates:
        task = candidate
        for _ in range(64):  # walk up the parent chain to the caller
            view = storeview.read_views(ctx.store, [task])[0]
            if view is None or view.parent is None:
                break
            if view.parent == me:
                return candidate
            task = view.parent
    raise ToolError(f"no task {ref!r} among your descendants (use task_status to list them)")


class SpawnTaskInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(
        min_length=1,
        max_length=policy.MAX_CHILD_NAME,
        pattern=policy.CHILD_NAME_RE.pattern,
        description="short child name: lowercase letters, digits, '-' (e.g. 'research-a'); the child's id is "
        "'<your id>-<name>'. Using the name of an existing child sends it the prompt as a new message.",
    )
    prompt: Prompt = Field(max_length=MAX_PROMPT_CHARS, description="what the child should do")
    tools: list[str] | None = Field(
        None,
        description="tools for the child (a subset of yours, and of your child toolset if you have one); default: "
        "a reduced read-only toolset. With `agent`: a subset of that agent's tools; default: all of them",
    )
    agent: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description="the name of an agent to run the child as (one of the agents you may spawn): the child gets "
        "that agent's model, instructions and tools",
    )


class SpawnTask(Tool):
    name = "spawn_task"
    description = (
        "Start a child task (a sub-agent) that works on `prompt` in parallel with you. It sees your "
        "conversation so far. When it finishes, its final answer arrives as a message starting with "
        "'[SYSTEM] Child task'. "
        "Spawning a name that already exists sends that child `prompt` as a follow-up message instead."
    )
    Input = SpawnTaskInput

    def run(self, ctx: ToolContext, args: SpawnTaskInput) -> str:  # type: ignore[override]
        child_id, created = ctx.spawner.spawn(ctx.task_id, args.name, args.prompt, args.tools, agent=args.agent)
        if created:
            return (
                f"Started child task {child_id}. It runs in parallel; its final answer will arrive as a "
                f"'[SYSTEM] Child task {child_id} has completed' message. Use task_status to check on it."
            )
        return (
            f"Child task {child_id} already exists: sent it your prompt as a new message. It continues its "
            "existing conversation and reports back when done."
        )


class MessageTaskInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1, max_length=253, description="a child's name, or the id of a descendant")
    message: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS, description="the message to send")


class MessageTask(Tool):
    name = "message_task"
    description = (
        "Send a follow-up message to one of your existing child tasks (or a deeper descendant). "
        "It wakes the task if it is idle; its answer arrives as a completion message."
    )
    Input = MessageTaskInput

    def run(self, ctx: ToolContext, args: MessageTaskInput) -> str:  # type: ignore[override]
        target = resolve_descendant(ctx, args.task)
        me = storeview.get_view(ctx.store, ctx.task_id)
        if me is None:
            raise ToolError(f"task {ctx.task_id} not found")
        policy.check_message(me, policy.tree_counts(ctx.store, me))
        ctx.store.queue_message(target, InboxMessage(type="user", content=args.message, sender=ctx.task_id))
        ctx.store.activate(target, "message")
        return f"Sent your message to {target}; it will report back when done."


class TaskStatusInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str | None = Field(
        None, description="a descendant's name or id to look at; default: your own children"
    )
    levels: int = Field(2, ge=1, le=STATUS_MAX_LEVELS, description="how many levels of descendants to show")


def describe(activity: Activity, now: float, stale_after: float = STALE_HEARTBEAT_SECONDS) -> dict[str, Any]:
    """Seed 001 status of one task: status, usage, last tool, in-model-call or stuck."""
    view = activity.view
    info: dict[str, Any] = {
        "id": view.id,
        "status": view.status,
        "turns": view.turns,
        "tool_iterations": view.tool_iterations,
        "tokens": view.total_tokens,
        "pending_messages": activity.pending,
    }
    last_tool, tool_finished = _last_tool(activity.last_messages)
    if last_tool is not None:
        info["last_tool"] = {
            **last_tool,
            "age_seconds": round(now - last_tool["at"], 1) if last_tool["at"] else None,
            "finished": tool_finished,
        }
    running = view.status == "running"
    if running:
        beat = activity.heartbeat
        beat_age = now - beat if beat is not None else now - (view.updated_at or now)
        if beat_age > stale_after:
            info["stuck"] = True
            info["stuck_reason"] = (
                f"no heartbeat for {_age(beat_age)}"
                if beat is not None
                else f"no heartbeat at all; running for {_age(beat_age)}"
            )
        last = activity.last_messages[-1] if activity.last_messages else None
        if last is not None and last.get("role") == "user":
            info["in_model_call_seconds"] = round(now - float(last.get("timestamp") or now), 1)
        elif last_tool is not None and not tool_finished:
            info["running_tool"] = last_tool["name"]
    elif view.last_response:
        info["last_response"] = _excerpt(view.last_response)
    return info


def _last_tool(messages: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, bool]:
    answered: set[str] = set()
    for message in reversed(messages):
        for block in reversed(message.get("content") or []):
            if not isinstance(block, dict):
                continue
            if "toolResult" in block:
                answered.add(str(block["toolResult"].get("toolUseId")))
            elif "toolUse" in block:
                use = block["toolUse"]
                tool = {
                    "name": use.get("name"),
                    "input": _excerpt(json.dumps(use.get("input"), sort_keys=True, default=str)),
                    "at": float(message.get("timestamp") or 0),
                }
                return tool, str(use.get("toolUseId")) in answered
    return None, False


def render(info: dict[str, Any], indent: str) -> list[str]:
    head = (
        f"{indent}- {info['id']}: {info['status']}, {info['turns']} turn(s), "
        f"{info['tool_iterations']} tool iteration(s), {info['tokens']:,} tokens"
    )
    if info["pending_messages"]:
        head += f", {info['pending_messages']} message(s) waiting"
    lines = [head]
    if info.get("stuck"):
        lines.append(f"{indent}    LOOKS STUCK: {info['stuck_reason']} (the watchdog restarts stuck turns)")
    last_state = "last state: " if info.get("stuck") else ""
    if "in_model_call_seconds" in info:
        lines.append(f"{indent}    {last_state}in a model call for {_age(info['in_model_call_seconds'])}")
    if "running_tool" in info:
        lines.append(f"{indent}    {last_state}running tool {info['running_tool']}")
    tool = info.get("last_tool")
    if tool:
        age = f"{_age(tool['age_seconds'])} ago" if tool["age_seconds"] is not None else ""
        state = "finished" if tool["finished"] else "no result yet"
        lines.append(f"{indent}    last tool: {tool['name']} {tool['input']} {age} ({state})")
    if info.get("last_response"):
        lines.append(f"{indent}    last answer: {info['last_response']}")
    return lines


class TaskStatus(Tool):
    name = "task_status"
    description = (
        "Show the status of your child tasks (and their children): idle or running, turns, tokens, "
        "the last tool each used, whether it is waiting on the model or looks stuck."
    )
    Input = TaskStatusInput

    def run(self, ctx: ToolContext, args: TaskStatusInput) -> str:  # type: ignore[override]
        top = resolve_descendant(ctx, args.task) if args.task else ctx.task_id
        nodes = ctx.store.descendants(top, max_levels=args.levels, limit=STATUS_MAX_TASKS + 1)
        if not nodes:
            return f"{top} has no child tasks."
        shown = nodes[:STATUS_MAX_TASKS]
        activities = storeview.read_activity(ctx.store, [node.id for node in shown])
        now = time.time()
        infos: dict[str, dict[str, Any]] = {}
        for node, activity in zip(shown, activities, strict=True):
            if activity is not None:
                infos[node.id] = describe(activity, now)
        running = sum(1 for info in infos.values() if info["status"] == "running")
        stuck = sum(1 for info in infos.values() if info.get("stuck"))
        tokens = sum(info["tokens"] for info in infos.values())
        lines = [
            f"Task tree under {top}: {len(infos)} task(s) shown, {running} running, {stuck} looking stuck, "
            f"{tokens:,} tokens used by them."
        ]
        by_parent: dict[str, list[str]] = {}
        for node in shown:
            by_parent.setdefault(node.parent, []).append(node.id)

        def walk(task_id: str, depth: int) -> None:
            for child in by_parent.get(task_id, []):
                if child in infos:
                    lines.extend(render(infos[child], "  " * depth))
                else:
                    lines.append(f"{'  ' * depth}- {child}: (record missing)")
                walk(child, depth + 1)

        walk(top, 0)
        if len(nodes) > len(shown):
            lines.append(
                f"[... more tasks not shown (at most {STATUS_MAX_TASKS}); ask about one child with task=...]"
            )
        return "\n".join(lines)
