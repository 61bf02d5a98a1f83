"""The one builder of Redis clients (runtime, turn processes, operator): a blip in Redis does not fail a turn.

Every client made here retries a command that fails with ``ConnectionError`` / ``TimeoutError`` (a reset
connection, a restarted server, a failover) with exponential backoff and jitter, for a bounded total time
(``UNICORE_REDIS_RETRY_SECONDS``, default 30 s; 0 = fail at once), reconnecting as needed. It uses redis-py's own
machinery (``Retry``, ``EqualJitterBackoff``, ``retry_on_error``) with two additions redis-py 6 lacks:

- the bound is a time, not a count, and one call has one retry loop: redis-py nests retrying calls in one another
  (a command's retry reconnects, whose own retry wraps the socket connect; a health-check PING's retry reconnects,
  whose handshake's first command runs the health check's retry again, ...). A retrying call made while another
  one is in progress in the same thread / asyncio task makes a single attempt and leaves the retrying to the
  outermost loop. Nested loops would multiply, and the PING -> reconnect -> handshake -> PING chain recursed one
  stack level per failed reconnect (a server that refuses new connections for long enough: RecursionError);
- taking a connection from the pool is retried too (redis-py reconnects a pooled connection outside of any
  retry, so a command issued while the server restarts failed on its first attempt).

Text is written valid whatever it holds (a lone surrogate as U+FFFD) and a reply that is not UTF-8 is read with
U+FFFD in place of its bad bytes: ``state.codec``'s ``ENCODING_ERRORS`` handler.

Sockets get timeouts (``UNICORE_REDIS_SOCKET_TIMEOUT``, default 15 s, longer than the longest blocking read:
XREADGROUP BLOCK 2 s), TCP keepalive, and a PING before using a connection idle for more than 15 s, so a dead or
half-open connection is noticed and replaced instead of hanging a turn.

A URL no client can be built from (scheme, port, path, options) is refused before any client exists:
``check_url``'s one-line ``RedisURLError``, which never shows a password. An unreachable server is an error only
once the retry window is over, for a Redis Cluster too (its client connects as it is built: that is retried).

What a retry can repeat: a command whose connection died after the server executed it, but before the reply
arrived, runs twice. docs/architecture.md ("Redis blips") lists which writes that affects.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeAlias, TypeVar, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import AbstractBackoff, EqualJitterBackoff
from redis.client import Pipeline
from redis.cluster import RedisCluster
from redis.connection import Connection, parse_url
from redis.exceptions import AuthenticationError, RedisClusterException, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from unicore.errors import ConfigError
from unicore.log import get_logger
from unicore.settings import RedisClientSettings
from unicore.store.codec import ENCODING_ERRORS

log = get_logger("state.client")

# The client every store function takes: what ``build_client`` returns. A Redis Cluster client is one too (typed so
# by ``build_client``: it has the same command API); the few places that must tell them apart check its class.
RedisClient: TypeAlias = redis.Redis
RedisPipeline: TypeAlias = Pipeline  # ``RedisClient.pipeline()``'s (a cluster client's: its ClusterPipeline)
AsyncRedisClient: TypeAlias = aioredis.Redis  # what ``build_async_client`` returns (the operator's event loop)

T = TypeVar("T")

RETRY_SECONDS_ENV = RedisClientSettings.env_var("retry_seconds")
SOCKET_TIMEOUT_ENV = RedisClientSettings.env_var("socket_timeout")
CONNECT_TIMEOUT = 5.0
HEALTH_CHECK_INTERVAL = 15
ASYNC_MAX_CONNECTIONS = 32  # connections of one asyncio client (the operator's): commands beyond wait for one
POOL_WAIT_SECONDS = 30.0  # how long a command waits for a free connection before the pool's ConnectionError
BACKOFF_BASE = 0.05  # seconds: about 0.1, 0.2, 0.4, ... (each with jitter), at most BACKOFF_CAP
BACKOFF_CAP = 2.0
RETRY_ERRORS: tuple[type[RedisError], ...] = (RedisConnectionError, RedisTimeoutError)
# Connection errors no retry can mend: a wrong or rotated password (NOAUTH/WRONGPASS; redis-py makes them connection
# errors) fails at once instead of after the whole retry window.
FINAL_ERRORS: tuple[type[RedisError], ...] = (AuthenticationError,)


def is_final(error: BaseException) -> bool:
    """A credential error, also as redis.asyncio reports it (a ConnectionError raised from the AuthenticationError)."""
    return any(isinstance(e, FINAL_ERRORS) for e in (error, error.__cause__, error.__context__))
# REDIS_URL schemes that name a Redis Cluster (build_client / build_async_client return cluster clients for them).
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# The window of the outermost retrying call in progress in this thread / asyncio task (None: none is). A context
# copied while one was open (a task or thread started from inside a call) sees it closed once that call has ended.
_window: ContextVar[_Window | None] = ContextVar("unicore_redis_retry_window", default=None)


def retry_seconds() -> float:
    """How long a Redis command keeps retrying through connection failures (``UNICORE_REDIS_RETRY_SECONDS``)."""
    return RedisClientSettings.from_env(only={"retry_seconds"}).retry_seconds


def _backoff() -> AbstractBackoff:
    return EqualJitterBackoff(cap=BACKOFF_CAP, base=BACKOFF_BASE)


def _nested() -> bool:
    """Whether a retrying call is in progress in this thread / asyncio task (then it does the retrying)."""
    window = _window.get()
    return window is not None and window.open


class _Window:
    """The retry loop of the outermost retrying call: its deadline and failure count (open until the call ends)."""

    def __init__(self, seconds: float, backoff: AbstractBackoff) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.backoff = backoff
        self.failures = 0
        self.open = True
        backoff.reset()
        self._token = _window.set(self)

    def next_delay(self, error: Exception) -> float:
        """Seconds to wait before the next attempt; re-raises ``error`` once the window is used up."""
        self.failures += 1
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise error
        if self.failures == 1:
            log.warning("Redis unavailable (%s: %s); retrying for up to %.0f s", type(error).__name__, error,
                        self.seconds)
        return min(self.backoff.compute(self.failures), remaining)

    def close(self) -> None:
        self.open = False
        _window.reset(self._token)


class BoundedRetry(Retry):
    """redis-py's ``Retry`` bounded by a total time instead of a count; nested calls make one attempt (module doc)."""

    def __init__(self, seconds: float, backoff: AbstractBackoff | None = None) -> None:
        self.seconds = seconds
        self.policy = backoff or _backoff()
        super().__init__(self.policy, -1, RETRY_ERRORS)

    def errors(self) -> tuple[type[Exception], ...]:
        return tuple(getattr(self, "_supported_errors", RETRY_ERRORS))  # redis-py adds retry_on_error's here

    def call_with_retry(self, do: Callable[[], T], fail: Callable[[Exception], Any]) -> T:
        errors = self.errors()
        if _nested():
            try:
                return do()
            except errors as error:
                fail(error)  # this level's clean-up (disconnect); the outer loop retries
                raise
        window = _Window(self.seconds, self.policy)
        try:
            while True:
                try:
                    return do()
                except errors as error:
                    if is_final(error):
                        raise
                    failed: Exception = error
                try:
                    fail(failed)  # disconnects; raises ``failed`` for errors the connection must not retry
                except errors as error:
                    if error is failed:
                        raise
                    failed = error  # a handler that reconnects (PubSub's) failed to: one more failed attempt
                time.sleep(window.next_delay(failed))
        finally:
            window.close()


