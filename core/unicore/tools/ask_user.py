"""``ask_user``: the agent asks a person a question; the task waits (no process) until a user message answers it.

The turn never runs this tool: it records the call as a pending question (``state.approvals``, kind ``input``) and
ends. The next user message to the task (``unicore send``, ``kubectl agenttask send``) becomes the call's result.
A task gets the tool when its tool list names it (``unicore run --ask-user``, ``spec.tools``): it is in no default
toolset, because a question from a task nobody watches would wait until someone answers it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from unicore.errors import ToolError
from unicore.tools.base import Tool, ToolContext

ASK_USER_TOOL = "ask_user"
MAX_QUESTION_CHARS = 4000


class AskUser(Tool):
    name = ASK_USER_TOOL
    description = (
        "Ask the user a question and wait for the answer, which comes back as this tool's result. Use it when you "
        "cannot go on without a decision or information only the user has. Ask one clear question."
    )

    class Input(BaseModel):
        model_config = ConfigDict(extra="forbid")
        question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, description="the question to ask")

    Input.__name__ = "AskUserInput"

    def run(self, ctx: ToolContext, args: BaseModel) -> str:
        raise ToolError("ask_user is answered by a person: the turn records the question and waits")
