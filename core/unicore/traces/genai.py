"""The GenAI semantic conventions (schema gen-ai/1.42.0, development status) as UniCore uses them: the one owner of
span names, attribute names and their values. Message content is recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (off by default).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

# operations (gen_ai.operation.name) and span names
INVOKE_AGENT = "invoke_agent"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
MCP_METHOD = "mcp.method.name"
ERROR_TYPE = "error.type"

# UniCore's own attributes
TASK_ID = "unicore.task.id"
TASK_PARENT = "unicore.task.parent"
TURN_NUMBER = "unicore.turn.number"
TURN_EXIT = "unicore.turn.exit_reason"
PURPOSE = "unicore.model_call.purpose"
MESSAGES_DRAINED = "unicore.inbox.drained"
START_KIND = "unicore.turn.start"

# UniCore's own span names (no GenAI operation covers them)
TASK_SPAN = "task"  # a root task's anchor: "task <name>"
QUEUE_WAIT = "queue_wait"  # from the oldest drained message's queuing to the turn's lease
POD_START = "pod_start"  # operator: the Job's pod from created to scheduled to started
INBOX_DRAIN = "inbox_drain"
COMPACTION = "compaction"
SUMMARY = "summary"
REPORT = "report"
HUMAN_WAIT = "human_wait"  # an approval or ask_user question, from asked to answered

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_LIMIT = 16_000  # characters of one content attribute

# gen_ai.provider.name: the conventions' well-known values where one applies
_PROVIDERS = {"bedrock": "aws.bedrock", "openai": "openai", "scripted": "unicore.scripted"}


def provider_name(provider: str) -> str:
    return _PROVIDERS.get(provider, provider or "unknown")


def capture_content(env: Mapping[str, str] | None = None) -> bool:
    """Whether message content goes on spans (opt-in)."""
    return (os.environ if env is None else env).get(CAPTURE_CONTENT, "").strip().lower() == "true"


def content(value: Any) -> str:
    """Content as a span attribute: JSON, cut to ``CONTENT_LIMIT`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + "...(cut)"


def finish_reason(stop_reason: str) -> str:
    """A Bedrock-shaped stop reason as the conventions' finish reason."""
    return {"end_turn": "stop", "tool_use": "tool_call", "max_tokens": "length",
            "content_filtered": "content_filter", "guardrail_intervened": "content_filter"}.get(stop_reason,
                                                                                                stop_reason)