class AsyncBoundedRetry(AsyncRetry):
    """``BoundedRetry`` for ``redis.asyncio`` clients (the operator's event loop)."""

    def __init__(self, seconds: float, backoff: AbstractBackoff | None = None) -> None:
        self.seconds = seconds
        self.policy = backoff or _backoff()
        super().__init__(self.policy, -1, RETRY_ERRORS)

    def errors(self) -> tuple[type[Exception], ...]:
        return tuple(getattr(self, "_supported_errors", RETRY_ERRORS))

    async def call_with_retry(self, do: Callable[[], Awaitable[T]], fail: Callable[[Any], Any]) -> T:
        errors = self.errors()
        if _nested():
            try:
                return await do()
            except errors as error:
                await fail(error)
                raise
        window = _Window(self.seconds, self.policy)
        try:
            while True:
                try:
                    return await do()
                except errors as error:
                    if is_final(error):
                        raise
                    failed: Exception = error
                try:
                    await fail(failed)
                except errors as error:
                    if error is failed:
                        raise
                    failed = error
                await asyncio.sleep(window.next_delay(failed))
        finally:
            window.close()


class RetryingConnectionPool(redis.ConnectionPool):
    """Taking a connection (which reconnects a dropped one) retries under the connections' ``retry`` too."""

    def get_connection(self, *args: Any, **options: Any) -> Any:  # args: deprecated in redis-py 5.3, passed on
        get = super().get_connection
        retry = self.connection_kwargs.get("retry")
        if not isinstance(retry, Retry):
            return get(*args, **options)
        return retry.call_with_retry(lambda: get(*args, **options), lambda _error: None)


