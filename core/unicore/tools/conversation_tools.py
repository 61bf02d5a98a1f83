"""``post_message``: a participating task posts to its conversation during a turn (issue 33; the rules:
``unicore.conversations``). The post goes to the task's own outbox first (its sender is the task whose outbox it
came from), then into the conversation; other agents get it only when it mentions them (``@name``). A task gets the
tool while it takes part in a conversation (``for_task``)."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from pydantic import BaseModel, Field

from unicore.errors import ToolError
from unicore.log import get_logger
from unicore.store import conversations as store_conversations
from unicore.store.tasks import TaskStore
from unicore.tools.base import Tool, ToolContext

log = get_logger("tools")


class PostMessageInput(BaseModel):
    text: str = Field(min_length=1, description="What to post. Mention a participant as @name to hand it to them.")
    conversation: str | None = Field(
        None, description="The conversation to post to; may be left out when you take part in exactly one.")


class PostMessage(Tool):
    name = "post_message"
    description = (
        "Post a message to a shared conversation you take part in, now, during your turn (your final answer is "
        "posted there anyway when the turn ends). People see every post; another agent gets it only when you "
        "mention it as @name."
    )
    Input = PostMessageInput

    def run(self, ctx: ToolContext, args: PostMessageInput) -> str:  # type: ignore[override]
        joined = store_conversations.task_conversations(ctx.store, ctx.task_id)
        if not joined:
            raise ToolError("you take part in no conversation")
        conversation = args.conversation or (joined[0] if len(joined) == 1 else "")
        if not conversation:
            raise ToolError(f"you take part in several conversations: name one of {', '.join(joined)}")
        if conversation not in joined:
            raise ToolError(f"you do not take part in conversation {conversation!r}; yours: {', '.join(joined)}")
        post_id = f"post:{ctx.task_id}:{ctx.tool_use_id or ctx.result_seq}"
        store_conversations.queue_outbox(ctx.store, ctx.task_id, conversation, post_id, args.text)
        try:
            store_conversations.publish(ctx.store, ctx.task_id)
        except redis.ResponseError as exc:  # a turn pod may not write conversations: the operator publishes it
            log.info("task %s: post %s left for the operator: %s", ctx.task_id, post_id, exc)
            ctx.store.activate(ctx.task_id, "conversation-post")  # the operator reconciles the task: it posts it
        return f"Posted to conversation {conversation}."


def for_task(store: TaskStore, task_id: str, tools: Sequence[Tool]) -> list[Tool]:
    """The conversation tools a task gets on top of ``tools``: ``post_message`` while it takes part in one."""
    if any(tool.name == PostMessage.name for tool in tools):
        return []
    return [PostMessage()] if store_conversations.task_conversations(store, task_id) else []


__all__ = ["PostMessage", "for_task"]
