"""The trigger endpoint (``triggers``): ``POST /triggers/<namespace>/<name>`` on ``UNICORE_TRIGGER_PORT``, HTTPS with
``tls.crt``/``tls.key`` of ``UNICORE_TRIGGER_CERT_DIR`` when set (the chart: its serving certificate), else plain HTTP
(TLS at the Ingress). Every answer is JSON: ``{"task": ...}`` or ``{"error": "<one line>"}``."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from aiohttp import web
from unicore.errors import ConfigError

from unicore_operator import a2a_server, metrics
from unicore_operator.context import OperatorContext
from unicore_operator.log import logger
from unicore_operator.trigger_events import Refused
from unicore_operator.triggers import ENDPOINT_CAP_BYTES, Triggers

TRIGGERS_KEY: web.AppKey[Triggers] = web.AppKey("unicore_triggers", Triggers)
PATH = "/triggers/{namespace}/{name}"


DISCARD_MAX = 4 * ENDPOINT_CAP_BYTES  # an oversized body up to this is read and dropped, so its sender gets the 413


async def _discard(request: web.Request) -> None:
    """Read and drop what is left of the body (up to ``DISCARD_MAX``): a client still sending when the answer
    comes sees a reset connection instead of the 413. Beyond that the connection is simply closed."""
    dropped = 0
    while dropped < DISCARD_MAX:
        chunk = await request.content.readany()
        if not chunk:
            return
        dropped += len(chunk)


async def _read_capped(request: web.Request, cap: int) -> bytes:
    if request.content_length is not None and request.content_length > cap:
        await _discard(request)
        raise Refused(413, f"the body ({request.content_length} bytes) is over the endpoint's cap of {cap} bytes")
    body = await request.content.read(cap + 1)
    if len(body) > cap:
        await _discard(request)
        raise Refused(413, f"the body is over the endpoint's cap of {cap} bytes")
    return body


async def deliver(request: web.Request) -> web.Response:
    triggers = request.app[TRIGGERS_KEY]
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    try:
        if not triggers.ctx.ready.is_set():
            raise Refused(503, "the operator is starting")
        body = await _read_capped(request, ENDPOINT_CAP_BYTES)
        outcome = await triggers.deliver(namespace, name, dict(request.headers), body)
    except Refused as exc:
        metrics.trigger_event("refused")
        headers = {"Retry-After": "60"} if exc.status == 429 else None
        if exc.status >= 500:
            logger.warning("trigger %s/%s: %s", namespace, name, exc.message)
        return web.json_response({"error": exc.message}, status=exc.status, headers=headers)
    return web.json_response(outcome.body, status=outcome.status)


def build_app(ctx: OperatorContext) -> web.Application:
    app = web.Application(client_max_size=ENDPOINT_CAP_BYTES + 1)
    app[TRIGGERS_KEY] = Triggers(ctx)
    app.router.add_post(PATH, deliver)
    a2a_server.add_routes(app, ctx)  # A2A agents beside the triggers (docs/a2a.md)
    return app


def _tls(cert_dir: str) -> ssl.SSLContext | None:
    if not cert_dir:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
    return context


async def serve(ctx: OperatorContext, port: int, host: str = "0.0.0.0") -> None:
    runner = web.AppRunner(build_app(ctx), access_log=None)
    await runner.setup()
    tls = _tls(ctx.settings.trigger_cert_dir)
    try:
        await web.TCPSite(runner, host, port, ssl_context=tls).start()
        logger.info("trigger endpoint on %s://%s:%d/triggers/<namespace>/<name>", "https" if tls else "http", host,
                    port)
        await asyncio.Event().wait()  # until cancelled at shutdown
    finally:
        await runner.cleanup()


async def start_triggers(ctx: OperatorContext) -> None:
    """Start-up hook (``composition``): serve the trigger endpoint when UNICORE_TRIGGER_PORT is set; a certificate
    that cannot be loaded stops the operator at start-up with the reason."""
    if not ctx.settings.trigger_port:
        return
    try:
        _tls(ctx.settings.trigger_cert_dir)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the trigger endpoint has no usable certificate in UNICORE_TRIGGER_CERT_DIR="
                          f"{ctx.settings.trigger_cert_dir} (tls.crt, tls.key): {exc}") from exc
    ctx.background.append(asyncio.get_running_loop().create_task(serve(ctx, ctx.settings.trigger_port),
                                                                 name="unicore-triggers"))


__all__ = ["PATH", "build_app", "deliver", "start_triggers"]