async def _ignore(_error: Any) -> None:
    return None


class AsyncRetryingConnectionPool(aioredis.ConnectionPool):
    """``RetryingConnectionPool`` for ``redis.asyncio``."""

    async def get_connection(self, *args: Any, **options: Any) -> Any:
        get = super().get_connection
        retry = self.connection_kwargs.get("retry")
        if not isinstance(retry, AsyncRetry):
            return await get(*args, **options)
        return await retry.call_with_retry(lambda: get(*args, **options), _ignore)


class AsyncBoundedConnectionPool(AsyncRetryingConnectionPool, aioredis.BlockingConnectionPool):
    """``AsyncRetryingConnectionPool`` that opens at most ``max_connections`` connections; a command waits for a free
    one (up to ``timeout`` seconds, then the pool's ConnectionError, which the retry covers).

    redis.asyncio's own pool opens a connection for every command that finds none free, without limit: an operator
    starting with 4,000 new AgentTasks ran 4,000 snapshots at once and held 4,000 connections (each with its read
    buffers: 2 GB of memory, and as many server-side clients)."""


def client_options(
    url: str, *, retry_for: float | None = None, is_async: bool = False, health_check_interval: float | None = None
) -> dict[str, Any]:
    """Connection keyword arguments of every UniCore Redis client (options in the URL's query string win).

    ``health_check_interval``: seconds a connection may stay idle before it is PINGed (default 15; tests lower it).
    """
    seconds = retry_seconds() if retry_for is None else retry_for
    options: dict[str, Any] = {
        "socket_timeout": RedisClientSettings.from_env(only={"socket_timeout"}).socket_timeout or None,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "health_check_interval": HEALTH_CHECK_INTERVAL if health_check_interval is None else health_check_interval,
        "retry": AsyncBoundedRetry(seconds) if is_async else BoundedRetry(seconds),
        "retry_on_error": list(RETRY_ERRORS),
        "encoding_errors": ENCODING_ERRORS,  # text is written valid, a reply that is not UTF-8 read (state.codec)
    }
    if not url.startswith("unix:"):
        options["socket_keepalive"] = True
    return options


def cluster_retries(seconds: float) -> int:
    """The retry count a Redis Cluster client gets for a window of ``seconds``.

    redis-py's cluster clients retry a whole command (re-reading the slot map between attempts) a number of times
    (``Retry.get_retries()``: a negative count would mean no attempt at all) and give each node connection no retries
    of its own, so the time-bounded ``BoundedRetry`` cannot be theirs. This is the number of backoffs
    (``BACKOFF_BASE`` doubling, capped at ``BACKOFF_CAP``, jitter up to half of each) whose full lengths add up to
    ``seconds``: about the same window, ended by a count rather than a clock."""
    retries, total, delay = 0, 0.0, BACKOFF_BASE
    while total < seconds:
        delay = min(delay * 2, BACKOFF_CAP)
        total += delay
        retries += 1
    return retries


def cluster_seed_url(url: str) -> str | None:
    """For a URL naming a Redis Cluster (``redis+cluster://[user:password@]host:port`` or ``rediss+cluster://...``
    for TLS: any one node; the client discovers the rest), the plain URL of that node; None for any other URL."""
    scheme, sep, rest = url.partition("://")
    plain = CLUSTER_SCHEMES.get(scheme.lower()) if sep else None
    return f"{plain}://{rest}" if plain else None


class RedisURLError(ConfigError):
    """A Redis URL no client can be built from: one line, its password shown as ``***``."""


URL_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)
_SECRETS = (re.compile(r"(://[^/?#@]*?:)[^/?#]*@"), re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE))


def shown_url(url: str) -> str:
    """``url`` for a message: its password (in the user part or a ``password=`` option) as ``***``, cut at 200."""
    for secret in _SECRETS:
        url = secret.sub(r"\1***@" if secret is _SECRETS[0] else r"\1***", url)
    return url if len(url) <= 200 else url[:200] + "..."


