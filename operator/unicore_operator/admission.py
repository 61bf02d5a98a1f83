"""Admission of child AgentTasks: the operator's validating webhook, and the same checks in its create handler.

A ValidatingAdmissionPolicy (CEL, in the chart: ``templates/admission.yaml``) refuses what the object alone shows: a
``parentRef`` in another namespace, a child's limits or tools changed after creation, a root task created by the turn
pods' ServiceAccount. What needs a lookup it cannot do (a VAP reads no other object, and evaluates each ``paramRef``
match on its own, so it cannot even say that a parent exists) is this webhook's: the API server sends every CREATE of
an AgentTask with ``spec.parentRef`` (the chart's ValidatingWebhookConfiguration, ``failurePolicy: Fail``, so an
unreachable operator refuses children and never roots) to ``POST /validate-agenttask`` on UNICORE_WEBHOOK_PORT (TLS,
UNICORE_WEBHOOK_CERT_DIR/tls.crt and tls.key, reloaded when they change). Only the API server may call it
(``apiserver_auth``, as the task API: its client certificate; UNICORE_WEBHOOK_CLIENT_AUTH=none accepts any client):
a review's answer says whether another namespace's tasks exist and what they allow. It refuses a child when

- its parent does not exist in its own namespace (the operator's index, else a GET), is being deleted, or is not
  initialised within ``PARENT_WAIT_SECONDS``;
- the AgentTask chain above its parent cannot vouch for it (``parent_view``: a missing ancestor, a cycle, an
  ancestor that does not narrow its own parent);
- ``lineage.check_child`` finds it widens its parent's limits or tools;
- the parent's ``maxChildren`` or the root's ``maxDescendants`` are used up (``SpawnSlots.room``: read only; the
  webhook has no side effects, so a dry run and a review the API server later drops change nothing).

The parent's settings and its tree's root come from the API server (``effective_parent``: the AgentTask chain and
the Agents, ``parent_view``), never from the parent's Redis record, which the namespace's own Redis user, held by its
turn pods, may write; the record only has to exist (the parent is initialised). The create handler runs
the same checks (``vet_new_child``) and then reserves the child's slots atomically in the tree of the chain's root,
so a child that reached the API server some other way (no webhook installed, or two creates racing past the
read-only count) is marked Failed and never runs; its record is built over the same view
(``parent_view.create_record``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from unicore.api.spec import AgentTaskSpec, SpecInvalid, parse_spec, task_spec_of
from unicore.errors import ConfigError, LimitExceeded
from unicore.launch.local_spawner import reserve_child_slots
from unicore.store.slots import SpawnSlots
from unicore.store.task_views import TaskView

from unicore_operator import agent_checks, lineage, names, parent_view
from unicore_operator.apiserver_auth import (
    CERT_FILE,
    KEY_FILE,
    REFRESH_SECONDS,
    Authentication,
    authentication,
    refresh,
    startup_problem,
)
from unicore_operator.context import OperatorContext
from unicore_operator.kube import KubeClients
from unicore_operator.log import logger
from unicore_operator.settings import OperatorSettings

__all__ = ["PATH", "Verdict", "Vetted", "build_app", "effective_parent", "review", "serve", "start_webhook",
           "vet_new_child", "webhook_problem"]

PATH = "/validate-agenttask"
PARENT_WAIT_SECONDS = 5.0  # a parent created a moment before its child (one `kubectl apply` of both)
READY_WAIT_SECONDS = 5.0  # a review that arrives while the operator starts
CONTEXT_KEY: web.AppKey[OperatorContext] = web.AppKey("unicore_admission_context", OperatorContext)
AUTH_KEY: web.AppKey[Authentication] = web.AppKey("unicore_admission_auth", Authentication)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    message: str = ""


ALLOW = Verdict(True)


async def parent_object(ctx: OperatorContext, namespace: str, name: str) -> dict[str, Any] | None:
    """The parent AgentTask: from the index, else (created a moment ago, not in the watch yet) from the API."""
    body = ctx.indexed_task(namespace, name)
    if body is not None:
        return body
    return await asyncio.to_thread(ctx.kube.get_agenttask, namespace, name)


async def parent_initialised(ctx: OperatorContext, parent_id: str, wait: float) -> bool:
    """The parent has a stored record (its create handler ran), waiting up to ``wait`` seconds for it. Only that it
    exists: what it holds, a namespace's own Redis user may write (``effective_parent`` says what the parent is)."""
    deadline = time.monotonic() + wait
    while True:
        if (await ctx.redis.snapshot(parent_id)).exists:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)


