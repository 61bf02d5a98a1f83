"""A2A v1.0 (issue 31, docs/a2a.md): the pure half. An Agent with ``spec.a2a`` is an A2A agent at
``/a2a/<namespace>/<agent>`` of the operator's inbound endpoint; this module builds its Agent Card and the A2A Task
of an AgentTask, maps phases to A2A states and shapes JSON-RPC answers. No I/O.

The mapping: an A2A task is an AgentTask, and its context is the same AgentTask (a conversation: UniCore's task
continues across turns), so ``taskId`` and ``contextId`` are both the AgentTask's name. Phases: Pending ->
SUBMITTED; Running, Waiting, WaitingForJobs -> WORKING; WaitingForInput, WaitingForApproval -> INPUT_REQUIRED (the
question, or the call waiting for approval, in ``status.message``); Idle, Archived -> COMPLETED; Failed -> FAILED;
Suspended -> CANCELED (``CancelTask`` suspends the task). A message to a COMPLETED task continues it (a new turn),
as ``kubectl agenttask send`` does.

The wire format is A2A 1.0's ProtoJSON as the ``a2a-sdk`` client reads it (camelCase, ``TASK_STATE_*`` and
``ROLE_*`` names, results wrapped as ``{"task": ...}``, ``{"artifactUpdate": ...}``, ``{"statusUpdate": ...}``).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from typing import Any

PROTOCOL_VERSION = "1.0"
ANSWER_ARTIFACT = "answer"

STATES = {
    "Pending": "TASK_STATE_SUBMITTED", "": "TASK_STATE_SUBMITTED",
    "Running": "TASK_STATE_WORKING", "Waiting": "TASK_STATE_WORKING", "WaitingForJobs": "TASK_STATE_WORKING",
    "WaitingForInput": "TASK_STATE_INPUT_REQUIRED", "WaitingForApproval": "TASK_STATE_INPUT_REQUIRED",
    "Idle": "TASK_STATE_COMPLETED", "Archived": "TASK_STATE_COMPLETED",
    "Failed": "TASK_STATE_FAILED", "Suspended": "TASK_STATE_CANCELED",
}
FINAL_STATES = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                          "TASK_STATE_INPUT_REQUIRED"})  # a send answers, and a stream ends, at one of these

# JSON-RPC errors (A2A 1.0's codes)
TASK_NOT_FOUND, TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION = -32001, -32002, -32004
INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL, PARSE_ERROR = -32600, -32601, -32602, -32603, -32700


def state_of(phase: str) -> str:
    return STATES.get(phase, "TASK_STATE_WORKING")


def now_stamp() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def agent_card(namespace: str, agent: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    """The Agent Card of Agent ``agent`` (its object) served under ``base_url`` (``.../a2a/<ns>/<agent>``)."""
    name = str(agent["metadata"]["name"])
    spec = agent.get("spec") or {}
    a2a = spec.get("a2a") or {}
    system = str(spec.get("systemPrompt") or "").strip().splitlines()
    description = str(a2a.get("description") or (system[0] if system else f"UniCore agent {namespace}/{name}"))
    skills = [{"id": str(skill.get("id")), "name": str(skill.get("name") or skill.get("id")),
               "description": str(skill.get("description") or ""), "tags": list(skill.get("tags") or [])}
              for skill in a2a.get("skills") or []] or [
        {"id": name, "name": name, "description": description, "tags": ["unicore"]}]
    return {
        "name": name,
        "description": description,
        "version": str(agent["metadata"].get("generation") or 1),
        "supportedInterfaces": [{"url": base_url, "protocolBinding": "JSONRPC", "protocolVersion": PROTOCOL_VERSION}],
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
        "securitySchemes": {"kubernetes": {"httpAuthSecurityScheme": {
            "scheme": "Bearer", "description": "A Kubernetes token of the caller (TokenReview); RBAC decides"}}},
        "securityRequirements": [{"schemes": {"kubernetes": {"list": []}}}],
    }


def text_of(parts: Iterable[Mapping[str, Any]]) -> str:
    """The text of an A2A message's parts (text parts; data parts as JSON)."""
    texts = []
    for part in parts:
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif "data" in part:
            texts.append(json.dumps(part["data"], ensure_ascii=False, sort_keys=True))
    return "\n".join(text for text in texts if text)


def message(task: str, role: str, text: str, message_id: str) -> dict[str, Any]:
    return {"messageId": message_id, "role": role, "parts": [{"text": text}], "taskId": task, "contextId": task}


def a2a_task(task: str, phase: str, *, answer: str, question: str = "", history: list[dict[str, Any]] | None = None,
             namespace: str = "") -> dict[str, Any]:
    """The A2A Task of AgentTask ``task`` in ``phase``: its answer as the ``answer`` artifact, a question (or the
    call waiting for approval) as the status message of INPUT_REQUIRED."""
    state = state_of(phase)
    status: dict[str, Any] = {"state": state, "timestamp": now_stamp()}
    if state == "TASK_STATE_INPUT_REQUIRED" and question:
        status["message"] = message(task, "ROLE_AGENT", question, f"{task}-question")
    body: dict[str, Any] = {"id": task, "contextId": task, "status": status,
                            "metadata": {"unicore": {"task": f"{namespace}/{task}", "phase": phase}}}
    if answer:
        body["artifacts"] = [{"artifactId": ANSWER_ARTIFACT, "name": ANSWER_ARTIFACT, "parts": [{"text": answer}]}]
    if history is not None:
        body["history"] = history
    return body


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


def artifact_update(task: str, text: str) -> dict[str, Any]:
    return {"artifactUpdate": {"taskId": task, "contextId": task, "append": True, "lastChunk": False,
                               "artifact": {"artifactId": ANSWER_ARTIFACT, "parts": [{"text": text}]}}}


def status_update(task: str, status: Mapping[str, Any]) -> dict[str, Any]:
    return {"statusUpdate": {"taskId": task, "contextId": task, "status": dict(status)}}


__all__ = ["ANSWER_ARTIFACT", "FINAL_STATES", "PROTOCOL_VERSION", "STATES", "a2a_task", "agent_card",
           "artifact_update", "error", "message", "result", "state_of", "status_update", "text_of"]
