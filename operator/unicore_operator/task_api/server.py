"""The task API as a Kubernetes aggregated API: the operator's HTTPS server behind the APIService
``v1alpha1.tasks.unicore.dev`` (the pattern of metrics-server and of KubeVirt's subresources).

Users call ``/apis/tasks.unicore.dev/v1alpha1/namespaces/<ns>/agenttasks/<name>/<subresource>`` on the Kubernetes API
server with their own credentials. The API server authenticates them, checks RBAC, and proxies the request here
(UNICORE_TASK_API_PORT, TLS with tls.crt and tls.key from UNICORE_TASK_API_CERT_DIR, reloaded when they change),
presenting its front-proxy client certificate and the user in the ``X-Remote-*`` headers. For every task request this
server

1. authenticates the caller (``authn``): the client certificate must be signed by the request-header CA and carry
   an allowed name, both read from ``kube-system/extension-apiserver-authentication`` (re-read every
   ``REFRESH_SECONDS``); only then are the identity headers believed. Anything else gets 401 and no task data;
2. refuses a POST whose body is not ``application/json`` (415, ``bodies``), then authorizes the user with a
   SubjectAccessReview (``authz``) on the route's subresource in the task's namespace;
3. reads the body whole up to its cap (``read_body``: 413, 411) and answers from the TaskApi (``service``), with the
   authenticated user as the stored sender of a message.

It also serves the discovery documents the aggregator reads (``/apis``, ``/apis/tasks.unicore.dev``,
``/apis/tasks.unicore.dev/v1alpha1``), empty OpenAPI documents and ``/healthz``, to anyone: they hold no task data.
The plain HTTP port (UNICORE_HTTP_PORT) serves only health and metrics.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web
from unicore.errors import ConfigError

from unicore_operator.apiserver_auth import REFRESH_SECONDS, Authentication, authentication, refresh, startup_problem
from unicore_operator.approval_waits import decision_events
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import first
from unicore_operator.kube import KubeClients
from unicore_operator.log import logger
from unicore_operator.settings import OperatorSettings
from unicore_operator.task_api import conversation_routes as conv
from unicore_operator.task_api.authz import Authorizer
from unicore_operator.task_api.bodies import BODY_METHODS, MAX_BODY_BYTES, declared_length, media_type_problem, over_cap
from unicore_operator.task_api.errors import ApiError, task_not_found
from unicore_operator.task_api.lookup import LookupUnavailable, TaskLookup
from unicore_operator.task_api.routes import (
    GROUP,
    ApiResponse,
    discovery,
    dispatch,
    error_response,
    openapi,
    resolve,
)
from unicore_operator.task_api.service import TaskApi, sender_of
from unicore_operator.task_api.stream import MAX_WAITERS, STREAM

__all__ = ["Authentication", "build_app", "context_lookup", "serve", "start_task_api"]

log = logger.getChild("task_api")
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")


def context_lookup(ctx: OperatorContext) -> TaskLookup:
    """Does the AgentTask exist: the operator's Kopf index, else one GET; only in the namespaces it watches."""

    def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        if not ctx.watches(namespace):
            raise task_not_found(namespace, name, f"namespace {namespace} is not watched by this operator")
        if ctx.agenttasks is not None:
            found = first(ctx.agenttasks.get((namespace, name)))
            if found is not None:
                return dict(found)
        try:
            return ctx.kube.get_agenttask(namespace, name)
        except Exception as exc:
            raise LookupUnavailable(f"cannot read agenttask {namespace}/{name}: {exc}") from exc

    return lookup


STATE_KEY: web.AppKey[dict[str, Any]] = web.AppKey("unicore_task_api", dict)


def _to_web(response: ApiResponse) -> web.Response:
    return web.Response(status=response.status, body=response.encoded(), content_type=response.content_type,
                        headers={"Cache-Control": "no-store", **response.headers})


def _status(code: int, message: str, **details: Any) -> web.Response:
    return _to_web(error_response(ApiError(code, message, details=details or None)))


async def read_body(request: web.Request, cap: int = MAX_BODY_BYTES) -> bytes:
    """The whole body (``bodies.declared_length``): exactly its Content-Length, or a chunked body to its end; ApiError
    413 past ``cap`` (a declared length before reading any of it), 411 without a length, 400 when the client stops
    sending early."""
    length = declared_length(request.headers.get(hdrs.CONTENT_LENGTH), request.headers.get(hdrs.TRANSFER_ENCODING),
                             cap)
    try:
        if length is not None:
            return await request.content.readexactly(length)
        chunks, size = [], 0
        while chunk := await request.content.readany():  # aiohttp decodes the chunked framing
            size += len(chunk)
            if size > cap:
                raise over_cap(cap)
            chunks.append(chunk)
        return b"".join(chunks)
    except asyncio.IncompleteReadError as exc:
        raise ApiError(400, f"the request body ended after {len(exc.partial)} of its {length} bytes") from None


