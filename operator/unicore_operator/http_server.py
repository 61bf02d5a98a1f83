"""The operator's plain HTTP server (UNICORE_HTTP_PORT): /healthz, /readyz, plus routes other modules register (the
composition root adds /metrics). No task data is served here: the task API is an aggregated API on its own TLS port
(task_api/server.py).

Seam for other modules: the composition root calls ``add_routes(installer)`` with a function that adds routes to the
aiohttp application; it runs when the server starts, with the OperatorContext::

    from unicore_operator import http_server
    http_server.add_routes(lambda app, ctx: app.router.add_get("/metrics", handler))
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from unicore_operator.context import OperatorContext
from unicore_operator.log import logger

READY_PING_SECONDS = 3.0  # under the chart's readinessProbe timeoutSeconds (5)

RouteInstaller = Callable[[web.Application, OperatorContext], None]
CONTEXT_KEY: web.AppKey[OperatorContext] = web.AppKey("unicore_context", OperatorContext)

_installers: list[RouteInstaller] = []


def add_routes(installer: RouteInstaller) -> RouteInstaller:
    """Register ``installer`` (usable as a decorator)."""
    if installer not in _installers:
        _installers.append(installer)
    return installer


async def healthz(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT_KEY]
    dead = [task.get_name() for task in ctx.background if task.done() and not task.cancelled()
            and task.get_name().startswith("unicore-")]
    if dead:
        return web.json_response({"status": "unhealthy", "dead": dead}, status=500)
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT_KEY]
    if not ctx.ready.is_set():
        return web.json_response({"status": "starting"}, status=503)
    try:
        # The client retries through blips for UNICORE_REDIS_RETRY_SECONDS; a probe answers within its own timeout.
        await asyncio.wait_for(ctx.redis.aio.ping(), READY_PING_SECONDS)
    except Exception as exc:
        return web.json_response({"status": "redis unavailable", "error": str(exc) or type(exc).__name__}, status=503)
    return web.json_response({"status": "ready"})


def build_app(ctx: OperatorContext) -> web.Application:
    app = web.Application()
    app[CONTEXT_KEY] = ctx
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    for installer in _installers:
        installer(app, ctx)
    return app


async def start(ctx: OperatorContext, port: int, host: str = "0.0.0.0") -> Any:
    """Start serving; returns the runner (``await runner.cleanup()`` stops it)."""
    runner = web.AppRunner(build_app(ctx), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    logger.info("HTTP server on %s:%d (/healthz, /readyz%s)", host, port,
                "".join(f", {r.resource.canonical}" for r in runner.app.router.routes()
                        if r.resource is not None and r.resource.canonical not in ("/healthz", "/readyz")))
    return runner
