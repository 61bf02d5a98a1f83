"""A turn's connections to MCP servers, through the official ``mcp`` SDK (docs/mcp.md).

The SDK is asynchronous and the turn is not, so a turn that uses MCP servers runs one asyncio loop in a daemon thread
(``LoopThread``) and holds one session per server on it (``ServerConnection``): connected and its tools listed once,
at the start of the turn (bounded by ``timeoutSeconds``), kept open for the turn's calls, closed when the turn ends.
A call blocks the turn's thread until its result, its timeout, the server's connection closing, or the turn's cancel
event; every failure is an ``McpServerError`` (a ``ToolError``: the model gets an error tool result, the turn goes on).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO, TypeVar

import httpx2
import mcp_types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from unicore.errors import ToolError
from unicore.log import get_logger
from unicore.mcp_config import ResolvedMCPServer
from unicore.tools.mcp_stderr import StderrPump

log = get_logger("mcp")

T = TypeVar("T")
CLOSE_SECONDS = 10.0  # closing a session (a stdio server gets its stdin closed, then is terminated)
GRACE_SECONDS = 5.0  # the turn's thread waits this much past a call's own timeout before it gives up on the loop
PROGRESS_LOG_SECONDS = 1.0  # at most one progress line per call and second
# A streamable HTTP server that refuses the connection (a pod starting next to the task that uses it, a rolling
# restart) is connected to again with backoff for this long at most (and never past timeoutSeconds) before the turn
# goes on without it.
CONNECT_RETRY_SECONDS = 20.0
STDERR_DRAIN_SECONDS = 2.0  # at close, a stopped stdio server's last stderr lines are awaited this long at most

ProgressHandler = Callable[[float, float | None, str | None], None]


class McpServerError(ToolError):
    """An MCP server could not be reached, did not answer in time, or failed during a call."""


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or what an exception group wraps) is a refused or unreachable connection."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return isinstance(exc, httpx2.ConnectError | ConnectionRefusedError)


def describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups (anyio's task groups wrap the real cause)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class LoopThread:
    """An asyncio loop in a daemon thread; ``run`` blocks the caller until a coroutine's result."""

    def __init__(self, name: str = "unicore-mcp") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        async def cancel_rest() -> None:
            current = asyncio.current_task()
            rest = [task for task in asyncio.all_tasks() if task is not current]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            self.run(cancel_rest(), CLOSE_SECONDS)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.warning("MCP loop: tasks did not stop: %s", describe(exc))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CLOSE_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


