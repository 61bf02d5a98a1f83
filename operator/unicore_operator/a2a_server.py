"""A2A v1.0 on the operator's inbound endpoint (issue 31, docs/a2a.md; ``a2a`` is the pure half).

Routes (beside ``/triggers``, on ``UNICORE_TRIGGER_PORT``), for each Agent with ``spec.a2a``:

- ``GET /a2a/<namespace>/<agent>/.well-known/agent-card.json``: its Agent Card (public, as A2A cards are);
- ``POST /a2a/<namespace>/<agent>``: JSON-RPC ``SendMessage``, ``SendStreamingMessage`` (SSE), ``GetTask``,
  ``CancelTask``.

Every call but the card needs ``Authorization: Bearer <a Kubernetes token>``: a TokenReview says who it is, and a
SubjectAccessReview whether that user may do it, as the task API asks (``task_api.authz``): a new task needs
``create agenttasks``, a message to one ``create agenttasks/messages`` (group tasks.unicore.dev), reading one ``get
agenttasks/transcript``, cancelling one ``patch agenttasks``. A task started here is ``a2a-<random>``, has the Agent
in ``spec.agentRef`` and the caller in the annotation ``unicore.dev/a2a-caller``.

A send waits until the turn it started settles (the Redis record idle, the answer stored, the AgentTask's status
caught up), at most ``SEND_WAIT_SECONDS``; a stream sends the Task, then the turn's text as it is written (the live
token stream, ``store.token_stream``) as ``artifactUpdate`` chunks, then the final ``statusUpdate``, and closes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web
from unicore.api.schema import InboxMessage, a2a_message_id
from unicore.errors import TaskNotFound
from unicore.store.token_stream import current_call, live_state, read_after
from unicore.turn.history import message_text

from unicore_operator import a2a, events, metrics, names
from unicore_operator.context import OperatorContext
from unicore_operator.kube import agenttask_path
from unicore_operator.log import logger
from unicore_operator.task_api.authn import UserInfo
from unicore_operator.task_api.authz import Attributes, Authorizer

SEND_WAIT_SECONDS = 600.0
POLL_SECONDS = 0.2
TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
USER_CACHE_SECONDS = 10.0
SETTLED_PHASES = frozenset({"Idle", "Failed", "WaitingForInput", "WaitingForApproval", "Suspended", "Archived"})


class Denied(Exception):  # noqa: N818 - an HTTP answer before JSON-RPC
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class A2AService:
    def __init__(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.authorizer = Authorizer(ctx.kube.core.create)
        self.users: dict[str, tuple[float, UserInfo]] = {}

    # ------------------------------------------------------------------------------------------- who may do what
    async def user(self, request: web.Request) -> UserInfo:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Denied(401, "send Authorization: Bearer <a Kubernetes token>")
        key = hashlib.sha256(token.strip().encode()).hexdigest()
        cached = self.users.get(key)
        if cached is not None and time.monotonic() - cached[0] < USER_CACHE_SECONDS:
            return cached[1]
        review = await asyncio.to_thread(self.ctx.kube.core.create, TOKEN_REVIEW_PATH, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token.strip()}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            raise Denied(401, "the token was not accepted by the Kubernetes API server")
        info = status.get("user") or {}
        user = UserInfo(name=str(info.get("username") or ""), uid=str(info.get("uid") or ""),
                        groups=tuple(info.get("groups") or ()),
                        extra=tuple(sorted((k, tuple(v)) for k, v in (info.get("extra") or {}).items())))
        self.users[key] = (time.monotonic(), user)
        return user

    async def allow(self, user: UserInfo, verb: str, namespace: str, resource: str, *, name: str = "",
                    subresource: str = "") -> None:
        group = "tasks.unicore.dev" if subresource else names.GROUP
        attrs = Attributes(verb=verb, namespace=namespace, name=name, subresource=subresource, group=group,
                           version=names.VERSION, resource=resource)
        decision = await asyncio.to_thread(self.authorizer.check, user, attrs)
        if not decision.allowed:
            raise Denied(403, f"{user.name} may not {attrs.describe()}")

    # ------------------------------------------------------------------------------------------------- lookups
    def agent(self, namespace: str, name: str) -> dict[str, Any]:
        body = self.ctx.indexed_agent(namespace, name) if self.ctx.watches(namespace) else None
        if body is None or not (body.get("spec") or {}).get("a2a"):
            raise Denied(404, f"no A2A agent {namespace}/{name} (an Agent with spec.a2a)")
        return body

    def task(self, namespace: str, agent: str, task: str) -> dict[str, Any]:
        body = self.ctx.indexed_task(namespace, task) if task else None
        ref = ((body or {}).get("spec") or {}).get("agentRef") or {}
        if body is None or ref.get("name") != agent:
            raise RpcError(a2a.TASK_NOT_FOUND, f"no task {task!r} of agent {agent}")
        return body

    def view(self, namespace: str, task: str, *, history: int | None = None) -> dict[str, Any]:
        """The A2A Task of AgentTask ``task`` now."""
        body = self.ctx.indexed_task(namespace, task) or {}
        status = body.get("status") or {}
        phase = str(status.get("phase") or "")
        task_id = names.task_id(namespace, task)
        try:
            messages = self.ctx.store.messages(task_id)
        except TaskNotFound:
            messages = []
        answer = next((message_text(m.content) for m in reversed(messages) if m.role == "assistant"
                       and message_text(m.content)), "")
        waiting = status.get("waitingFor") or {}
        question = str(waiting.get("question") or (f"approve or deny the call of {waiting.get('tool')}"
                                                   if waiting.get("kind") == "approval" else ""))
        shown = None
        if history is not None:
            kept = [m for m in messages if m.role in ("user", "assistant") and message_text(m.content)]
            shown = [a2a.message(task, "ROLE_USER" if m.role == "user" else "ROLE_AGENT", message_text(m.content),
                                 f"{task}-{m.seq}") for m in kept[-history:]] if history else []
        return a2a.a2a_task(task, phase, answer=answer, question=question, history=shown, namespace=namespace)

    def settled(self, namespace: str, task: str, before: int) -> bool:
        """Whether the turn that a message sent when the task had ``before`` stored messages started has ended and
        the AgentTask's status says so."""
        task_id = names.task_id(namespace, task)
        state = live_state(self.ctx.store, task_id)
        if state.status is None or state.busy or state.messages <= before:
            return False
        body = self.ctx.indexed_task(namespace, task) or {}
        status = body.get("status") or {}
        try:
            turns = self.ctx.store.get_task(task_id).turns
        except TaskNotFound:
            return False
        return str(status.get("phase") or "") in SETTLED_PHASES and int(status.get("turns") or 0) == turns

    # ----------------------------------------------------------------------------------------------- methods
    async def start(self, user: UserInfo, namespace: str, agent: str, params: Mapping[str, Any],
                    agent_body: Mapping[str, Any]) -> tuple[str, int]:
        """Send ``params.message``: a new task, or a message to the task its taskId/contextId names; (the task,
        its stored messages before)."""
        msg = params.get("message") or {}
        text = a2a.text_of(msg.get("parts") or [])
        if not text.strip():
            raise RpcError(a2a.INVALID_PARAMS, "the message has no text part")
        target = str(msg.get("taskId") or msg.get("contextId") or "")
        message_id = str(msg.get("messageId") or uuid.uuid4().hex)[:200]
        if target:
            self.task(namespace, agent, target)
            await self.allow(user, "create", namespace, "agenttasks", name=target, subresource="messages")
            task_id = names.task_id(namespace, target)
            before = live_state(self.ctx.store, task_id).messages
            inbox = InboxMessage(id=a2a_message_id(message_id), type="user", content=text,
                                 sender=f"a2a:{user.name}")
            await asyncio.to_thread(self.ctx.store.queue_message, task_id, inbox)
            await asyncio.to_thread(self.ctx.store.activate, task_id, "a2a")
            return target, before
        await self.allow(user, "create", namespace, "agenttasks")
        name = f"a2a-{uuid.uuid4().hex[:10]}"
        spec: dict[str, Any] = {"agentRef": {"name": agent}, "prompt": text}
        script = ((agent_body.get("spec") or {}).get("a2a") or {}).get("script")
        if script:
            spec["script"] = script
        body = {"apiVersion": names.API_VERSION, "kind": names.KIND,
                "metadata": {"name": name, "namespace": namespace,
                             "annotations": {names.A2A_CALLER_ANNOTATION: user.name[:250]},
                             "labels": {names.A2A_AGENT_LABEL: names.label_value(agent)}},
                "spec": spec}
        await asyncio.to_thread(self.ctx.kube.core.create, agenttask_path(namespace), body)
        logger.info("A2A: %s started %s/%s (agent %s)", user.name, namespace, name, agent)
        agent_object = {"apiVersion": names.API_VERSION, "kind": names.AGENT_KIND, "metadata": agent_body["metadata"]}
        events.post(self.ctx, agent_object, events.NORMAL, "Started",
                    f"A2A caller {user.name[:200]} started AgentTask {name}")
        return name, 0

    async def wait(self, namespace: str, task: str, before: int, deadline: float) -> None:
        while not self.settled(namespace, task, before) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)

    async def stream(self, namespace: str, task: str, before: int, deadline: float) -> AsyncIterator[dict[str, Any]]:
        """The results of a stream: the Task, the turn's text chunks, the final status."""
        task_id = names.task_id(namespace, task)
        _, cursor = await asyncio.to_thread(current_call, self.ctx.store, task_id)
        yield {"task": self.view(namespace, task)}
        while time.monotonic() < deadline:
            entries = await asyncio.to_thread(read_after, self.ctx.store, task_id, cursor, wait_seconds=0.5)
            for entry in entries:
                cursor = entry.id
                if entry.kind == "text" and entry.text:
                    yield a2a.artifact_update(task, entry.text)
            if not entries and self.settled(namespace, task, before):
                break
        yield a2a.status_update(task, self.view(namespace, task)["status"])

    async def cancel(self, user: UserInfo, namespace: str, agent: str, task: str) -> dict[str, Any]:
        self.task(namespace, agent, task)
        await self.allow(user, "patch", namespace, "agenttasks", name=task)
        view = self.view(namespace, task)
        if view["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"):
            raise RpcError(a2a.TASK_NOT_CANCELABLE, f"task {task} is {view['status']['state']}: nothing to cancel")
        await asyncio.to_thread(self.ctx.kube.core.merge_patch, agenttask_path(namespace, task),
                                {"spec": {"suspend": True}})
        view["status"] = {"state": "TASK_STATE_CANCELED", "timestamp": a2a.now_stamp()}
        return view


