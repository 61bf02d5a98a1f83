"""``GET`` and ``POST .../agenttasks/<name>/approvals``: the tool calls of a task that wait for a person (approvals of
gated tools, ``ask_user`` questions) and the decisions on them (``unicore.store.approvals``). RBAC: ``get
agenttasks/approvals`` to list, ``create agenttasks/approvals`` to decide (group ``tasks.unicore.dev``; the chart's
user roles grant them next to ``agenttasks/transcript`` and ``agenttasks/messages``).

- GET: ``{"kind": "ApprovalList", "waitingFor": "approval"|"input"|null, "pending": [...], "decided": [...]}``,
  each call ``{callId, kind, tool, input, question, turn, requestedAt, status, decidedBy, reason, decidedAt}``
  (the newest DECIDED_MAX decided calls; ``input`` clipped). ``pending`` lists what a person may still decide: an
  approval past the task's timeout (``unicore_operator.approval_waits.task_timeout``) is not listed (the operator's
  timer denies it);
- POST ``{"callId": optional, "decision": "approve"|"deny", "reason": ""}``: decides that call, or without
  ``callId`` every approval the task waits for. The decider is the user the API server authenticated (a body
  cannot name one). 200 ``{"kind": "ApprovalReceipt", "decided": [...]}``; 404 no such call (or nothing waits and
  nothing was ever decided); 409 ``AlreadyDecided`` (nothing changed: an approved tool runs once however often it
  is approved), 409 ``Expired`` (the approval waited past its timeout: the timeout denies it, nothing changed;
  without ``callId``: every waiting approval did) or a question approved (answer it with a message: ``messages``);
  422 a bad body. Deciding the last pending call wakes the task (``state.approvals.decide`` queues the wake-up and
  activates it).
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from unicore.api.spec import task_spec_of
from unicore.api.turn_numbers import shown_turn
from unicore.errors import AlreadyDecided, DecisionExpired, NoSuchCall, TaskNotFound, UniCoreError
from unicore.store import approvals as state

from unicore_operator import metrics
from unicore_operator.approval_waits import task_timeout
from unicore_operator.task_api import transcript as pages
from unicore_operator.task_api.bodies import json_object
from unicore_operator.task_api.errors import ApiError
from unicore_operator.task_api.service import USER_SENDER_PREFIX, TaskApi, log

APPROVALS = "approvals"  # the subresource
DECIDED_MAX = 100
INPUT_MAX_CHARS = 4096
REASON_MAX_CHARS = 4096
CALL_ID_RE = r"^[^\x00-\x1f\x7f]{1,256}$"
PAST = {"approve": "approved", "deny": "denied"}


class DecisionRequest(BaseModel):
    """Body of ``POST .../agenttasks/<name>/approvals``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    call_id: str | None = Field(None, alias="callId", pattern=CALL_ID_RE,
                                description="the tool call to decide; omitted: every approval the task waits for")
    decision: Literal["approve", "deny"]
    reason: str = Field("", max_length=REASON_MAX_CHARS, description="why; a denied call's error result says it")


def _details(name: str) -> dict[str, str]:
    return {"name": name, "group": "tasks.unicore.dev", "kind": APPROVALS}


def shape(call: state.PendingCall) -> dict[str, Any]:
    """A call as the API answers it (the input as JSON, clipped)."""
    arguments = json.dumps(call.input, ensure_ascii=False, sort_keys=True)
    out: dict[str, Any] = {
        "callId": call.call_id, "kind": call.kind, "tool": call.tool,
        "input": pages.clip_text(arguments, INPUT_MAX_CHARS), "turn": shown_turn(call.turn),
        "requestedAt": call.requested_at, "status": call.status,
    }
    if call.question:
        out["question"] = pages.clip_text(call.question, INPUT_MAX_CHARS)
    if call.decided:
        out.update(decidedBy=call.decided_by, reason=call.reason, decidedAt=call.decided_at)
    return out


