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
import os
import ssl
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aiohttp import hdrs, web
from kubernetes.client.rest import ApiException
from unicore.errors import ConfigError

from unicore_operator.approvals import decision_events
from unicore_operator.context import OperatorContext
from unicore_operator.indexes import first
from unicore_operator.kube import KubeClients
from unicore_operator.log import logger
from unicore_operator.settings import OperatorSettings
from unicore_operator.task_api.authn import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    CONFIGMAP_PATH,
    AuthConfigError,
    RequestHeaderConfig,
    UserInfo,
    client_cert_problem,
    user_from_headers,
)
from unicore_operator.task_api.authz import Authorizer
from unicore_operator.task_api.bodies import BODY_METHODS, MAX_BODY_BYTES, declared_length, media_type_problem, over_cap
from unicore_operator.task_api.errors import ApiError, task_not_found
from unicore_operator.task_api.lookup import LookupUnavailable, TaskLookup
from unicore_operator.task_api.routes import (
    GROUP,
    RESOURCE,
    ApiResponse,
    discovery,
    dispatch,
    error_response,
    openapi,
    resolve,
)
from unicore_operator.task_api.service import TaskApi, sender_of
from unicore_operator.task_api.stream import MAX_WAITERS, STREAM

__all__ = ["Authentication", "build_app", "context_lookup", "read_auth_config", "serve", "start_task_api"]

log = logger.getChild("task_api")
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
REFRESH_SECONDS = 30.0  # the serving certificate's files and the request-header ConfigMap are checked this often
HEALTH_PATHS = ("/healthz", "/livez", "/readyz")
READER_ROLE = "extension-apiserver-authentication-reader"


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


def read_auth_config(kube: KubeClients) -> RequestHeaderConfig:
    """The request-header settings the API server publishes; AuthConfigError saying why not."""
    where = f"{CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}"
    try:
        found = kube.core.read(CONFIGMAP_PATH)
    except ApiException as exc:
        if exc.status == 403:
            raise AuthConfigError(f"the operator may not read the ConfigMap {where} (bind it the Role {READER_ROLE} "
                                  f"in {CONFIGMAP_NAMESPACE}, as the chart does)") from None
        raise AuthConfigError(f"cannot read the ConfigMap {where}: HTTP {exc.status} {exc.reason}") from None
    if found is None:
        raise AuthConfigError(f"the ConfigMap {where} does not exist: the API server runs without the aggregation "
                              "layer")
    return RequestHeaderConfig.from_configmap(found.get("data"))


def _server_context(cert_dir: Path, config: RequestHeaderConfig) -> ssl.SSLContext:
    # Not create_default_context: that would also trust the system's CAs for client certificates.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_dir / CERT_FILE), str(cert_dir / KEY_FILE))
    context.verify_mode = ssl.CERT_OPTIONAL  # ask every client for a certificate; a wrong one fails the handshake
    context.load_verify_locations(cadata=config.ca_pem)
    return context


class Authentication:
    """The TLS context (serving certificate, request-header CAs) and the current request-header settings.

    The context's trust store only grows (Python cannot drop a CA from it): a CA the API server stopped publishing
    still passes the handshake until the operator restarts, but ``client_cert_problem`` then refuses it."""

    def __init__(self, cert_dir: Path, config: RequestHeaderConfig) -> None:
        self.cert_dir = cert_dir
        self.config = config
        self.context = _server_context(cert_dir, config)
        self.stamp = self._stamp()

    def _stamp(self) -> tuple[float, float]:
        return (os.stat(self.cert_dir / CERT_FILE).st_mtime, os.stat(self.cert_dir / KEY_FILE).st_mtime)

    def update(self, config: RequestHeaderConfig) -> bool:
        """Use new request-header settings; True when they changed."""
        if config == self.config:
            return False
        self.context.load_verify_locations(cadata=config.ca_pem)
        self.config = config
        return True

    def reload_certificate(self) -> bool:
        """Load renewed serving certificate files for new connections; True when they changed."""
        stamp = self._stamp()
        if stamp == self.stamp:
            return False
        self.context.load_cert_chain(str(self.cert_dir / CERT_FILE), str(self.cert_dir / KEY_FILE))
        self.stamp = stamp
        return True

    def user(self, request: web.Request) -> tuple[UserInfo | None, str]:
        """The user the API server vouches for on this request, else (None, why not)."""
        transport = request.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        problem = client_cert_problem(self.config, der)
        if problem:
            return None, problem
        user = user_from_headers(self.config, request.headers.items())
        if user is None:
            return None, (f"the request names no user ({', '.join(self.config.username_headers)}): call this API "
                          "through the Kubernetes API server")
        return user, ""


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
        return _status(403, f'{RESOURCE}.{GROUP} "{target.name}" is forbidden: User "{user.name}" cannot '
                            f"{attrs.describe()}{why}", name=target.name, group=GROUP, kind=RESOURCE)
    try:
        body = await read_body(request) if takes_body else b""
    except ApiError as exc:
        return _to_web(error_response(exc))
    call = functools.partial(dispatch, state["api"], target, request.query_string, body, sender=sender_of(user.name))
    if target.route.subresource == STREAM:  # long polls wait in their own pool, never in the default executor's
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
            try:
                if auth.reload_certificate():
                    log.info("task API: loaded the renewed serving certificate from %s", auth.cert_dir)
            except (OSError, ssl.SSLError) as exc:  # mid-update: try again at the next check
                log.warning("task API: cannot load the serving certificate from %s: %s", auth.cert_dir, exc)
            if kube is not None:
                try:
                    if auth.update(await asyncio.to_thread(read_auth_config, kube)):
                        log.info("task API: the API server's request-header settings changed; using them")
                except (AuthConfigError, ssl.SSLError, OSError) as exc:
                    log.warning("task API: keeping the request-header settings read before: %s", exc)
    finally:
        await runner.cleanup()


def _authentication(settings: OperatorSettings, kube: KubeClients) -> Authentication:
    """The task API's Authentication; ConfigError saying in one line why it cannot be had."""
    port, cert_dir = settings.task_api_port, Path(settings.task_api_cert_dir)
    try:
        config = read_auth_config(kube)
    except AuthConfigError as exc:
        raise ConfigError(f"the task API (UNICORE_TASK_API_PORT={port}) cannot authenticate the API server: "
                          f"{exc}") from exc
    try:
        return Authentication(cert_dir, config)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the task API (UNICORE_TASK_API_PORT={port}) has no usable certificate in "
                          f"UNICORE_TASK_API_CERT_DIR={cert_dir} ({CERT_FILE}, {KEY_FILE}): {exc}") from exc


def task_api_problem(settings: OperatorSettings) -> str | None:
    """The start-up check (``main``, before Kopf starts) as one line: why the task API cannot be served (the
    request-header ConfigMap unreadable or missing, no usable certificate), or None (no task API, the check passed,
    or the API server not reachable yet: then the start-up hook checks once it is)."""
    if not settings.task_api_port:
        return None
    from unicore.kube_config import load_api_client

    try:
        api = load_api_client()
    except Exception:  # the operator's own start-up says why it has no credentials
        return None
    try:
        _authentication(settings, KubeClients(api))
    except ConfigError as exc:
        return str(exc)
    except Exception:  # the API server not reachable (yet): transient, the hook checks again
        return None
    finally:
        api.close()
    return None


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