async def effective_parent(ctx: OperatorContext, namespace: str, parent_obj: Mapping[str, Any]) -> TaskView:
    """The settings of AgentTask ``parent_obj`` (of ``namespace``) as the API server has them: its chain of
    AgentTasks and the Agents they name (the operator's indexes, else the API), never its Redis record
    (``parent_view``); LineageBroken with one line when that chain cannot vouch for a child."""
    chain = await parent_view.ancestry(namespace, parent_obj, lambda name: parent_object(ctx, namespace, name))
    agents: dict[str, Mapping[str, Any] | None] = {}
    for body in chain:
        ref = task_spec_of(body).agent_ref
        agent = ref.name if ref is not None else None
        if agent is not None and "/" not in agent and agent not in agents:
            agents[agent] = await agent_object(ctx, namespace, agent)
    return parent_view.effective_view(namespace, chain, agents, ctx.settings.default_turn_timeout_seconds)


def _lineage_problems(ctx: OperatorContext, namespace: str, name: str, labels: Mapping[str, str],
                      parsed: AgentTaskSpec, parent_obj: Mapping[str, Any], parent: TaskView) -> list[str]:
    return lineage.check_child(namespace=namespace, name=name, labels=labels, parsed=parsed,
                               parent_obj=parent_obj, parent=parent,
                               default_turn_timeout=ctx.settings.default_turn_timeout_seconds)


@dataclass(frozen=True)
class Vetted:
    """The create handler's check of a new child: ``refusal`` None when it may run (its slots are then reserved),
    else why not; ``parent`` its parent's settings as the API server has them (``effective_parent``), which its
    record is built over (``parent_view.create_record``)."""

    refusal: str | None
    parent: TaskView | None = None


async def vet_new_child(ctx: OperatorContext, namespace: str, name: str, body: Mapping[str, Any],
                        parsed: AgentTaskSpec) -> Vetted:
    """The create handler's check of new child ``namespace/name`` (a refused one goes Failed, nothing is stored, no
    turn runs); its slots are reserved in the tree of its chain's root."""
    ref = parsed.parent_ref
    assert ref is not None
    parent_obj = await parent_object(ctx, namespace, ref.name)
    if parent_obj is None:
        return Vetted(f"parent AgentTask {namespace}/{ref.name} does not exist")
    try:
        parent = await effective_parent(ctx, namespace, parent_obj)
    except parent_view.LineageBroken as exc:
        return Vetted(parent_view.broken(namespace, name, ref.name, exc))
    meta = body.get("metadata") or {}
    problems = _lineage_problems(ctx, namespace, name, meta.get("labels") or {}, parsed, parent_obj, parent)
    if problems:
        return Vetted(lineage.refusal(namespace, name, ref.name, problems), parent)
    if parsed.agent_ref is not None:
        refused = await agent_refusal(ctx, namespace, name, parsed, parent)
        if refused is not None:
            return Vetted(refused, parent)
    child_id = names.task_id(namespace, name)
    try:
        await asyncio.to_thread(reserve_child_slots, ctx.store, parent, child_id)
    except LimitExceeded as exc:
        return Vetted(f"AgentTask {namespace}/{name} does not fit in its tree: {exc}", parent)
    return Vetted(None, parent)


async def agent_object(ctx: OperatorContext, namespace: str, name: str) -> dict[str, Any] | None:
    """The Agent: from the index, else (created a moment ago, not in the watch yet) from the API."""
    body = ctx.indexed_agent(namespace, name)
    if body is not None:
        return body
    return await asyncio.to_thread(ctx.kube.get_agent, namespace, name)