def _timeout(api: TaskApi, obj: dict[str, Any], task_id: str) -> float:
    return task_timeout(api.store, task_spec_of(obj), task_id, api.approval_timeout_seconds)


def get_approvals(api: TaskApi, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    obj = api._require_task(namespace, name)
    task_id = f"{namespace}/{name}"
    try:
        found = api.store.approval_calls(task_id)
        waiting = api.store.waiting_for(task_id)
        timeout, now = _timeout(api, obj, task_id), time.time()
    except redis.RedisError as exc:
        raise ApiError(503, f"Redis is unavailable ({exc}); retry", retry_after=1) from None
    pending = [shape(call) for call in found if not call.decided and not state.overdue(call, now, timeout)]
    decided = sorted((call for call in found if call.decided), key=lambda c: (c.decided_at or 0.0, c.call_id))
    return 200, {"kind": "ApprovalList", "task": task_id, "waitingFor": waiting, "pending": pending,
                 "decided": [shape(call) for call in decided[-DECIDED_MAX:]],
                 "decidedTruncated": len(decided) > DECIDED_MAX}


def _request(body: bytes) -> DecisionRequest:
    payload = json_object(body, '{"callId": "<id>", "decision": "approve", "reason": ""}')
    for claimed in ("decidedBy", "by", "sender"):
        if claimed in payload:
            raise ApiError(422, f"invalid decision: {claimed}: not accepted; the decider is the user the Kubernetes "
                                "API server authenticated")
    try:
        return DecisionRequest.model_validate(payload)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise ApiError(422, f"invalid decision: {problems}") from None


def post_decision(api: TaskApi, namespace: str, name: str, body: bytes, *, sender: str) -> tuple[int, dict[str, Any]]:
    """Decide a call (or every pending approval) of the task as ``sender`` (``service.sender_of`` the user)."""
    request = _request(body)
    obj = api._require_task(namespace, name)
    task_id = f"{namespace}/{name}"
    by = sender.removeprefix(USER_SENDER_PREFIX)
    approve = request.decision == "approve"
    try:
        timeout = _timeout(api, obj, task_id)
        decided = sorted(api.store.decide(task_id, request.call_id, approve, by=by, reason=request.reason,
                                          timeout_seconds=timeout),
                         key=lambda call: (call.turn, call.position, call.call_id))  # in call order
        if not decided:  # no call id, and no approval waits
            ever = api.store.approval_calls(task_id)
            if any(call.kind == "approval" for call in ever):
                raise ApiError(409, f"agenttask {task_id} has no tool call waiting for approval: every one was "
                                    "already decided; nothing changed", reason="AlreadyDecided")
            raise ApiError(404, f"agenttask {task_id} has no tool call waiting for approval", details=_details(name))
    except NoSuchCall as exc:
        raise ApiError(404, str(exc), details=_details(name)) from None
    except DecisionExpired as exc:
        raise ApiError(409, str(exc), reason="Expired") from None
    except AlreadyDecided as exc:
        raise ApiError(409, str(exc), reason="AlreadyDecided") from None
    except TaskNotFound:
        raise ApiError(503, f"agenttask {task_id} exists but the operator has not initialised it yet; retry",
                       reason="TaskNotReady", retry_after=1) from None
    except UniCoreError as exc:  # approving a question: it is answered with a message
        raise ApiError(409, str(exc)) from None
    except redis.RedisError as exc:
        raise ApiError(503, f"Redis is unavailable ({exc}); retry (a decision made already answers 409)",
                       retry_after=1) from None
    log.info("%s %s tool call(s) of %s: %s", by, PAST[request.decision], task_id,
             ", ".join(call.call_id for call in decided))
    metrics.approval_decided(PAST[request.decision], len(decided))
    if api.on_decided is not None:
        api.on_decided(namespace, name, decided, by, request.reason)
    return 200, {"kind": "ApprovalReceipt", "task": task_id, "decision": request.decision,
                 "decided": [shape(call) for call in decided]}


__all__ = ["APPROVALS", "DecisionRequest", "get_approvals", "post_decision", "shape"]