async def handle(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    auth: Authentication = state["auth"]
    path = request.path
    if path in HEALTH_PATHS:
        return web.json_response({"status": "ok"})
    document = discovery(path) or openapi(path)
    if document is not None:
        if request.method not in ("GET", "HEAD"):
            return _status(405, f"{request.method} is not allowed on {path} (use GET)")
        return web.json_response(document)
    user, problem = auth.user(request)
    if user is None:
        log.info("refused %s %s from %s: %s", request.method, path, request.remote, problem)
        return _status(401, f"Unauthorized: {problem}")
    takes_body = request.method in BODY_METHODS
    unsupported = media_type_problem(request.headers.get(hdrs.CONTENT_TYPE)) if takes_body else None
    if unsupported is not None:  # before anything else is read: a page's text/plain POST through kubectl proxy
        return _to_web(error_response(unsupported))
    try:
        target = resolve(request.method, path)
    except ApiError as exc:
        return _to_web(error_response(exc))
    attrs = target.attributes()
    try:
        decision = await asyncio.to_thread(state["authorizer"].check, user, attrs)
    except Exception as exc:
        log.warning("SubjectAccessReview for %s (%s) failed: %s", user.name, attrs.describe(), exc)
        return _to_web(error_response(ApiError(503, f"cannot check whether {user.name} may {attrs.describe()}: "
                                                    f"{exc}; retry", retry_after=1)))
    if not decision.allowed:
        why = f": {decision.reason}" if decision.reason else ""
        resource = target.route.resource
        return _status(403, f'{resource}.{GROUP} "{target.name}" is forbidden: User "{user.name}" cannot '
                            f"{attrs.describe()}{why}", name=target.name, group=GROUP, kind=resource)
    try:
        body = await read_body(request) if takes_body else b""
    except ApiError as exc:
        return _to_web(error_response(exc))
    call = functools.partial(dispatch, state["api"], target, request.query_string, body, sender=sender_of(user.name))
    long_poll = target.route.subresource == STREAM or (target.route.resource == conv.RESOURCE
                                                       and target.route.subresource == "posts"
                                                       and target.route.method == "GET")
    if long_poll:  # long polls wait in their own pool, never in the default executor's
        response = await asyncio.get_running_loop().run_in_executor(state["stream_pool"], call)
    else:
        response = await asyncio.to_thread(call)
    return _to_web(response)


def build_app(api: TaskApi, auth: Authentication, authorizer: Authorizer) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1)
    pool = ThreadPoolExecutor(max_workers=MAX_WAITERS + 4, thread_name_prefix="task-api-stream")
    app[STATE_KEY] = {"api": api, "auth": auth, "authorizer": authorizer, "stream_pool": pool}
    app.router.add_route("*", "/{tail:.*}", handle)

    async def stop_pool(_app: web.Application) -> None:
        pool.shutdown(wait=False, cancel_futures=True)

    app.on_cleanup.append(stop_pool)
    return app


async def serve(app: web.Application, port: int, kube: KubeClients | None, host: str = "0.0.0.0") -> None:
    """Serve ``app`` until cancelled; re-read the request-header ConfigMap through ``kube`` (None: never) and the
    serving certificate's files every REFRESH_SECONDS."""
    auth: Authentication = app[STATE_KEY]["auth"]
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=auth.context).start()
        log.info("task API (aggregated API %s) on https://%s:%d", GROUP, host, port)
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            await refresh(auth, kube, "task API")
    finally:
        await runner.cleanup()


def _authentication(settings: OperatorSettings, kube: KubeClients) -> Authentication:
    """The task API's Authentication; ConfigError saying in one line why it cannot be had."""
    return authentication(Path(settings.task_api_cert_dir), kube,
                          f"the task API (UNICORE_TASK_API_PORT={settings.task_api_port})", "UNICORE_TASK_API_CERT_DIR")


def task_api_problem(settings: OperatorSettings) -> str | None:
    """The start-up check (``main``, before Kopf starts) as one line: why the task API cannot be served (the
    request-header ConfigMap unreadable or missing, no usable certificate), or None (``startup_problem``)."""
    if not settings.task_api_port:
        return None
    return startup_problem(lambda kube: _authentication(settings, kube))


async def start_task_api(ctx: OperatorContext) -> None:
    """Start-up hook (``composition``): serve the task API when UNICORE_TASK_API_PORT is set. A missing certificate
    or request-header ConfigMap stops the operator (kopf.PermanentError), saying which in one line."""
    import kopf

    port = ctx.settings.task_api_port
    if not port:
        return
    try:
        auth = await asyncio.to_thread(_authentication, ctx.settings, ctx.kube)
    except ConfigError as exc:
        raise kopf.PermanentError(str(exc)) from exc
    api = TaskApi(ctx.store, context_lookup(ctx), on_decided=decision_events(ctx),
                  approval_timeout_seconds=ctx.settings.approval_timeout_seconds)
    app = build_app(api, auth, Authorizer(ctx.kube.core.create))
    task = asyncio.get_running_loop().create_task(serve(app, port, ctx.kube), name="unicore-task-api")
    ctx.background.append(task)
