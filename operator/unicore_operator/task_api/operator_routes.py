"""Wiring the task API into the operator's aiohttp server (``unicore_operator.http_server.add_routes``).

The composition root (``unicore_operator.composition``) adds ``install`` to the server. Requests run
the synchronous TaskApi in a worker thread; AgentTasks are looked up in the operator's Kopf index, with one
GET as a fallback for a task created a moment ago, and only in the namespaces the operator watches.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from unicore_operator.context import OperatorContext
from unicore_operator.indexes import first
from unicore_operator.task_api.errors import ApiError, task_not_found
from unicore_operator.task_api.lookup import LookupUnavailable, TaskLookup
from unicore_operator.task_api.routes import MAX_BODY_BYTES, ApiResponse, dispatch
from unicore_operator.task_api.service import TaskApi


def context_lookup(ctx: OperatorContext) -> TaskLookup:
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


async def _read_capped(request: web.Request, cap: int = MAX_BODY_BYTES) -> bytes:
    body = await request.content.read(
        cap + 1
    )  # aiohttp decodes chunked bodies (the API server's proxy uses them)
    if len(body) > cap:
        raise ApiError(413, f"the request body is over the cap of {cap} bytes; nothing was queued")
    return body


def _to_web(response: ApiResponse) -> web.Response:
    return web.Response(
        status=response.status,
        body=response.encoded(),
        content_type=response.content_type,
        headers={"Cache-Control": "no-store", **response.headers},
    )


def install(app: web.Application, ctx: OperatorContext) -> None:
    api = TaskApi(ctx.store, context_lookup(ctx))

    async def handle(request: web.Request) -> web.Response:
        try:
            body = await _read_capped(request) if request.method in ("POST", "PUT", "PATCH") else b""
        except ApiError as exc:
            return _to_web(ApiResponse(exc.status, exc.body()))
        response = await asyncio.to_thread(
            dispatch, api, request.method, request.path, request.query_string, body
        )
        return _to_web(response)

    app.router.add_route("*", "/v1", handle)
    app.router.add_route("*", "/v1/{tail:.*}", handle)