class ServerConnection:
    """One MCP server's session for one turn. ``open`` and ``aclose`` run on the loop; ``call`` in the turn's
    thread."""

    def __init__(self, server: ResolvedMCPServer, runner: LoopThread, *, cwd: Path,
                 environ: Mapping[str, str]) -> None:
        self.server = server
        self.name = server.name
        self.runner = runner
        self.cwd = cwd
        self.environ = environ
        self.broken = ""  # why the session is gone (empty while it is open)
        self.refused = False  # the last attempt to connect was refused (a server not listening yet)
        self._client: Client | None = None
        self._closing: asyncio.Event | None = None
        self._gone: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._errlog: TextIO | None = None  # a stdio server's stderr: the pump's pipe, or /dev/null
        self._stderr: StderrPump | None = None

    # ---- on the loop

    def _headers(self) -> dict[str, str]:
        spec = self.server.spec
        headers = dict(spec.headers)
        for header, variable in spec.headers_from_env.items():
            value = self.environ.get(variable)
            if value is None:
                raise McpServerError(f"header {header}: the variable {variable} (headersFromEnv) is not set")
            headers[header] = value
        return headers

    async def _transport(self, stack: AsyncExitStack) -> Any:
        spec = self.server.spec
        if spec.url is not None:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=self._headers(), timeout=httpx2.Timeout(spec.timeout_seconds, read=None)))
            return streamable_http_client(spec.url, http_client=http)
        assert spec.command is not None
        params = StdioServerParameters(command=spec.command, args=spec.args, env=spec.env or None, cwd=self.cwd)
        return stdio_client(params, errlog=self._stderr_sink())

    def _stderr_sink(self) -> TextIO:
        """Where a stdio server's stderr goes: through a ``StderrPump`` into the turn's own stderr (its log file),
        escaped and bounded; nowhere when the turn has no stderr file."""
        if self._errlog is None:
            try:
                self._stderr = StderrPump(self.name, sys.stderr.fileno())
                self._errlog = self._stderr.errlog
            except (AttributeError, OSError, ValueError):
                self._errlog = open(os.devnull, "w")  # noqa: SIM115 - closed when the session ends
        return self._errlog

    def _close_errlog(self) -> None:
        """This process's end of the server's stderr: the server started with its own copy."""
        if self._errlog is not None and not self._errlog.closed:
            self._errlog.close()

    async def _hold(self, ready: asyncio.Future[list[mcp_types.Tool]]) -> None:
        assert self._closing is not None and self._gone is not None
        try:
            async with AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = await stack.enter_async_context(
                    Client(transport, cache=None, read_timeout_seconds=self.server.spec.timeout_seconds,
                           client_info=mcp_types.Implementation(name="unicore", version="0.1.0")))
                self._close_errlog()  # the server runs: it holds its stderr itself
                tools = await _list_tools(client)
                self._client = client
                ready.set_result(tools)
                await self._closing.wait()
                self.broken = "closed at the end of the turn"
        except asyncio.CancelledError:
            self.broken = self.broken or "connecting was abandoned"
            raise
        except BaseException as exc:  # noqa: BLE001 - a failing server must never fail the turn
            self.broken = describe(exc)
            self.refused = refused(exc)
            log.warning("MCP server %s: session ended: %s", self.name, self.broken)
            if not ready.done():
                ready.set_exception(McpServerError(self.broken))
        finally:
            self._client = None
            self._close_errlog()
            self._gone.set()

    async def open(self) -> list[mcp_types.Tool]:
        """Connect and list every tool (all pages); McpServerError when that fails or takes over timeoutSeconds. An
        HTTP server that refuses the connection is tried again with backoff for ``CONNECT_RETRY_SECONDS``."""
        loop = asyncio.get_running_loop()
        timeout = self.server.spec.timeout_seconds
        deadline = loop.time() + timeout
        retry_until = loop.time() + min(timeout, CONNECT_RETRY_SECONDS)
        delay = 0.25
        while True:
            try:
                return await self._open_once(deadline - loop.time(), timeout)
            except McpServerError:
                if not (self.server.spec.url and self.refused and loop.time() + delay < retry_until):
                    raise
            log.info("MCP server %s: %s; connecting again in %.2gs", self.name, self.broken, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _open_once(self, remaining: float, timeout: float) -> list[mcp_types.Tool]:
        self.refused = False
        self._closing, self._gone = asyncio.Event(), asyncio.Event()
        ready: asyncio.Future[list[mcp_types.Tool]] = asyncio.get_running_loop().create_future()
        self._holder = asyncio.create_task(self._hold(ready))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), max(remaining, 0.001))
        except TimeoutError:
            self.broken = f"no answer within {timeout:g}s (timeoutSeconds) while connecting and listing tools"
            self._holder.cancel()
            raise McpServerError(self.broken) from None

    async def aclose(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._holder is not None and not self._holder.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._holder), CLOSE_SECONDS)
            except TimeoutError:
                self._holder.cancel()
            except BaseException as exc:  # noqa: BLE001 - closing never fails a turn
                log.debug("MCP server %s: close: %s", self.name, describe(exc))
        if self._stderr is not None:  # the server is stopped: the rest of its stderr, then the pump's last line
            await asyncio.to_thread(self._stderr.finish, STDERR_DRAIN_SECONDS)

    async def _call(self, tool: str, arguments: dict[str, Any], timeout: float,
                    on_progress: ProgressHandler | None) -> mcp_types.CallToolResult:
        client, gone = self._client, self._gone
        if client is None or gone is None or gone.is_set():
            raise McpServerError(f"the session is gone ({self.broken or 'not connected'})")

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if on_progress is not None:
                on_progress(progress, total, message)

        call = asyncio.ensure_future(client.call_tool(tool, arguments, read_timeout_seconds=timeout,
                                                      progress_callback=progress))
        closed = asyncio.ensure_future(gone.wait())
        try:
            done, _ = await asyncio.wait({call, closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if call in done and not gone.is_set():
            try:
                return call.result()
            except Exception as exc:  # noqa: BLE001 - the SDK's errors (MCPError, transport errors) for the model
                raise McpServerError(f"the call failed: {describe(exc)}") from None
        call.cancel()
        if gone.is_set():
            raise McpServerError(f"the server's connection closed during the call ({self.broken})")
        raise McpServerError(f"no result within {timeout:g}s (timeoutSeconds/toolTimeoutSeconds)")

    # ---- in the turn's thread

    def call(self, tool: str, arguments: dict[str, Any], *, timeout: float, cancel: threading.Event,
             on_progress: ProgressHandler | None = None) -> mcp_types.CallToolResult:
        """Run one call; McpServerError (or ToolError when the turn is cancelled) instead of a result."""
        if self._client is None:
            raise McpServerError(f"the session is gone ({self.broken or 'not connected'})")
        future = self.runner.submit(self._call(tool, arguments, timeout, on_progress))
        deadline = time.monotonic() + timeout + GRACE_SECONDS
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if cancel.is_set():
                    future.cancel()
                    raise ToolError("cancelled: the turn is stopping; the MCP call was abandoned") from None
                if time.monotonic() > deadline:
                    future.cancel()
                    raise McpServerError(f"no result within {timeout:g}s (timeoutSeconds)") from None


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a server whose pages never end cannot hang the turn
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def progress_logger(task_id: str, offered: str) -> ProgressHandler:
    """A call's progress notifications as log lines (at most one a second)."""
    last = [0.0]

    def handle(done: float, total: float | None, message: str | None) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_LOG_SECONDS:
            return
        last[0] = now
        of = f"/{total:g}" if total else ""
        log.info("task %s: %s: progress %g%s%s", task_id, offered, done, of, f" ({message})" if message else "")

    return handle


async def gather_quietly(awaitables: list[Awaitable[T]]) -> list[T | BaseException]:
    """``asyncio.gather`` with exceptions returned, for opening and closing every server at once."""
    return await asyncio.gather(*awaitables, return_exceptions=True)


__all__ = ["LoopThread", "McpServerError", "ServerConnection", "describe", "gather_quietly", "progress_logger"]