def _url_problem(url: str) -> str | None:
    """Why no client can be built from ``url`` (None: one can). Uses redis-py's own parser and builds (without
    connecting) the connection it would make, so an option it would refuse at the first command is refused now."""
    scheme, sep, _rest = url.partition("://")
    if not sep or scheme not in URL_SCHEMES:
        return f"the scheme must be one of {', '.join(s + '://' for s in URL_SCHEMES)}"
    seed = cluster_seed_url(url)
    try:
        options = parse_url(seed or url)
        if seed is not None:  # the cluster client drops options it does not know
            if not options.get("host"):
                return "no host (a Redis Cluster URL names any one node: host:port)"
            if int(options.get("db") or 0) != 0:
                return "a Redis Cluster has only database 0"
            return None
        if scheme == "unix" and not options.get("path"):
            return "no socket path (unix:///path/to/redis.sock)"
        options.pop("max_connections", None)  # the pool's, not the connection's
        options.pop("connection_class", Connection)(**options)
    except TypeError as exc:
        unknown = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
        return f"unknown option {unknown.group(1)!r}" if unknown else str(exc)
    except (ValueError, RedisError) as exc:
        return str(exc)
    return None


def check_url(url: str, name: str = "Redis URL") -> str:
    """``url`` when a client can be built from it; ``RedisURLError`` (one line, naming ``name``) otherwise."""
    problem = _url_problem(url)
    if problem is not None:
        raise RedisURLError(f"invalid {name} {shown_url(url)!r}: {problem}")
    return url


def _connected_cluster(make: Callable[[], T], seconds: float) -> T:
    """``make()`` (a cluster client, which connects as it is built) retried for ``seconds`` while no node can be
    reached, like a command; other cluster errors at once."""

    def attempt() -> T:
        try:
            return make()
        except RedisClusterException as exc:
            cause = exc.__cause__
            if isinstance(cause, RETRY_ERRORS) and not is_final(cause):  # no startup node could be reached
                raise RedisConnectionError(str(exc)) from exc
            raise

    return BoundedRetry(seconds).call_with_retry(attempt, lambda _error: None)


def build_client(
    url: str, *, decode_responses: bool = True, retry_for: float | None = None,
    health_check_interval: float | None = None,
) -> RedisClient:
    """A synchronous client for ``url`` that rides out connection blips (see the module doc); ``RedisURLError`` for
    a URL no client can be built from."""
    check_url(url)
    options = client_options(url, retry_for=retry_for, health_check_interval=health_check_interval)
    seed = cluster_seed_url(url)
    if seed is not None:  # same command API; redis-py's sync cluster client ignores health_check_interval
        seconds = options.pop("retry").seconds
        options["retry"] = Retry(_backoff(), cluster_retries(seconds), RETRY_ERRORS)
        return cast(RedisClient, _connected_cluster(
            lambda: RedisCluster.from_url(seed, decode_responses=decode_responses, **options), seconds))
    pool = RetryingConnectionPool.from_url(url, decode_responses=decode_responses, **options)
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # type: ignore[attr-defined]  # close() also closes the pool
    return client


def build_async_client(
    url: str, *, decode_responses: bool = False, retry_for: float | None = None,
    health_check_interval: float | None = None, max_connections: int = ASYNC_MAX_CONNECTIONS,
) -> AsyncRedisClient:
    """A ``redis.asyncio`` client for ``url`` with the same retries, timeouts and health checks, and at most
    ``max_connections`` connections (``AsyncBoundedConnectionPool``; a Redis Cluster client is not bounded);
    ``RedisURLError`` for a URL no client can be built from."""
    check_url(url)
    options = client_options(url, retry_for=retry_for, is_async=True, health_check_interval=health_check_interval)
    seed = cluster_seed_url(url)
    if seed is not None:
        options["retry"] = AsyncRetry(_backoff(), cluster_retries(options.pop("retry").seconds), RETRY_ERRORS)
        # Not bounded: redis.asyncio's cluster nodes refuse a command over their max_connections instead of waiting.
        return cast(AsyncRedisClient, AsyncRedisCluster.from_url(seed, decode_responses=decode_responses, **options))
    pool = AsyncBoundedConnectionPool.from_url(url, decode_responses=decode_responses, max_connections=max_connections,
                                               timeout=POOL_WAIT_SECONDS, **options)
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client