async def agent_refusal(ctx: OperatorContext, namespace: str, name: str, parsed: AgentTaskSpec,
                        parent: TaskView | None) -> str | None:
    """Why AgentTask ``namespace/name`` with ``spec.agentRef`` may not run as its Agent (None: it may)."""
    ref = parsed.agent_ref
    assert ref is not None
    if "/" in ref.name:
        return f"spec.agentRef must name an Agent of the task's own namespace ({namespace})"
    body = await agent_object(ctx, namespace, ref.name)
    problems = agent_checks.agent_task_problems(namespace=namespace, name=name, parsed=parsed, agent_body=body,
                                                parent=parent)
    return agent_checks.refusal(namespace, name, ref.name, problems) if problems else None


async def review(ctx: OperatorContext, request: Mapping[str, Any]) -> Verdict:
    """The verdict on one AdmissionReview ``request`` (a CREATE of an AgentTask)."""
    obj = request.get("object") or {}
    shape = task_spec_of(obj)
    if request.get("operation") != "CREATE" or (shape.parent_ref is None and shape.agent_ref is None):
        return ALLOW  # roots without an agent, and anything the configuration should not have sent
    meta = obj.get("metadata") or {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    name = str(meta.get("name") or request.get("name") or "")
    if not ctx.watches(namespace):
        return Verdict(False, f"this UniCore operator does not watch namespace {namespace}; it cannot vouch for a "
                              "child AgentTask there")
    try:
        parsed = parse_spec(dict(obj.get("spec") or {}))
    except SpecInvalid as exc:
        return Verdict(False, str(exc))
    if parsed.parent_ref is None:  # a root with spec.agentRef
        refused = await agent_refusal(ctx, namespace, name or f"{meta.get('generateName') or ''}generated", parsed,
                                      None)
        return ALLOW if refused is None else Verdict(False, refused)
    parent_name = parsed.parent_ref.name
    if parsed.parent_ref.namespace not in (None, namespace) or "/" in parent_name:
        return Verdict(False, f"spec.parentRef must name an AgentTask in the child's own namespace ({namespace})")
    parent_obj = await parent_object(ctx, namespace, parent_name)
    if parent_obj is None:
        return Verdict(False, f"parent AgentTask {namespace}/{parent_name} does not exist: a child AgentTask "
                              "(spec.parentRef) must name an existing AgentTask in its own namespace")
    if (parent_obj.get("metadata") or {}).get("deletionTimestamp"):
        return Verdict(False, f"parent AgentTask {namespace}/{parent_name} is being deleted")
    parent_id = names.task_id(namespace, parent_name)
    if not await parent_initialised(ctx, parent_id, PARENT_WAIT_SECONDS):
        phase = ((parent_obj.get("status") or {}).get("phase")) or "not initialised"
        return Verdict(False, f"parent AgentTask {namespace}/{parent_name} is not initialised yet ({phase}); "
                              "create the child once the parent has a phase")
    shown = name or str(meta.get("generateName") or "")
    try:
        parent = await effective_parent(ctx, namespace, parent_obj)
    except parent_view.LineageBroken as exc:
        return Verdict(False, parent_view.broken(namespace, shown, parent_name, exc))
    # generateName: the name comes after admission; the checks only need one that is valid
    stand_in = f"{meta.get('generateName') or parent_name + '-'}generated"
    problems = _lineage_problems(ctx, namespace, name or stand_in, meta.get("labels") or {}, parsed, parent_obj,
                                 parent)
    if problems:
        return Verdict(False, lineage.refusal(namespace, shown, parent_name, problems))
    if parsed.agent_ref is not None:
        refused = await agent_refusal(ctx, namespace, name or stand_in, parsed, parent)
        if refused is not None:
            return Verdict(False, refused)
    if name:  # generateName: the name is not known yet; the create handler's reservation counts it
        full = await asyncio.to_thread(
            SpawnSlots(ctx.redis.sync).room, parent_id=parent.id, root_id=parent.root_id,
            child_id=names.task_id(namespace, name), max_children=parent.limits.max_children,
            max_descendants=parent.limits.max_descendants)
        if full:
            return Verdict(False, f"AgentTask {namespace}/{name} does not fit in its tree: {full}")
    return ALLOW


def response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answer (admission.k8s.io/v1)."""
    answer: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        answer["status"] = {"code": 403, "reason": "Forbidden", "message": verdict.message}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}


async def validate(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT_KEY]
    problem = request.app[AUTH_KEY].client_problem(request)
    if problem:  # nothing read, nothing reviewed
        logger.info("admission webhook: refused %s %s from %s: %s", request.method, request.path, request.remote,
                    problem)
        return web.json_response({"error": f"Unauthorized: {problem}"}, status=401)
    try:
        body = await request.json()
        req = body["request"]
        uid = str(req["uid"])
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "not an AdmissionReview"}, status=400)
    try:
        await asyncio.wait_for(ctx.ready.wait(), READY_WAIT_SECONDS)
    except TimeoutError:
        return web.json_response(response(uid, Verdict(False, "the UniCore operator is starting; retry")))
    try:
        verdict = await review(ctx, req)
    except Exception as exc:  # fail closed, with the reason
        logger.exception("admission review of %s failed", (req.get("object") or {}).get("metadata", {}).get("name"))
        verdict = Verdict(False, f"the UniCore operator could not check this child AgentTask: {exc}")
    if not verdict.allowed:
        user = (req.get("userInfo") or {}).get("username", "?")
        logger.info("refused AgentTask %s/%s from %s: %s", req.get("namespace"), req.get("name") or
                    (req.get("object") or {}).get("metadata", {}).get("name"), user, verdict.message)
    return web.json_response(response(uid, verdict))


def build_app(ctx: OperatorContext, auth: Authentication) -> web.Application:
    app = web.Application(client_max_size=4 * 1024 * 1024)
    app[CONTEXT_KEY] = ctx
    app[AUTH_KEY] = auth
    app.router.add_post(PATH, validate)
    return app


async def serve(ctx: OperatorContext, port: int, auth: Authentication, kube: KubeClients | None,
                host: str = "0.0.0.0") -> None:
    """Serve the webhook until cancelled; a renewed certificate (the Secret's files change) is loaded for new
    connections without a restart, and the API server's request-header settings are re-read through ``kube``
    (None: never), every REFRESH_SECONDS."""
    runner = web.AppRunner(build_app(ctx, auth), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=auth.context).start()
        logger.info("admission webhook on https://%s:%d%s (%s)", host, port, PATH,
                    "any client" if auth.config is None else "the API server's client certificate only")
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            await refresh(auth, kube, "admission webhook")
    finally:
        await runner.cleanup()


def webhook_authentication(settings: OperatorSettings, kube: KubeClients) -> Authentication:
    """The webhook's Authentication (UNICORE_WEBHOOK_CLIENT_AUTH); ConfigError saying in one line why it cannot be
    had (no usable certificate; the request-header ConfigMap unreadable or missing)."""
    cert_dir = Path(settings.webhook_cert_dir)
    what = f"the admission webhook (UNICORE_WEBHOOK_PORT={settings.webhook_port})"
    if settings.webhook_client_auth == "apiserver":
        return authentication(cert_dir, kube, what, "UNICORE_WEBHOOK_CERT_DIR")
    try:
        return Authentication(cert_dir, None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{what} has no usable certificate in UNICORE_WEBHOOK_CERT_DIR={cert_dir} ({CERT_FILE}, "
                          f"{KEY_FILE}): {exc}") from exc


def webhook_problem(settings: OperatorSettings) -> str | None:
    """The start-up check (``main``, before Kopf starts) as one line: why the webhook cannot be served."""
    if not settings.webhook_port:
        return None
    return startup_problem(lambda kube: webhook_authentication(settings, kube))


async def start_webhook(ctx: OperatorContext) -> None:
    """Start-up hook (``composition``): serve the webhook when UNICORE_WEBHOOK_PORT is set. A missing or bad
    certificate, or (UNICORE_WEBHOOK_CLIENT_AUTH=apiserver) no readable request-header settings, stops the operator
    at start-up with the reason."""
    if not ctx.settings.webhook_port:
        return
    auth = await asyncio.to_thread(webhook_authentication, ctx.settings, ctx.kube)  # fail now, clearly
    kube = ctx.kube if auth.config is not None else None
    task = asyncio.get_running_loop().create_task(serve(ctx, ctx.settings.webhook_port, auth, kube),
                                                  name="unicore-admission-webhook")
    ctx.background.append(task)
