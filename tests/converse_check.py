"""What Bedrock Converse would reject in a request's messages: the tests' check that a built request is valid."""

from __future__ import annotations

from collections.abc import Sequence

from unicore.turn.history import ConverseMessage, tool_use_ids


def converse_problems(messages: Sequence[ConverseMessage]) -> list[str]:
    """What Bedrock Converse would reject in ``messages`` (an empty list: nothing)."""
    problems: list[str] = []
    if not messages:
        return ["no messages"]
    if messages[0]["role"] != "user":
        problems.append("first message is not from the user")
    for i, message in enumerate(messages):
        if i and message["role"] == messages[i - 1]["role"]:
            problems.append(f"messages {i - 1} and {i} are both {message['role']}")
        if not message["content"]:
            problems.append(f"message {i} is empty")
        if message["role"] == "assistant":
            wanted = tool_use_ids(message["content"])
            if wanted:
                following = messages[i + 1]["content"] if i + 1 < len(messages) else []
                got = [b["toolResult"]["toolUseId"] for b in following if "toolResult" in b]
                if sorted(got) != sorted(wanted):
                    problems.append(f"tool calls {wanted} of message {i} answered by {got}")
        else:
            answered = [b["toolResult"]["toolUseId"] for b in message["content"] if "toolResult" in b]
            asked = tool_use_ids(messages[i - 1]["content"]) if i else []
            if sorted(answered) != sorted(asked) and answered:
                problems.append(f"results {answered} of message {i} do not match the calls {asked}")
    return problems