A2A_KEY: web.AppKey[A2AService] = web.AppKey("unicore_a2a", A2AService)


def _base_url(request: web.Request, namespace: str, agent: str) -> str:
    public = request.app[A2A_KEY].ctx.settings.public_url.rstrip("/")
    if not public:
        scheme = request.headers.get("X-Forwarded-Proto") or request.scheme
        host = request.headers.get("X-Forwarded-Host") or request.host
        public = f"{scheme}://{host}"
    return f"{public}/a2a/{namespace}/{agent}"


async def card(request: web.Request) -> web.Response:
    service = request.app[A2A_KEY]
    namespace, agent = request.match_info["namespace"], request.match_info["agent"]
    try:
        body = service.agent(namespace, agent)
    except Denied as exc:
        return web.json_response({"error": exc.message}, status=exc.status)
    return web.json_response(a2a.agent_card(namespace, body, _base_url(request, namespace, agent)))


async def _rpc(request: web.Request, note: dict[str, str]) -> web.StreamResponse:
    service = request.app[A2A_KEY]
    namespace, agent = request.match_info["namespace"], request.match_info["agent"]
    request_id: Any = None
    try:
        agent_body = service.agent(namespace, agent)
        user = await service.user(request)
        try:
            call = json.loads(await request.text())
        except ValueError:
            note["outcome"] = "error"
            return web.json_response(a2a.error(None, a2a.PARSE_ERROR, "the body is not JSON"))
        if not isinstance(call, dict) or not isinstance(call.get("method"), str):
            note["outcome"] = "error"
            return web.json_response(a2a.error(None, a2a.INVALID_REQUEST, "not a JSON-RPC request"))
        request_id, method, params = call.get("id"), call["method"], call.get("params") or {}
        note["method"] = method
        deadline = time.monotonic() + SEND_WAIT_SECONDS
        if method == "SendMessage":
            task, before = await service.start(user, namespace, agent, params, agent_body)
            if not (params.get("configuration") or {}).get("returnImmediately"):
                await service.wait(namespace, task, before, deadline)
            return web.json_response(a2a.result(request_id, {"task": service.view(namespace, task)}))
        if method == "SendStreamingMessage":
            task, before = await service.start(user, namespace, agent, params, agent_body)
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await response.prepare(request)
            async for value in service.stream(namespace, task, before, deadline):
                await response.write(f"data: {json.dumps(a2a.result(request_id, value))}\n\n".encode())
            await response.write_eof()
            return response
        if method == "GetTask":
            task = str(params.get("id") or "")
            service.task(namespace, agent, task)
            await service.allow(user, "get", namespace, "agenttasks", name=task, subresource="transcript")
            length = params.get("historyLength")
            return web.json_response(a2a.result(request_id, service.view(
                namespace, task, history=int(length) if isinstance(length, int) else None)))
        if method == "CancelTask":
            task = str(params.get("id") or "")
            return web.json_response(a2a.result(request_id, await service.cancel(user, namespace, agent, task)))
        raise RpcError(a2a.METHOD_NOT_FOUND, f"method {method!r} is not served (SendMessage, SendStreamingMessage, "
                                             "GetTask, CancelTask)")
    except Denied as exc:
        note["outcome"] = "refused"
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return web.json_response({"error": exc.message}, status=exc.status, headers=headers)
    except RpcError as exc:
        note["outcome"] = "error"
        return web.json_response(a2a.error(request_id, exc.code, exc.message))


async def rpc(request: web.Request) -> web.StreamResponse:
    note = {"method": "other", "outcome": "ok"}
    response = await _rpc(request, note)
    metrics.a2a_request(note["method"], note["outcome"])
    return response


def add_routes(app: web.Application, ctx: OperatorContext) -> None:
    app[A2A_KEY] = A2AService(ctx)
    app.router.add_get("/a2a/{namespace}/{agent}/.well-known/agent-card.json", card)
    app.router.add_post("/a2a/{namespace}/{agent}", rpc)


__all__ = ["A2AService", "add_routes", "card", "rpc"]
